// Fused causal attention on the GPU, the FlashAttention-2 algorithm, mirroring the CPU kernel
// (kernels/cpu/flash_attention.hpp): scores exist one tile at a time in shared memory, each
// row's log-sum-exp is kept for the backward, which recomputes the scores tile by tile.
// Written for clarity over speed (fp32 in shared memory, no tensor cores):
//   forward:  one block per (sequence x head, query tile); it walks the key tiles at or before
//             its queries, keeping the running max, sum and output of each row (online softmax);
//   backward: one block per (sequence x head, key tile); it walks the query tiles at or after
//             its keys, accumulating dK and dV in shared memory and adding dQ into an fp32
//             buffer with atomics (so dQ's sums run in no fixed order).
// Sequence x head is the grid's x (up to 2^31 - 1 blocks), the tile its y (at most 65535).
// Dropout on the probabilities (DropoutKey, kernels/elementwise.hpp) multiplies each P by its
// mask where P meets V (the forward's accumulator, the backward's dV) and takes dP back through
// it, the softmax's sums and lse staying those of the undropped P, as the CPU kernel does.
// Included by attention.cu only.
#pragma once

#include <cmath>

#include "ted/kernels/cuda/common.cuh"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cuda {
namespace flash {

constexpr int kThreads = 128;
constexpr std::size_t kDefaultShared = 48 * 1024;

// Shared bytes of the forward (q, k, v, output rows; a score tile; three row statistics) and
// of the backward (k, v, dk, dv, q, dO rows; P and dS tiles; two row statistics). Rows are
// d + 1 floats apart so threads walking a column hit different banks.
inline std::size_t forward_shared(int tile, int d) {
  return sizeof(float) * (4 * tile * (d + 1) + tile * (tile + 1) + 3 * tile);
}
inline std::size_t backward_shared(int tile, int d) {
  return sizeof(float) * (6 * tile * (d + 1) + 2 * tile * (tile + 1) + 2 * tile);
}
// The largest tile (32 down to 8) whose shared memory fits the default 48 KiB.
template <typename Bytes>
int pick_tile(int d, Bytes bytes) {
  int tile = 32;
  while (tile > 8 && bytes(tile, d) > kDefaultShared) tile /= 2;
  return tile;
}

template <typename T>
__global__ void forward_kernel(const T* qkv, T* out, float* lse, int seq, int heads, int h,
                               int tile, float scale, DropoutKey dropout) {
  float* shared = dynamic_shared<float>();
  const int d = h / heads, ld = 3 * h, dp = d + 1, sp = tile + 1;
  const int b = blockIdx.x / heads, head = blockIdx.x % heads;
  const int i0 = blockIdx.y * tile, rows = min(tile, seq - i0);
  float* qs = shared;
  float* ks = qs + tile * dp;
  float* vs = ks + tile * dp;
  float* acc = vs + tile * dp;
  float* s = acc + tile * dp;
  float* m = s + tile * sp;
  float* l = m + tile;
  float* correction = l + tile;
  const T* base = qkv + static_cast<std::size_t>(b) * seq * ld + head * d;
  for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    qs[r * dp + c] = r < rows ? load(base[static_cast<std::size_t>(i0 + r) * ld + c]) : 0.0f;
    acc[r * dp + c] = 0.0f;
  }
  for (int r = threadIdx.x; r < tile; r += blockDim.x) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // Key tiles start at multiples of the tile, so every one walked starts at or before i0: each
  // row sees at least one key of it.
  for (int j0 = 0; j0 < i0 + rows; j0 += tile) {
    const int cols = min(tile, seq - j0);
    __syncthreads();  // the previous tile's k, v and s are used up
    for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      const std::size_t row = static_cast<std::size_t>(j0 + r) * ld;
      ks[r * dp + c] = r < cols ? load(base[row + h + c]) : 0.0f;
      vs[r * dp + c] = r < cols ? load(base[row + 2 * h + c]) : 0.0f;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows * tile; e += blockDim.x) {
      const int r = e / tile, c = e % tile;
      float dot = 0.0f;
      for (int k = 0; k < d; ++k) dot += qs[r * dp + k] * ks[c * dp + k];
      s[r * sp + c] = dot * scale;
    }
    __syncthreads();
    for (int r = warp; r < rows; r += warps) {  // the online softmax, one warp per row
      const int seen = min(cols, i0 + r - j0 + 1);
      float mx = -INFINITY;
      for (int c = lane; c < seen; c += 32) mx = fmaxf(mx, s[r * sp + c]);
      const float m_new = fmaxf(m[r], warp_max(mx));
      const std::uint64_t row =
          dropout.active() ? dropout.row_key(static_cast<std::int64_t>(b) * seq + i0 + r) : 0;
      float sum = 0.0f;
      for (int c = lane; c < tile; c += 32) {
        const float p = c < seen ? expf(s[r * sp + c] - m_new) : 0.0f;
        s[r * sp + c] = dropout.active() && c < seen
                            ? p * dropout_factor(row, dropout.attention_feature(head, seq, j0 + c),
                                                 dropout.threshold(), dropout.scale<float>())
                            : p;
        sum += p;
      }
      sum = warp_sum(sum);
      if (lane == 0) {
        const float scale_old = expf(m[r] - m_new);  // 0 on the first tile
        correction[r] = scale_old;
        l[r] = l[r] * scale_old + sum;
        m[r] = m_new;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      float a = acc[r * dp + c] * correction[r];
      for (int k = 0; k < cols; ++k) a += s[r * sp + k] * vs[k * dp + c];
      acc[r * dp + c] = a;
    }
  }
  __syncthreads();
  T* o = out + static_cast<std::size_t>(b) * seq * h + head * d;
  for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    o[static_cast<std::size_t>(i0 + r) * h + c] = store<T>(acc[r * dp + c] / l[r]);
  }
  for (int r = threadIdx.x; r < rows; r += blockDim.x)
    lse[static_cast<std::size_t>(blockIdx.x) * seq + i0 + r] = m[r] + logf(l[r]);
}

// delta[(b, head), i] = sum_c dO[i, c] O[i, c], one warp per row.
template <typename T>
__global__ void delta_kernel(const T* out, const T* d_out, float* delta, int batch, int seq,
                             int heads, int h) {
  const int d = h / heads;
  const std::size_t rows = static_cast<std::size_t>(batch) * heads * seq;
  const std::size_t row = (static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const std::size_t bh = row / seq, i = row % seq, b = bh / heads, head = bh % heads;
  const std::size_t at = (b * seq + i) * h + head * d;
  float dot = 0.0f;
  for (int c = lane; c < d; c += 32) dot += load(out[at + c]) * load(d_out[at + c]);
  dot = warp_sum(dot);
  if (lane == 0) delta[row] = dot;
}

template <typename T>
__global__ void backward_kernel(const T* qkv, const float* lse, const float* delta, const T* d_out,
                                T* d_qkv, float* dq, int seq, int heads, int h, int tile,
                                float scale, DropoutKey dropout) {
  float* shared = dynamic_shared<float>();
  const int d = h / heads, ld = 3 * h, dp = d + 1, sp = tile + 1;
  const int b = blockIdx.x / heads, head = blockIdx.x % heads;
  const int j0 = blockIdx.y * tile, cols = min(tile, seq - j0);
  float* ks = shared;
  float* vs = ks + tile * dp;
  float* dks = vs + tile * dp;
  float* dvs = dks + tile * dp;
  float* qs = dvs + tile * dp;
  float* dos = qs + tile * dp;
  float* p = dos + tile * dp;
  float* ds = p + tile * sp;
  float* row_lse = ds + tile * sp;
  float* row_delta = row_lse + tile;
  const T* base = qkv + static_cast<std::size_t>(b) * seq * ld + head * d;
  const T* dout = d_out + static_cast<std::size_t>(b) * seq * h + head * d;
  const float* stats = lse + static_cast<std::size_t>(blockIdx.x) * seq;
  const float* deltas = delta + static_cast<std::size_t>(blockIdx.x) * seq;
  for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    const std::size_t row = static_cast<std::size_t>(j0 + r) * ld;
    ks[r * dp + c] = r < cols ? load(base[row + h + c]) : 0.0f;
    vs[r * dp + c] = r < cols ? load(base[row + 2 * h + c]) : 0.0f;
    dks[r * dp + c] = 0.0f;
    dvs[r * dp + c] = 0.0f;
  }
  for (int i0 = j0; i0 < seq; i0 += tile) {  // query tiles at or after the keys
    const int rows = min(tile, seq - i0);
    __syncthreads();  // the previous tile's q, dO, P and dS are used up
    for (int e = threadIdx.x; e < tile * d; e += blockDim.x) {
      const int r = e / d, c = e % d;
      qs[r * dp + c] = r < rows ? load(base[static_cast<std::size_t>(i0 + r) * ld + c]) : 0.0f;
      dos[r * dp + c] = r < rows ? load(dout[static_cast<std::size_t>(i0 + r) * h + c]) : 0.0f;
    }
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
      row_lse[r] = r < rows ? stats[i0 + r] : 0.0f;
      row_delta[r] = r < rows ? deltas[i0 + r] : 0.0f;
    }
    __syncthreads();
    // P = exp(scale q.k - lse) where key <= query (else 0); dS = P (dO.v - delta) scale. With
    // dropout: dS = P (mask dO.v - delta) scale, and P keeps the mask for dV.
    for (int e = threadIdx.x; e < tile * tile; e += blockDim.x) {
      const int r = e / tile, c = e % tile;
      float prob = 0.0f, grad = 0.0f;
      if (r < rows && c < cols && j0 + c <= i0 + r) {
        float dot = 0.0f, dprob = 0.0f;
        for (int k = 0; k < d; ++k) {
          dot += qs[r * dp + k] * ks[c * dp + k];
          dprob += dos[r * dp + k] * vs[c * dp + k];
        }
        prob = expf(dot * scale - row_lse[r]);
        float mask = 1.0f;
        if (dropout.active())
          mask = dropout_factor(dropout.row_key(static_cast<std::int64_t>(b) * seq + i0 + r),
                                dropout.attention_feature(head, seq, j0 + c), dropout.threshold(),
                                dropout.scale<float>());
        grad = prob * (mask * dprob - row_delta[r]) * scale;
        prob *= mask;
      }
      p[r * sp + c] = prob;
      ds[r * sp + c] = grad;
    }
    __syncthreads();
    // dV += P^T dO; dK += dS^T Q (this block's keys only: no races).
    for (int e = threadIdx.x; e < cols * d; e += blockDim.x) {
      const int c = e / d, k = e % d;
      float dv = 0.0f, dk = 0.0f;
      for (int r = 0; r < rows; ++r) {
        dv += p[r * sp + c] * dos[r * dp + k];
        dk += ds[r * sp + c] * qs[r * dp + k];
      }
      dvs[c * dp + k] += dv;
      dks[c * dp + k] += dk;
    }
    // dQ += dS K, shared with the other key tiles' blocks.
    for (int e = threadIdx.x; e < rows * d; e += blockDim.x) {
      const int r = e / d, k = e % d;
      float dqv = 0.0f;
      for (int c = 0; c < cols; ++c) dqv += ds[r * sp + c] * ks[c * dp + k];
      atomicAdd(dq + (static_cast<std::size_t>(b) * seq + i0 + r) * h + head * d + k, dqv);
    }
  }
  __syncthreads();
  T* dbase = d_qkv + static_cast<std::size_t>(b) * seq * ld + head * d;
  for (int e = threadIdx.x; e < cols * d; e += blockDim.x) {
    const int c = e / d, k = e % d;
    const std::size_t row = static_cast<std::size_t>(j0 + c) * ld;
    dbase[row + h + k] = store<T>(dks[c * dp + k]);
    dbase[row + 2 * h + k] = store<T>(dvs[c * dp + k]);
  }
}

// d_qkv's q columns from the fp32 dQ [batch*seq, h].
template <typename T>
__global__ void write_dq_kernel(const float* dq, T* d_qkv, std::size_t rows, int h) {
  const std::size_t count = rows * h;
  TED_GRID_STRIDE(e, count) {
    const std::size_t r = e / h, c = e % h;
    d_qkv[r * 3 * h + c] = store<T>(dq[e]);
  }
}

// x: sequence x head; y: the tiles of a sequence.
inline dim3 grid_of(int batch, int heads, int seq, int tile) {
  const int tiles = (seq + tile - 1) / tile;
  TED_CHECK(tiles <= 65535, "fused attention: " + std::to_string(seq) + " positions make " +
                                std::to_string(tiles) + " tiles of " + std::to_string(tile) +
                                ", more than a grid's 65535");
  return dim3(static_cast<unsigned>(static_cast<std::int64_t>(batch) * heads),
              static_cast<unsigned>(tiles));
}

template <typename Kernel>
void allow_shared(Kernel kernel, std::size_t bytes) {
  if (bytes > kDefaultShared)
    TED_CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
}

}  // namespace flash

template <typename T>
void flash_attention_forward(Context& ctx, const T* qkv, T* out, float* lse, int batch, int seq,
                             int heads, int h, const DropoutKey& dropout) {
  if (batch == 0 || seq == 0) return;
  const int d = h / heads;
  const int tile = flash::pick_tile(d, flash::forward_shared);
  const std::size_t bytes = flash::forward_shared(tile, d);
  flash::allow_shared(flash::forward_kernel<T>, bytes);
  const dim3 grid = flash::grid_of(batch, heads, seq, tile);
  launch<flash::forward_kernel<T>>(grid, flash::kThreads, bytes, stream(ctx), qkv, out, lse, seq,
                                   heads, h, tile, 1.0f / std::sqrt(static_cast<float>(d)),
                                   dropout);
}

template <typename T>
void flash_attention_backward(Context& ctx, const T* qkv, const T* out, const float* lse,
                              const T* d_out, T* d_qkv, int batch, int seq, int heads, int h,
                              const DropoutKey& dropout) {
  if (batch == 0 || seq == 0) return;
  const int d = h / heads;
  const std::size_t rows = static_cast<std::size_t>(batch) * seq;
  Tensor<float> delta(ctx.device(), static_cast<std::size_t>(batch) * heads * seq);
  Tensor<float> dq(ctx.device(), rows * h);
  TED_CHECK_CUDA(cudaMemsetAsync(dq.data(), 0, dq.size() * sizeof(float), stream(ctx)));
  const std::size_t delta_threads = delta.size() * 32;
  launch<flash::delta_kernel<T>>(static_cast<unsigned>((delta_threads + kThreads - 1) / kThreads),
                                 kThreads, 0, stream(ctx), out, d_out, delta.data(), batch, seq,
                                 heads, h);
  const int tile = flash::pick_tile(d, flash::backward_shared);
  const std::size_t bytes = flash::backward_shared(tile, d);
  flash::allow_shared(flash::backward_kernel<T>, bytes);
  const dim3 grid = flash::grid_of(batch, heads, seq, tile);
  launch<flash::backward_kernel<T>>(grid, flash::kThreads, bytes, stream(ctx), qkv, lse,
                                    delta.data(), d_out, d_qkv, dq.data(), seq, heads, h, tile,
                                    1.0f / std::sqrt(static_cast<float>(d)), dropout);
  launch<flash::write_dq_kernel<T>>(blocks_for(rows * h), kThreads, 0, stream(ctx), dq.data(),
                                    d_qkv, rows, h);
}

}  // namespace ted::kernels::cuda
