#include "ted/kernels/cpu/vocabulary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ted/core/dtype.hpp"
#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

namespace {

// Rows per task of the row-parallel loops: enough work to be worth a wake-up.
constexpr std::int64_t kRowGrain = 16;
// Token rows per task of the embedding.
constexpr std::int64_t kEmbeddingRows = 32;

// Whether a token's row (its word - first_word) is in this slice of the table.
bool in_slice(int row, int words) {
  return row >= 0 && (words < 0 || row < words);
}

}  // namespace

// Rows in parallel; the mean adds the rows' losses in row order (the serial loop's sum).
template <typename T>
T cross_entropy_loss(const T* logits, const std::int32_t* targets, T* log_sum, int n, int vocab) {
  std::vector<double> row_loss(static_cast<std::size_t>(n));
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          const T* row = logits + i * vocab;
          T max = *std::max_element(row, row + vocab);
          T sum = 0;
          for (int j = 0; j < vocab; ++j) sum += std::exp(row[j] - max);
          log_sum[i] = std::log(sum) + max;
          row_loss[i] = static_cast<double>(log_sum[i] - row[targets[i]]);
        }
      },
      kRowGrain);
  double total = 0;
  for (double loss : row_loss) total += loss;
  return static_cast<T>(total / n);
}

template <typename T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, const T* log_sum,
                            T* d_logits, int n, int vocab, T scale, int first_word, int words) {
  const T factor = T(1) / n;
  if (words < 0) words = vocab;
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          const T* row = logits + i * vocab;
          T* drow = d_logits + i * vocab;
          // In place is fine: element j is read before it is written.
          for (int j = 0; j < words; ++j) drow[j] = std::exp(row[j] - log_sum[i]) * factor;
          for (int j = words; j < vocab; ++j) drow[j] = 0;  // padding
          const int target = targets[i] - first_word;
          if (target >= 0 && target < words) drow[target] -= factor;
          for (int j = 0; j < words; ++j) drow[j] *= scale;
        }
      },
      kRowGrain);
}

template <typename T>
void cross_entropy_max(const T* logits, T* row_max, int n, int cols, int words) {
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          const T* row = logits + i * cols;
          row_max[i] =
              words > 0 ? *std::max_element(row, row + words) : -std::numeric_limits<T>::infinity();
        }
      },
      kRowGrain);
}

template <typename T>
void cross_entropy_partials(const T* logits, const std::int32_t* targets, const T* row_max,
                            T* partials, int n, int cols, int first_word, int words) {
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          const T* row = logits + i * cols;
          T sum = 0;
          for (int j = 0; j < words; ++j) sum += std::exp(row[j] - row_max[i]);
          partials[i] = sum;
          const int target = targets[i] - first_word;
          partials[n + i] = target >= 0 && target < words ? row[target] : T(0);
        }
      },
      kRowGrain);
}

// The mean as cross_entropy_loss takes it: the rows' losses added in row order in double.
template <typename T>
T cross_entropy_finish(const T* row_max, const T* partials, T* log_sum, int n) {
  double total = 0;
  for (int i = 0; i < n; ++i) {
    log_sum[i] = std::log(partials[i]) + row_max[i];
    total += static_cast<double>(log_sum[i] - partials[n + i]);
  }
  return static_cast<T>(total / n);
}

template <typename T>
void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x, int n, int seq,
                       int h, int first_word, int words) {
  using C = master_t<T>;
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          const int row = tokens[i] - first_word;
          const bool here = in_slice(row, words);
          const T* t = tok + static_cast<std::int64_t>(row) * h;
          const T* p = pos ? pos + (i % seq) * h : nullptr;
          T* out = x + i * h;
          for (int j = 0; j < h; ++j)
            out[j] = narrow<T>((here ? widen(t[j]) : C(0)) + (p ? widen(p[j]) : C(0)));
        }
      },
      kEmbeddingRows);
}

template <typename T>
void embedding_backward(const std::int32_t* tokens, const T* dx,
                        std::type_identity_t<GradOut<T>> dtok_out,
                        std::type_identity_t<GradOut<T>> dpos_out, int n, int seq, int h,
                        int first_word, int words) {
  using M = master_t<T>;
  M* dtok = dtok_out.master;
  M* dpos = dpos_out.master;
  if (dtok_out.low) {                 // 16-bit: each word's rows summed in row order, added in once
    std::vector<std::int32_t> order;  // the rows of this slice's words, by word, in row order
    for (int i = 0; i < n; ++i)
      if (in_slice(tokens[i] - first_word, words)) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::int32_t a, std::int32_t b) { return tokens[a] < tokens[b]; });
    T* low = dtok_out.low;
    parallel_for(
        h,
        [&](std::int64_t first, std::int64_t last) {
          for (std::size_t s = 0; s < order.size();) {
            std::size_t e = s + 1;
            while (e < order.size() && tokens[order[e]] == tokens[order[s]]) ++e;
            T* row = low + static_cast<std::int64_t>(tokens[order[s]] - first_word) * h;
            for (std::int64_t j = first; j < last; ++j) {
              M sum = 0;
              for (std::size_t k = s; k < e; ++k)
                sum += widen(dx[static_cast<std::int64_t>(order[k]) * h + j]);
              row[j] = narrow<T>(widen(row[j]) + sum);
            }
            s = e;
          }
        },
        64);
  }
  if (dpos_out.low) {  // 16-bit: each position's sum over the sequences, added in once
    T* low = dpos_out.low;
    parallel_for(
        static_cast<std::int64_t>(seq) * h,
        [&](std::int64_t first, std::int64_t last) {
          for (std::int64_t k = first; k < last; ++k) {
            M sum = 0;
            for (std::int64_t i = k / h; i < n; i += seq) sum += widen(dx[i * h + k % h]);
            low[k] = narrow<T>(widen(low[k]) + sum);
          }
        },
        64);
  }
  if (!dtok && !dpos) return;
  // Rows scatter into shared table rows: parallel over columns instead, each column summed
  // in row order by one thread (the serial loop's result).
  parallel_for(
      h,
      [&](std::int64_t first, std::int64_t last) {
        for (int i = 0; i < n; ++i) {
          const T* g = dx + static_cast<std::int64_t>(i) * h;
          const int row = tokens[i] - first_word;
          M* t = dtok && in_slice(row, words) ? dtok + static_cast<std::int64_t>(row) * h : nullptr;
          M* p = dpos ? dpos + static_cast<std::int64_t>(i % seq) * h : nullptr;
          for (std::int64_t j = first; j < last; ++j) {
            if (t) t[j] += widen(g[j]);
            if (p) p[j] += widen(g[j]);
          }
        }
      },
      64);
}

template <typename T>
void lm_head_forward(const T* x, const T* table, T* logits, int n, int h, int rows) {
  if (n > 0 && rows > 0) gemm(false, true, n, rows, h, T(1), x, h, table, h, T(0), logits, rows);
}

template <typename T>
void lm_head_backward(const T* x, const T* table, const T* d_logits, T* dx, T* d_table, int n,
                      int h, int rows) {
  if (n <= 0 || rows <= 0) return;
  if (dx) gemm(false, false, n, h, rows, T(1), d_logits, rows, table, h, T(1), dx, h);
  gemm(true, false, rows, h, n, T(1), d_logits, rows, x, h, T(1), d_table, h);
}

#define TED_INSTANTIATE_VOCABULARY(T)                                                            \
  template T cross_entropy_loss<T>(const T*, const std::int32_t*, T*, int, int);                 \
  template void cross_entropy_backward<T>(const T*, const std::int32_t*, const T*, T*, int, int, \
                                          T, int, int);                                          \
  template void cross_entropy_max<T>(const T*, T*, int, int, int);                               \
  template void cross_entropy_partials<T>(const T*, const std::int32_t*, const T*, T*, int, int, \
                                          int, int);                                             \
  template T cross_entropy_finish<T>(const T*, const T*, T*, int);                               \
  template void lm_head_forward<T>(const T*, const T*, T*, int, int, int);                       \
  template void lm_head_backward<T>(const T*, const T*, const T*, T*, T*, int, int, int);

TED_INSTANTIATE_VOCABULARY(float)
TED_INSTANTIATE_VOCABULARY(double)

#define TED_INSTANTIATE_EMBEDDING(T)                                                              \
  template void embedding_forward<T>(const std::int32_t*, const T*, const T*, T*, int, int, int,  \
                                     int, int);                                                   \
  template void embedding_backward<T>(const std::int32_t*, const T*, GradOut<T>, GradOut<T>, int, \
                                      int, int, int, int);

TED_INSTANTIATE_EMBEDDING(float)
TED_INSTANTIATE_EMBEDDING(double)
TED_INSTANTIATE_EMBEDDING(Half)
TED_INSTANTIATE_EMBEDDING(BFloat16)

}  // namespace ted::kernels::cpu
