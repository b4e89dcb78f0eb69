#include "ted/kernels/cpu/attention.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

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

#define TED_INSTANTIATE_ATTENTION(T)                                                           \
  template void attention_forward<T>(const T*, T*, T*, int, int, int, int, const DropoutKey&); \
  template void attention_backward<T>(const T*, const T*, const T*, T*, int, int, int, int,    \
                                      const DropoutKey&);

TED_INSTANTIATE_ATTENTION(float)
TED_INSTANTIATE_ATTENTION(double)

}  // namespace ted::kernels::cpu
