#include "ted/kernels/cpu/layers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"
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

// One row of LayerNorm forward: mean and 1/std, then y = (x - mean) / std * gamma + beta. The
// sums run in 16 lanes (vectorisable without reassociating), then the lanes in order.
constexpr int kLanes = 16;
template <typename T>
inline T lane_total(const T (&lanes)[kLanes]) {
  T total = 0;
  for (int k = 0; k < kLanes; ++k) total += lanes[k];
  return total;
}
template <typename T>
inline void layernorm_row(const T* __restrict row, const T* __restrict gamma,
                          const T* __restrict beta, T* __restrict out, int h, T* mean, T* rstd) {
  T lanes[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= h; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += row[j + k];
  T sum = lane_total(lanes);
  for (; j < h; ++j) sum += row[j];
  const T mu = sum / h;
  T dev[kLanes] = {};
  for (j = 0; j + kLanes <= h; j += kLanes)
    for (int k = 0; k < kLanes; ++k) dev[k] += (row[j + k] - mu) * (row[j + k] - mu);
  T var = lane_total(dev);
  for (; j < h; ++j) var += (row[j] - mu) * (row[j] - mu);
  const T r = T(1) / std::sqrt(var / h + T(1e-5));
  for (j = 0; j < h; ++j) out[j] = (row[j] - mu) * r * gamma[j] + beta[j];
  *mean = mu;
  *rstd = r;
}
TED_VECTOR_CLONES void layernorm_row_f32(const float* row, const float* gamma, const float* beta,
                                         float* out, int h, float* mean, float* rstd) {
  layernorm_row(row, gamma, beta, out, h, mean, rstd);
}

// One row of LayerNorm backward: dx += its gradient, and the row's dgamma, dbeta shares into
// the block partials pg, pb.
template <typename T>
inline void layernorm_row_backward(const T* __restrict row, const T* __restrict grad,
                                   const T* __restrict gamma, T mu, T r, T* __restrict din,
                                   T* __restrict pg, T* __restrict pb, int h) {
  T lanes_g[kLanes] = {}, lanes_gx[kLanes] = {};  // sums of dxhat and dxhat * xhat
  int j = 0;
  for (; j + kLanes <= h; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const T xhat = (row[j + k] - mu) * r;
      const T g = grad[j + k] * gamma[j + k];
      lanes_g[k] += g;
      lanes_gx[k] += g * xhat;
      pg[j + k] += grad[j + k] * xhat;
      pb[j + k] += grad[j + k];
    }
  T sum_g = lane_total(lanes_g), sum_gx = lane_total(lanes_gx);
  for (; j < h; ++j) {
    const T xhat = (row[j] - mu) * r;
    const T g = grad[j] * gamma[j];
    sum_g += g;
    sum_gx += g * xhat;
    pg[j] += grad[j] * xhat;
    pb[j] += grad[j];
  }
  for (j = 0; j < h; ++j) {
    const T xhat = (row[j] - mu) * r;
    din[j] += r * (grad[j] * gamma[j] - (sum_g + xhat * sum_gx) / h);
  }
}
TED_VECTOR_CLONES void layernorm_row_backward_f32(const float* row, const float* grad,
                                                  const float* gamma, float mu, float r, float* din,
                                                  float* pg, float* pb, int h) {
  layernorm_row_backward(row, grad, gamma, mu, r, din, pg, pb, h);
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
void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) {
  if (n == 0) return;
  if (b) {
    for (int i = 0; i < n; ++i) std::copy(b, b + out, y + static_cast<std::int64_t>(i) * out);
  }
  gemm(false, false, n, out, in, T(1), x, in, w, out, b ? T(1) : T(0), y, out);
}

template <typename T>
void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int n, int in,
                     int out) {
  if (n == 0) return;
  if (dx) gemm(false, true, n, in, out, T(1), dy, out, w, out, T(1), dx, in);
  gemm(true, false, in, out, n, T(1), x, in, dy, out, T(1), dw, out);
  if (db) add_column_sums(dy, db, n, out);
}

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int n,
                       int h) {
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          if constexpr (std::is_same_v<T, float>)
            layernorm_row_f32(x + i * h, gamma, beta, y + i * h, h, mean + i, rstd + i);
          else
            layernorm_row(x + i * h, gamma, beta, y + i * h, h, mean + i, rstd + i);
        }
      },
      64);
}

// One pass over each row: its dx, and its share of dgamma and dbeta into the partial sums of
// its block of kLnBlock rows; then the blocks' partials are added in block order (parallel over
// columns). Blocks are fixed, so the sums do not depend on the thread count.
template <typename T>
void layernorm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
                        T* dx, T* dgamma, T* dbeta, int n, int h) {
  constexpr int kLnBlock = 32;
  const int blocks = (n + kLnBlock - 1) / kLnBlock;
  std::vector<T> partial(static_cast<std::size_t>(blocks) * 2 * h, T(0));
  parallel_for(
      blocks,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t blk = first; blk < last; ++blk) {
          T* pg = partial.data() + blk * 2 * h;  // dgamma, then dbeta
          T* pb = pg + h;
          const int end = std::min<int>(n, static_cast<int>(blk + 1) * kLnBlock);
          for (int i = static_cast<int>(blk) * kLnBlock; i < end; ++i) {
            const std::int64_t at = static_cast<std::int64_t>(i) * h;
            if constexpr (std::is_same_v<T, float>)
              layernorm_row_backward_f32(x + at, dy + at, gamma, mean[i], rstd[i], dx + at, pg, pb,
                                         h);
            else
              layernorm_row_backward(x + at, dy + at, gamma, mean[i], rstd[i], dx + at, pg, pb, h);
          }
        }
      },
      1);
  parallel_for(
      h,
      [&](std::int64_t first, std::int64_t last) {
        for (int blk = 0; blk < blocks; ++blk) {
          const T* pg = partial.data() + static_cast<std::int64_t>(blk) * 2 * h;
          for (std::int64_t j = first; j < last; ++j) {
            dgamma[j] += pg[j];
            dbeta[j] += pg[h + j];
          }
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

// The probabilities [seq, seq] of sequence b, head `head` with the dropout mask applied, into
// `to` (causal: the columns past each row's diagonal are 0 and stay 0).
template <typename T>
void dropped_probs(const T* p, T* to, int b, int head, int seq, const DropoutKey& key) {
  const std::uint32_t threshold = key.threshold();
  const T scale = key.scale<T>();
  for (int i = 0; i < seq; ++i) {
    const std::uint64_t row = key.row_key(static_cast<std::int64_t>(b) * seq + i);
    const T* from = p + static_cast<std::int64_t>(i) * seq;
    T* out = to + static_cast<std::int64_t>(i) * seq;
    for (int j = 0; j < seq; ++j)
      out[j] = from[j] * dropout_factor(row, key.attention_feature(head, seq, j), threshold, scale);
  }
}

template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int batch, int seq, int heads, int h,
                       const DropoutKey& dropout) {
  const int d = h / heads;
  const int ld = 3 * h;
  const T scale = T(1) / std::sqrt(T(d));
  const std::int64_t square = static_cast<std::int64_t>(seq) * seq;
  // Three passes so the element-wise softmax runs in parallel between the GEMM loops (OpenBLAS
  // threads each GEMM itself): scores, causal softmax of every row, then P V.
  for (int b = 0; b < batch; ++b)
    for (int head = 0; head < heads; ++head) {
      const T* base = qkv + static_cast<std::int64_t>(b) * seq * ld;
      T* p = probs + (static_cast<std::int64_t>(b) * heads + head) * square;
      gemm(false, true, seq, seq, d, scale, base + head * d, ld, base + h + head * d, ld, T(0), p,
           seq);
    }
  const std::int64_t rows = static_cast<std::int64_t>(batch) * heads * seq;
  parallel_for(
      rows,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t r = first; r < last; ++r) {  // row i of a head sees columns 0..i
          const int i = static_cast<int>(r % seq);
          T* row = probs + r * seq;
          T max = row[0];
          for (int j = 1; j <= i; ++j) max = std::max(max, row[j]);
          T sum = 0;
          for (int j = 0; j <= i; ++j) {
            row[j] = std::exp(row[j] - max);
            sum += row[j];
          }
          for (int j = 0; j <= i; ++j) row[j] /= sum;
          for (int j = i + 1; j < seq; ++j) row[j] = 0;
        }
      },
      16);
  // With dropout, P V takes the dropped probabilities, one head's at a time.
  std::vector<T> dropped(dropout.active() ? static_cast<std::size_t>(square) : 0);
  for (int b = 0; b < batch; ++b)
    for (int head = 0; head < heads; ++head) {
      const T* v = qkv + static_cast<std::int64_t>(b) * seq * ld + 2 * h + head * d;
      const T* p = probs + (static_cast<std::int64_t>(b) * heads + head) * square;
      T* o = out + static_cast<std::int64_t>(b) * seq * h + head * d;
      if (dropout.active()) {
        dropped_probs(p, dropped.data(), b, head, seq, dropout);
        p = dropped.data();
      }
      gemm(false, false, seq, d, seq, T(1), p, seq, v, ld, T(0), o, h);
    }
}

template <typename T>
void attention_backward(const T* qkv, const T* probs, const T* d_out, T* d_qkv, int batch, int seq,
                        int heads, int h, const DropoutKey& dropout) {
  const int d = h / heads;
  const int ld = 3 * h;
  const T scale = T(1) / std::sqrt(T(d));
  std::vector<T> dp(static_cast<std::size_t>(seq) * seq);
  std::vector<T> dropped(dropout.active() ? dp.size() : 0);
  const std::uint32_t threshold = dropout.threshold();
  const T keep_scale = dropout.scale<T>();
  for (int b = 0; b < batch; ++b) {
    const T* base = qkv + static_cast<std::int64_t>(b) * seq * ld;
    T* dbase = d_qkv + static_cast<std::int64_t>(b) * seq * ld;
    for (int head = 0; head < heads; ++head) {
      const T* q = base + head * d;
      const T* k = base + h + head * d;
      const T* v = base + 2 * h + head * d;
      T* dq = dbase + head * d;
      T* dk = dbase + h + head * d;
      T* dv = dbase + 2 * h + head * d;
      const T* p = probs + (static_cast<std::int64_t>(b) * heads + head) * seq * seq;
      const T* dout = d_out + static_cast<std::int64_t>(b) * seq * h + head * d;
      const T* pv = p;  // what multiplied V: the dropped probabilities under dropout
      if (dropout.active()) {
        dropped_probs(p, dropped.data(), b, head, seq, dropout);
        pv = dropped.data();
      }
      gemm(true, false, seq, d, seq, T(1), pv, seq, dout, h, T(0), dv, ld);        // dV = P^T dO
      gemm(false, true, seq, seq, d, T(1), dout, h, v, ld, T(0), dp.data(), seq);  // dP = dO V^T
      for (int i = 0; i < seq; ++i) {  // dS = P * (dP - rowsum(dP * P)), times the scale
        const T* prow = p + static_cast<std::int64_t>(i) * seq;
        T* drow = dp.data() + static_cast<std::int64_t>(i) * seq;
        if (dropout.active()) {  // back through the mask first: dP = mask * dP'
          const std::uint64_t row = dropout.row_key(static_cast<std::int64_t>(b) * seq + i);
          for (int j = 0; j <= i; ++j)
            drow[j] *=
                dropout_factor(row, dropout.attention_feature(head, seq, j), threshold, keep_scale);
        }
        T dot = 0;
        for (int j = 0; j <= i; ++j) dot += drow[j] * prow[j];
        for (int j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - dot) * scale;
        for (int j = i + 1; j < seq; ++j) drow[j] = 0;
      }
      gemm(false, false, seq, d, seq, T(1), dp.data(), seq, k, ld, T(0), dq, ld);  // dQ = dS K
      gemm(true, false, seq, d, seq, T(1), dp.data(), seq, q, ld, T(0), dk, ld);   // dK = dS^T Q
    }
  }
}

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
  for (int i = 0; i < n; ++i) {
    const int row = tokens[i] - first_word;
    const bool here = row >= 0 && (words < 0 || row < words);
    const T* t = tok + static_cast<std::int64_t>(row) * h;
    const T* p = pos ? pos + static_cast<std::int64_t>(i % seq) * h : nullptr;
    T* out = x + static_cast<std::int64_t>(i) * h;
    for (int j = 0; j < h; ++j) out[j] = (here ? t[j] : T(0)) + (p ? p[j] : T(0));
  }
}

template <typename T>
void embedding_backward(const std::int32_t* tokens, const T* dx, T* dtok, T* dpos, int n, int seq,
                        int h, int first_word, int words) {
  for (int i = 0; i < n; ++i) {
    const int row = tokens[i] - first_word;
    const bool here = row >= 0 && (words < 0 || row < words);
    const T* g = dx + static_cast<std::int64_t>(i) * h;
    T* t = dtok + static_cast<std::int64_t>(row) * h;
    T* p = dpos ? dpos + static_cast<std::int64_t>(i % seq) * h : nullptr;
    for (int j = 0; j < h; ++j) {
      if (here) t[j] += g[j];
      if (p) p[j] += g[j];
    }
  }
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

#define TED_INSTANTIATE_LAYERS(T)                                                                \
  template void linear_forward<T>(const T*, const T*, const T*, T*, int, int, int);              \
  template void linear_backward<T>(const T*, const T*, const T*, T*, T*, T*, int, int, int);     \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, int, int);        \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*,  \
                                      T*, int, int);                                             \
  template void gelu_forward<T>(const T*, T*, std::int64_t);                                     \
  template void gelu_backward<T>(const T*, const T*, T*, std::int64_t);                          \
  template void bias_gelu_forward<T>(T*, const T*, T*, int, int);                                \
  template void add_column_sums<T>(const T*, T*, int, int);                                      \
  template void gelu_bias_backward<T>(const T*, T*, T*, int, int);                               \
  template void add_bias_residual<T>(T*, const T*, const T*, int, int);                          \
  template void dropout<T>(const T*, T*, int, int, const DropoutKey&);                           \
  template void bias_dropout_residual<T>(T*, const T*, const T*, int, int, const DropoutKey&);   \
  template void attention_forward<T>(const T*, T*, T*, int, int, int, int, const DropoutKey&);   \
  template void attention_backward<T>(const T*, const T*, const T*, T*, int, int, int, int,      \
                                      const DropoutKey&);                                        \
  template T cross_entropy_loss<T>(const T*, const std::int32_t*, T*, int, int);                 \
  template void cross_entropy_backward<T>(const T*, const std::int32_t*, const T*, T*, int, int, \
                                          T, int, int);                                          \
  template void cross_entropy_max<T>(const T*, T*, int, int, int);                               \
  template void cross_entropy_partials<T>(const T*, const std::int32_t*, const T*, T*, int, int, \
                                          int, int);                                             \
  template T cross_entropy_finish<T>(const T*, const T*, T*, int);                               \
  template void embedding_forward<T>(const std::int32_t*, const T*, const T*, T*, int, int, int, \
                                     int, int);                                                  \
  template void embedding_backward<T>(const std::int32_t*, const T*, T*, T*, int, int, int, int, \
                                      int);                                                      \
  template void lm_head_forward<T>(const T*, const T*, T*, int, int, int);                       \
  template void lm_head_backward<T>(const T*, const T*, const T*, T*, T*, int, int, int);

TED_INSTANTIATE_LAYERS(float)
TED_INSTANTIATE_LAYERS(double)

}  // namespace ted::kernels::cpu
