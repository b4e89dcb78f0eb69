#include "ted/kernels/cpu/elementwise.hpp"

#include <cstdint>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/vector_math.hpp"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

namespace {

// Rows per task of the row-parallel loops: enough work to be worth a wake-up.
constexpr std::int64_t kRowGrain = 16;

// Rows [first, last) of bias + GeLU: hidden += bias (kept for backward), act = gelu(hidden).
template <typename T>
inline void bias_gelu_rows(T* __restrict hidden, const T* __restrict bias, T* __restrict act,
                           std::int64_t first, std::int64_t last, std::int64_t width) {
  for (std::int64_t i = first; i < last; ++i) {
    T* __restrict hrow = hidden + i * width;
    T* __restrict arow = act + i * width;
    for (std::int64_t j = 0; j < width; ++j) {
      const T v = hrow[j] + bias[j];
      hrow[j] = v;
      arow[j] = gelu(v, FastExp{});
    }
  }
}
TED_VECTOR_CLONES void bias_gelu_rows_f32(float* hidden, const float* bias, float* act,
                                          std::int64_t first, std::int64_t last,
                                          std::int64_t width) {
  bias_gelu_rows(hidden, bias, act, first, last, width);
}

// Elements [first, last) of dx = dy * gelu'(x); dx may be dy (in place, element by element).
template <typename T>
inline void gelu_grad_span(const T* __restrict x, const T* dy, T* dx, std::int64_t first,
                           std::int64_t last) {
#pragma GCC ivdep
  for (std::int64_t i = first; i < last; ++i) dx[i] = dy[i] * gelu_grad(x[i], FastExp{});
}
TED_VECTOR_CLONES void gelu_grad_span_f32(const float* x, const float* dy, float* dx,
                                          std::int64_t first, std::int64_t last) {
  gelu_grad_span(x, dy, dx, first, last);
}

}  // namespace

// Parallel over columns: each column is summed by one thread in row order, so the result is
// the serial loop's, whatever the thread count.
template <typename T>
void add_column_sums(const T* y, T* sums, int rows, int width) {
  parallel_for(
      width,
      [&](std::int64_t first, std::int64_t last) {
        for (int i = 0; i < rows; ++i) {
          const T* row = y + static_cast<std::int64_t>(i) * width;
          for (std::int64_t j = first; j < last; ++j) sums[j] += row[j];
        }
      },
      64);
}

template <typename T>
void gelu_forward(const T* x, T* y, std::int64_t count) {
  parallel_for(count, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) y[i] = gelu(x[i], FastExp{});
  });
}

template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t count) {
  parallel_for(count, [&](std::int64_t first, std::int64_t last) {
    if constexpr (std::is_same_v<T, float>)
      gelu_grad_span_f32(x, dy, dx, first, last);
    else
      gelu_grad_span(x, dy, dx, first, last);
  });
}

template <typename T>
void bias_gelu_forward(T* hidden, const T* bias, T* act, int rows, int width) {
  parallel_for(
      rows,
      [&](std::int64_t first, std::int64_t last) {
        if constexpr (std::is_same_v<T, float>)
          bias_gelu_rows_f32(hidden, bias, act, first, last, width);
        else
          bias_gelu_rows(hidden, bias, act, first, last, width);
      },
      kRowGrain);
}

template <typename T>
void gelu_bias_backward(const T* hidden, T* d, T* db, int rows, int width) {
  gelu_backward(hidden, d, d, static_cast<std::int64_t>(rows) * width);
  if (db) add_column_sums(d, db, rows, width);
}

template <typename T>
void add_bias_residual(T* y, const T* bias, const T* residual, int rows, int width) {
  parallel_for(
      rows,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          T* row = y + i * width;
          const T* res = residual + i * width;
          for (int j = 0; j < width; ++j) row[j] = (row[j] + bias[j]) + res[j];
        }
      },
      kRowGrain);
}

template <typename T>
void dropout(const T* x, T* y, int rows, int width, const DropoutKey& key) {
  const std::uint32_t threshold = key.threshold();
  const T scale = key.scale<T>();
  parallel_for(
      rows,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          const std::uint64_t row = key.row_key(i);
          for (int j = 0; j < width; ++j)
            y[i * width + j] = x[i * width + j] * dropout_factor(row, j, threshold, scale);
        }
      },
      kRowGrain);
}

template <typename T>
void bias_dropout_residual(T* y, const T* bias, const T* residual, int rows, int width,
                           const DropoutKey& key) {
  const bool active = key.active();
  const std::uint32_t threshold = key.threshold();
  const T scale = key.scale<T>();
  parallel_for(
      rows,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          T* row = y + i * width;
          const T* res = residual + i * width;
          const std::uint64_t row_key = active ? key.row_key(i) : 0;
          for (int j = 0; j < width; ++j) {
            T v = bias ? row[j] + bias[j] : row[j];
            if (active) v *= dropout_factor(row_key, j, threshold, scale);
            row[j] = v + res[j];
          }
        }
      },
      kRowGrain);
}

#define TED_INSTANTIATE_ELEMENTWISE(T)                                  \
  template void gelu_forward<T>(const T*, T*, std::int64_t);            \
  template void gelu_backward<T>(const T*, const T*, T*, std::int64_t); \
  template void bias_gelu_forward<T>(T*, const T*, T*, int, int);       \
  template void add_column_sums<T>(const T*, T*, int, int);             \
  template void gelu_bias_backward<T>(const T*, T*, T*, int, int);      \
  template void add_bias_residual<T>(T*, const T*, const T*, int, int); \
  template void dropout<T>(const T*, T*, int, int, const DropoutKey&);  \
  template void bias_dropout_residual<T>(T*, const T*, const T*, int, int, const DropoutKey&);

TED_INSTANTIATE_ELEMENTWISE(float)
TED_INSTANTIATE_ELEMENTWISE(double)

}  // namespace ted::kernels::cpu
