// Fused causal multi-head attention on the CPU, the FlashAttention-2 algorithm (Dao, 2023):
// a tile of queries against the tiles of keys at or before it, with an online softmax, so the
// [seq, seq] scores never exist beyond one tile; only each row's log-sum-exp is kept, and the
// backward recomputes the scores tile by tile from it. Same layout and results as
// attention_forward/backward of attention.hpp (qkv [batch*seq, 3h], out [batch*seq, h]); the sums
// run in another order, so results differ from the materialised ones by rounding.
//
// Header-only (templates for float and double): the CPU backend and the gradient checks
// include it. Work is split over (sequence, head) pairs on the thread pool, each pair owned by
// one thread in a fixed partition, so results do not depend on the thread count; the tile
// GEMMs are small enough that OpenBLAS runs them on the calling thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/cpu/vector_math.hpp"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {
namespace flash {

// Query and key tiles are square. 64 x 64 x d stays at OpenBLAS's single-thread size (m n k <=
// 2^18) for heads up to 64 wide, so concurrent calls from the pool never start BLAS threads.
inline int tile_for(int d) {
  int tile = 64;
  while (tile > 8 && static_cast<std::int64_t>(tile) * tile * d > (std::int64_t(1) << 18))
    tile /= 2;
  return tile;
}

// Runs body(sequence, head) over every pair on the thread pool.
template <typename F>
void for_each_head(int batch, int heads, F&& body) {
  parallel_for(
      static_cast<std::int64_t>(batch) * heads,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t p = first; p < last; ++p)
          body(static_cast<int>(p / heads), static_cast<int>(p % heads));
      },
      1);
}

// Row r's keys [j0, j0 + n) of sequence b, head `head` times their dropout factors (the mask
// of attention.hpp's attention_forward).
template <typename T>
void drop_row(T* row, int n, int b, int i, int j0, int head, int seq, const DropoutKey& key) {
  const std::uint64_t row_key = key.row_key(static_cast<std::int64_t>(b) * seq + i);
  const std::uint32_t threshold = key.threshold();
  const T scale = key.scale<T>();
  for (int c = 0; c < n; ++c)
    row[c] *= dropout_factor(row_key, key.attention_feature(head, seq, j0 + c), threshold, scale);
}

}  // namespace flash

// out [batch*seq, h]; lse [batch, heads, seq]: each row's log-sum-exp of its scaled scores.
// `tile`: the tile size, 0 for tile_for(d) (the tests pick small ones to cross tile edges).
// With `dropout` active, out = dropout(P) V with the materialised attention's mask; the
// softmax's sums (and lse) are those of the undropped P.
template <typename T>
void flash_attention_forward(const T* qkv, T* out, T* lse, int batch, int seq, int heads, int h,
                             const DropoutKey& dropout = {}, int tile = 0) {
  const int d = h / heads, ld = 3 * h;
  if (tile <= 0) tile = flash::tile_for(d);
  const T scale = T(1) / std::sqrt(T(d));
  const int tiles = (seq + tile - 1) / tile;
  flash::for_each_head(batch, heads, [&](int b, int head) {
    // Scratch per pair: small (a tile of scores, a tile of output, two statistics per row).
    thread_local std::vector<T> s, acc, m, l;
    s.resize(static_cast<std::size_t>(tile) * tile);
    acc.resize(static_cast<std::size_t>(tile) * d);
    m.resize(tile);
    l.resize(tile);
    const T* base = qkv + static_cast<std::int64_t>(b) * seq * ld;
    const T* q = base + head * d;
    const T* k = base + h + head * d;
    const T* v = base + 2 * h + head * d;
    T* o = out + static_cast<std::int64_t>(b) * seq * h + head * d;
    T* stats = lse + (static_cast<std::int64_t>(b) * heads + head) * seq;
    for (int qt = 0; qt < tiles; ++qt) {
      const int i0 = qt * tile, rows = std::min(tile, seq - i0);
      std::fill(acc.begin(), acc.end(), T(0));
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      for (int kt = 0; kt <= qt; ++kt) {  // key tiles after the query tile are all masked
        const int j0 = kt * tile, cols = std::min(tile, seq - j0);
        gemm(false, true, rows, cols, d, scale, q + static_cast<std::int64_t>(i0) * ld, ld,
             k + static_cast<std::int64_t>(j0) * ld, ld, T(0), s.data(), tile);
        for (int r = 0; r < rows; ++r) {
          T* row = s.data() + static_cast<std::size_t>(r) * tile;
          const int seen = std::min(cols, i0 + r - j0 + 1);  // keys j <= i of this tile, >= 1
          const T m_new = std::max(m[r], row_max(row, seen));
          const T correction = exp_approx(m[r] - m_new);  // 0 on the first tile
          const T sum = exp_shift_sum(row, seen, m_new);
          std::fill(row + seen, row + cols, T(0));
          l[r] = l[r] * correction + sum;
          m[r] = m_new;
          if (correction != T(1))
            scale_row(acc.data() + static_cast<std::size_t>(r) * d, d, correction);
          if (dropout.active()) flash::drop_row(row, seen, b, i0 + r, j0, head, seq, dropout);
        }
        gemm(false, false, rows, d, cols, T(1), s.data(), tile,
             v + static_cast<std::int64_t>(j0) * ld, ld, T(1), acc.data(), d);
      }
      for (int r = 0; r < rows; ++r) {
        const T inv = T(1) / l[r];
        const T* a = acc.data() + static_cast<std::size_t>(r) * d;
        T* dst = o + static_cast<std::int64_t>(i0 + r) * h;
        for (int c = 0; c < d; ++c) dst[c] = a[c] * inv;
        stats[i0 + r] = m[r] + std::log(l[r]);
      }
    }
  });
}

// d_qkv is overwritten. out and lse are the forward's; d_out [batch*seq, h]. delta_i =
// rowsum(dO_i * O_i) stays the softmax backward's row term under dropout: O = dropout(P) V, so it
// is sum_j P_ij (mask * dP')_ij.
template <typename T>
void flash_attention_backward(const T* qkv, const T* out, const T* lse, const T* d_out, T* d_qkv,
                              int batch, int seq, int heads, int h, const DropoutKey& dropout = {},
                              int tile = 0) {
  const int d = h / heads, ld = 3 * h;
  if (tile <= 0) tile = flash::tile_for(d);
  const T scale = T(1) / std::sqrt(T(d));
  const int tiles = (seq + tile - 1) / tile;
  flash::for_each_head(batch, heads, [&](int b, int head) {
    thread_local std::vector<T> p, dp, delta;
    p.resize(static_cast<std::size_t>(tile) * tile);
    dp.resize(static_cast<std::size_t>(tile) * tile);
    delta.resize(static_cast<std::size_t>(seq));
    const std::int64_t offset = static_cast<std::int64_t>(b) * seq * ld + head * d;
    const T* q = qkv + offset;
    const T* k = q + h;
    const T* v = q + 2 * h;
    T* dq = d_qkv + offset;
    T* dk = dq + h;
    T* dv = dq + 2 * h;
    const T* o = out + static_cast<std::int64_t>(b) * seq * h + head * d;
    const T* dout = d_out + static_cast<std::int64_t>(b) * seq * h + head * d;
    const T* stats = lse + (static_cast<std::int64_t>(b) * heads + head) * seq;
    // delta_i = rowsum(dO_i * O_i) = sum_j P_ij dP_ij, the softmax backward's row term.
    for (int i = 0; i < seq; ++i) {
      const T* a = o + static_cast<std::int64_t>(i) * h;
      const T* g = dout + static_cast<std::int64_t>(i) * h;
      T dot = 0;
      for (int c = 0; c < d; ++c) dot += a[c] * g[c];
      delta[i] = dot;
      for (T* grad : {dq, dk, dv}) std::fill_n(grad + static_cast<std::int64_t>(i) * ld, d, T(0));
    }
    // Key tiles outside, query tiles inside: dK and dV of a key tile accumulate in place, dQ
    // over the key tiles (all in this thread).
    for (int kt = 0; kt < tiles; ++kt) {
      const int j0 = kt * tile, cols = std::min(tile, seq - j0);
      const T* kj = k + static_cast<std::int64_t>(j0) * ld;
      const T* vj = v + static_cast<std::int64_t>(j0) * ld;
      for (int qt = kt; qt < tiles; ++qt) {
        const int i0 = qt * tile, rows = std::min(tile, seq - i0);
        const T* qi = q + static_cast<std::int64_t>(i0) * ld;
        const T* gi = dout + static_cast<std::int64_t>(i0) * h;
        // P = exp(Q K^T scale - lse), masked above the diagonal.
        gemm(false, true, rows, cols, d, scale, qi, ld, kj, ld, T(0), p.data(), tile);
        for (int r = 0; r < rows; ++r) {
          T* row = p.data() + static_cast<std::size_t>(r) * tile;
          const int seen = std::min(cols, i0 + r - j0 + 1);
          exp_shift_sum(row, seen, stats[i0 + r]);
          std::fill(row + seen, row + cols, T(0));
        }
        // dP = dO_i V_j^T; with dropout, back through the mask (dP = mask * dP').
        gemm(false, true, rows, cols, d, T(1), gi, h, vj, ld, T(0), dp.data(), tile);
        // dS = P * (dP - delta) * scale (0 where masked: P is 0 there).
        for (int r = 0; r < rows; ++r) {
          T* prow = p.data() + static_cast<std::size_t>(r) * tile;
          T* drow = dp.data() + static_cast<std::size_t>(r) * tile;
          if (dropout.active()) flash::drop_row(drow, cols, b, i0 + r, j0, head, seq, dropout);
          softmax_grad_row(prow, drow, cols, delta[i0 + r], scale);
          if (dropout.active()) flash::drop_row(prow, cols, b, i0 + r, j0, head, seq, dropout);
        }
        // dV_j += P^T dO_i (the dropped P with dropout).
        gemm(true, false, cols, d, rows, T(1), p.data(), tile, gi, h, T(1),
             dv + static_cast<std::int64_t>(j0) * ld, ld);
        // dQ_i += dS K_j; dK_j += dS^T Q_i.
        gemm(false, false, rows, d, cols, T(1), dp.data(), tile, kj, ld, T(1),
             dq + static_cast<std::int64_t>(i0) * ld, ld);
        gemm(true, false, cols, d, rows, T(1), dp.data(), tile, qi, ld, T(1),
             dk + static_cast<std::int64_t>(j0) * ld, ld);
      }
    }
  });
}

}  // namespace ted::kernels::cpu
