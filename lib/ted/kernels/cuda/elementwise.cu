// The element-wise passes and bias sums on the GPU: conversions, adds, initialisation, the
// bias and its gradient, dropout and the residual adds. The same shapes and conventions as
// kernels/cpu/elementwise.cpp (backend/ops.hpp).
#include <cstdint>
#include <type_traits>

#include "ted/core/random.hpp"
#include "ted/kernels/cuda/common.cuh"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cuda {
namespace {

template <typename In, typename Out>
__global__ void convert_kernel(const In* src, Out* dst, std::size_t count) {
  TED_GRID_STRIDE(i, count) dst[i] = store<Out>(load(src[i]));
}

template <typename T>
__global__ void add_kernel(const T* a, T* y, std::size_t count) {
  TED_GRID_STRIDE(i, count) y[i] = store<T>(load(y[i]) + load(a[i]));
}

template <typename T>
__global__ void accumulate_kernel(const float* g, T* grad, std::size_t count) {
  TED_GRID_STRIDE(i, count) grad[i] = store<T>(load(grad[i]) + g[i]);
}

// The same three a Pack at a time (count a multiple of the pack, buffers 16-byte aligned).
template <typename In, typename Out>
__global__ void convert_packs_kernel(const In* src, Out* dst, std::size_t packs) {
  constexpr int P = Pack<In>::kSize < Pack<Out>::kSize ? Pack<In>::kSize : Pack<Out>::kSize;
  TED_GRID_STRIDE(i, packs) {
    const Chunk<In, P> in = load_pack<In, P>(src + i * P);
    Chunk<Out, P> out;
    for (int q = 0; q < P; ++q) out.v[q] = store<Out>(load(in.v[q]));
    store_pack(dst + i * P, out);
  }
}

template <typename T>
__global__ void add_packs_kernel(const T* a, T* y, std::size_t packs) {
  constexpr int P = Pack<T>::kSize;
  TED_GRID_STRIDE(i, packs) {
    const Pack<T> x = load_pack(a + i * P);
    Pack<T> out = load_pack(y + i * P);
    for (int q = 0; q < P; ++q) out.v[q] = store<T>(load(out.v[q]) + load(x.v[q]));
    store_pack(y + i * P, out);
  }
}

template <typename T>
__global__ void accumulate_packs_kernel(const float* g, T* grad, std::size_t packs) {
  constexpr int P = Pack<T>::kSize;
  TED_GRID_STRIDE(i, packs) {
    Pack<T> out = load_pack(grad + i * P);
    for (int q = 0; q < P; ++q) out.v[q] = store<T>(load(out.v[q]) + g[i * P + q]);
    store_pack(grad + i * P, out);
  }
}

template <typename T>
__global__ void init_normal_kernel(T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key,
                                   double std, model::SliceMap map) {
  TED_GRID_STRIDE(i, count)
  dst[i] = store<T>(static_cast<float>(
      std * random::normal(seed, random::kInit, key, model::global_index(map, i))));
}

template <typename T>
__global__ void add_bias_kernel(T* y, const T* bias, int rows, int width, int per, int biases) {
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  TED_GRID_STRIDE(i, count) {
    const std::size_t row = i / width, col = i % width;
    const std::size_t b = (row / per) % static_cast<std::size_t>(biases);
    y[i] = store<T>(load(y[i]) + load(bias[b * width + col]));
  }
}

// y[row] += bias[(row / per) mod biases], a Pack at a time: packs of a row across x and threads,
// rows across y (striding past the grid's 65535).
template <typename T>
__global__ void add_bias_rows_kernel(T* y, const T* bias, int rows, int width, int per,
                                     int biases) {
  constexpr int P = Pack<T>::kSize;
  const int j = (blockIdx.x * blockDim.x + threadIdx.x) * P;
  if (j >= width) return;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    T* out = y + static_cast<std::size_t>(row) * width + j;
    const Pack<T> b = load_pack(bias + static_cast<std::size_t>((row / per) % biases) * width + j);
    Pack<T> v = load_pack(out);
    for (int q = 0; q < P; ++q) v.v[q] = store<T>(load(v.v[q]) + load(b.v[q]));
    store_pack(out, v);
  }
}

// Grid: x over column tiles, y over chunks of rows. Each thread sums its N adjacent columns
// (one load of N elements per row: 2 for 16-bit storage where the rows allow it, else 1) over its
// chunk and adds the partials to db (flushing when the chunk crosses into another block of
// rows_per_bias rows; block b's bias is b mod biases).
template <typename T, int N>
__global__ void bias_grad_kernel(const T* dy, float* db, int rows, int width, int per, int biases,
                                 int chunk) {
  const int col = N * (blockIdx.x * blockDim.x + threadIdx.x);
  if (col >= width) return;
  const int first = blockIdx.y * chunk;
  const int last = min(rows, first + chunk);
  if (first >= last) return;
  int block = first / per;
  float part[N] = {};
  auto flush = [&] {
    float* to = db + static_cast<std::size_t>(block % biases) * width + col;
    for (int q = 0; q < N; ++q) atomicAdd(to + q, part[q]);
  };
  for (int r = first; r < last; ++r) {
    if (r / per != block) {
      flush();
      for (int q = 0; q < N; ++q) part[q] = 0;
      block = r / per;
    }
    const Chunk<T, N> v = load_pack<T, N>(dy + static_cast<std::size_t>(r) * width + col);
    for (int q = 0; q < N; ++q) part[q] += load(v.v[q]);
  }
  flush();
}

template <typename T>
__global__ void add_bias_residual_kernel(T* y, const T* bias, const T* residual, std::size_t count,
                                         int width) {
  TED_GRID_STRIDE(i, count)
  y[i] = store<T>((load(y[i]) + load(bias[i % width])) + load(residual[i]));
}

// Dropout (kernels/elementwise.hpp): y = x * the mask of (token row, column).
template <typename T>
__global__ void dropout_kernel(const T* x, T* y, std::size_t count, int width, DropoutKey key) {
  const std::uint32_t threshold = key.threshold();
  const float scale = key.scale<float>();
  TED_GRID_STRIDE(i, count) {
    const std::uint64_t row = key.row_key(static_cast<std::int64_t>(i / width));
    y[i] = store<T>(load(x[i]) * dropout_factor(row, i % width, threshold, scale));
  }
}

// y = residual + dropout(y + bias), in the CPU's order: ((y + bias) * mask) + residual.
template <typename T>
__global__ void bias_dropout_residual_kernel(T* y, const T* bias, const T* residual,
                                             std::size_t count, int width, DropoutKey key) {
  const bool active = key.active();
  const std::uint32_t threshold = key.threshold();
  const float scale = key.scale<float>();
  TED_GRID_STRIDE(i, count) {
    const std::size_t col = i % width;
    float v = load(y[i]);
    if (bias) v += load(bias[col]);
    if (active)
      v *= dropout_factor(key.row_key(static_cast<std::int64_t>(i / width)), col, threshold, scale);
    y[i] = store<T>(v + load(residual[i]));
  }
}

}  // namespace

// Whether a flat buffer of `count` elements can be walked a Pack at a time.
template <typename T>
bool flat_packable(std::size_t count, std::initializer_list<const void*> pointers) {
  return count % Pack<T>::kSize == 0 && packable<T>(Pack<T>::kSize, pointers);
}

template <typename From, typename To>
void convert(Context& ctx, const From* src, To* dst, std::size_t count) {
  if (!count) return;
  if constexpr (std::is_same_v<From, To>) {
    if (src != dst)
      TED_CHECK_CUDA(
          cudaMemcpyAsync(dst, src, count * sizeof(To), cudaMemcpyDeviceToDevice, stream(ctx)));
  } else {
    constexpr int P = Pack<From>::kSize < Pack<To>::kSize ? Pack<From>::kSize : Pack<To>::kSize;
    if (count % P == 0 && packable<From>(0, {src, dst})) {
      launch<convert_packs_kernel<From, To>>(blocks_for(count / P), kThreads, 0, stream(ctx), src,
                                             dst, count / P);
      return;
    }
    launch<convert_kernel<From, To>>(blocks_for(count), kThreads, 0, stream(ctx), src, dst, count);
  }
}

template <typename T>
void add(Context& ctx, const T* a, T* y, std::size_t count) {
  if (!count) return;
  if (flat_packable<T>(count, {a, y})) {
    const std::size_t packs = count / Pack<T>::kSize;
    launch<add_packs_kernel<T>>(blocks_for(packs), kThreads, 0, stream(ctx), a, y, packs);
    return;
  }
  launch<add_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), a, y, count);
}

template <typename T>
void add_bias(Context& ctx, T* y, const T* bias, int rows, int width, int rows_per_bias,
              int biases) {
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  if (!count) return;
  if (packable<T>(width, {y, bias})) {
    const int packs = width / Pack<T>::kSize;
    const unsigned threads = packs < 128 ? static_cast<unsigned>((packs + 31) / 32 * 32) : 128u;
    const dim3 grid((packs + threads - 1) / threads, rows < 65535 ? rows : 65535);
    launch<add_bias_rows_kernel<T>>(grid, threads, 0, stream(ctx), y, bias, rows, width,
                                    rows_per_bias, biases);
    return;
  }
  launch<add_bias_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), y, bias, rows, width,
                             rows_per_bias, biases);
}

template <typename T>
void bias_grad(Context& ctx, const T* dy, float* db, int rows, int width, int rows_per_bias,
               int biases) {
  if (rows == 0 || width == 0) return;
  const int chunk = row_chunk(rows);
  const int pair = !std::is_same_v<T, float> && width % 2 == 0 &&
                   reinterpret_cast<std::uintptr_t>(dy) % (2 * sizeof(T)) == 0;
  const dim3 grid((width / (1 + pair) + 127) / 128, (rows + chunk - 1) / chunk);
  if (pair)
    launch<bias_grad_kernel<T, 2>>(grid, 128, 0, stream(ctx), dy, db, rows, width, rows_per_bias,
                                   biases, chunk);
  else
    launch<bias_grad_kernel<T, 1>>(grid, 128, 0, stream(ctx), dy, db, rows, width, rows_per_bias,
                                   biases, chunk);
}

// db (a parameter gradient, GradOut) += column sums of dy: into fp32, or through an fp32 scratch
// of the bias added into the 16-bit gradient once.
template <typename T>
void bias_grad_into(Context& ctx, const T* dy, GradOut<T> db, int rows, int width,
                    int rows_per_bias, int biases) {
  if (!db) return;
  if (!db.low) {
    bias_grad<T>(ctx, dy, db.master, rows, width, rows_per_bias, biases);
    return;
  }
  const std::size_t count = static_cast<std::size_t>(width) * biases;
  Tensor<float> sums = zeros<float>(ctx.device(), count);
  bias_grad<T>(ctx, dy, sums.data(), rows, width, rows_per_bias, biases);
  accumulate<T>(ctx, sums.data(), db.low, count);
}

template <typename T>
void init_normal(Context& ctx, T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key,
                 double std, const model::SliceMap& map) {
  if (!count) return;
  launch<init_normal_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), dst, count, seed, key,
                                std, map);
}

template <typename T>
void add_bias_residual(Context& ctx, T* y, const T* bias, const T* residual, int rows, int width) {
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  if (!count) return;
  launch<add_bias_residual_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), y, bias,
                                      residual, count, width);
}

template <typename T>
void dropout(Context& ctx, const T* x, T* y, int rows, int width, const DropoutKey& key) {
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  if (!count) return;
  launch<dropout_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), x, y, count, width, key);
}

template <typename T>
void bias_dropout_residual(Context& ctx, T* y, const T* bias, const T* residual, int rows,
                           int width, const DropoutKey& key) {
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  if (!count) return;
  launch<bias_dropout_residual_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), y, bias,
                                          residual, count, width, key);
}

template <typename T>
void accumulate(Context& ctx, const float* g, T* grad, std::size_t count) {
  if (!count) return;
  if (flat_packable<T>(count, {g, grad})) {
    const std::size_t packs = count / Pack<T>::kSize;
    launch<accumulate_packs_kernel<T>>(blocks_for(packs), kThreads, 0, stream(ctx), g, grad, packs);
    return;
  }
  launch<accumulate_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), g, grad, count);
}

#define TED_INSTANTIATE_CONVERT(A, B) \
  template void convert<A, B>(Context&, const A*, B*, std::size_t);
#define TED_INSTANTIATE_CONVERT_FROM(A) \
  TED_INSTANTIATE_CONVERT(A, float)     \
  TED_INSTANTIATE_CONVERT(A, Half)      \
  TED_INSTANTIATE_CONVERT(A, BFloat16)
TED_INSTANTIATE_CONVERT_FROM(float)
TED_INSTANTIATE_CONVERT_FROM(Half)
TED_INSTANTIATE_CONVERT_FROM(BFloat16)

#define TED_INSTANTIATE_ELEMENTWISE(T)                                                          \
  template void add<T>(Context&, const T*, T*, std::size_t);                                    \
  template void accumulate<T>(Context&, const float*, T*, std::size_t);                         \
  template void add_bias<T>(Context&, T*, const T*, int, int, int, int);                        \
  template void bias_grad<T>(Context&, const T*, float*, int, int, int, int);                   \
  template void init_normal<T>(Context&, T*, std::size_t, std::uint64_t, std::uint64_t, double, \
                               const model::SliceMap&);                                         \
  template void bias_grad_into<T>(Context&, const T*, GradOut<T>, int, int, int, int);          \
  template void add_bias_residual<T>(Context&, T*, const T*, const T*, int, int);               \
  template void dropout<T>(Context&, const T*, T*, int, int, const DropoutKey&);                \
  template void bias_dropout_residual<T>(Context&, T*, const T*, const T*, int, int,            \
                                         const DropoutKey&);
TED_INSTANTIATE_ELEMENTWISE(float)
TED_INSTANTIATE_ELEMENTWISE(Half)
TED_INSTANTIATE_ELEMENTWISE(BFloat16)

}  // namespace ted::kernels::cuda
