// Causal attention on the GPU: materialised here (scores, softmax, dropout of the
// probabilities), fused in flash_attention.cuh (instantiated here). The same shapes and
// conventions as kernels/cpu/attention.cpp (backend/ops.hpp).
#include <cmath>
#include <cstdint>

#include "ted/kernels/cuda/common.cuh"
#include "ted/kernels/cuda/flash_attention.cuh"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cuda {
namespace {

// out = probs of sequence b ([heads, seq, seq]) times their dropout mask: what multiplies V.
template <typename T>
__global__ void dropout_probs_kernel(const T* probs, T* out, int seq, int heads, int b,
                                     DropoutKey key) {
  const std::uint32_t threshold = key.threshold();
  const float scale = key.scale<float>();
  const std::size_t square = static_cast<std::size_t>(seq) * seq;
  const std::size_t count = square * heads;
  TED_GRID_STRIDE(e, count) {
    const int head = static_cast<int>(e / square);
    const int i = static_cast<int>((e / seq) % seq), j = static_cast<int>(e % seq);
    const std::uint64_t row = key.row_key(static_cast<std::int64_t>(b) * seq + i);
    out[e] = store<T>(load(probs[e]) *
                      dropout_factor(row, key.attention_feature(head, seq, j), threshold, scale));
  }
}

// One block per score row r of [batch*heads*seq, seq]: row i of its head sees columns 0..i.
template <typename T>
__global__ void causal_softmax_kernel(T* probs, int seq) {
  __shared__ float shared[32];
  const std::size_t r = blockIdx.x;
  const int i = static_cast<int>(r % seq);
  T* row = probs + r * seq;
  float max = -INFINITY;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) max = fmaxf(max, load(row[j]));
  max = block_max(max, shared);
  float sum = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(load(row[j]) - max);
  const float inv = 1.0f / block_sum(sum, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x)
    row[j] = store<T>(j <= i ? expf(load(row[j]) - max) * inv : 0.0f);
}

// dS = P * (dP - rowsum(dP * P)) * scale on the causal part, 0 above it; in place on dP. One
// block per row r = head * seq + i of sequence b; with dropout, dP is first taken back through
// the mask (dP = mask * dP').
template <typename T>
__global__ void softmax_backward_kernel(const T* probs, T* dp, int seq, float scale, int b,
                                        DropoutKey key) {
  __shared__ float shared[32];
  const std::size_t r = blockIdx.x;
  const int i = static_cast<int>(r % seq), head = static_cast<int>(r / seq);
  const T* p = probs + r * seq;
  T* d = dp + r * seq;
  const bool active = key.active();
  const std::uint64_t row = active ? key.row_key(static_cast<std::int64_t>(b) * seq + i) : 0;
  const std::uint32_t threshold = key.threshold();
  const float keep_scale = key.scale<float>();
  auto grad = [&](int j) {
    const float g = load(d[j]);
    return active
               ? g * dropout_factor(row, key.attention_feature(head, seq, j), threshold, keep_scale)
               : g;
  };
  float dot = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) dot += grad(j) * load(p[j]);
  dot = block_sum(dot, shared);
  for (int j = threadIdx.x; j < seq; j += blockDim.x)
    d[j] = store<T>(j <= i ? load(p[j]) * (grad(j) - dot) * scale : 0.0f);
}

}  // namespace

// Per sequence b, the heads are one strided batch: head j's q, k, v are columns j*d of their
// third of qkv (stride d), its score matrix is probs' [b, j] (stride seq*seq). With dropout,
// P V takes the dropped probabilities of sequence b from a scratch of [heads, seq, seq].
template <typename T>
void attention_forward(Context& ctx, const T* qkv, T* out, T* probs, int batch, int seq, int heads,
                       int h, const DropoutKey& dropout) {
  if (batch == 0) return;
  const int d = h / heads, ld = 3 * h;
  const std::int64_t square = static_cast<std::int64_t>(seq) * seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int b = 0; b < batch; ++b) {
    const T* base = qkv + static_cast<std::int64_t>(b) * seq * ld;
    T* p = probs + static_cast<std::int64_t>(b) * heads * square;
    gemm_batched<T>(ctx, false, true, seq, seq, d, scale, base, ld, d, base + h, ld, d, 0.0f, p,
                    seq, square, heads);
  }
  launch<causal_softmax_kernel<T>>(
      static_cast<unsigned>(static_cast<std::int64_t>(batch) * heads * seq), threads_for(seq), 0,
      stream(ctx), probs, seq);
  Tensor<T> dropped(ctx.device(), dropout.active() ? static_cast<std::size_t>(heads) * square : 0);
  for (int b = 0; b < batch; ++b) {
    const T* v = qkv + static_cast<std::int64_t>(b) * seq * ld + 2 * h;
    const T* p = probs + static_cast<std::int64_t>(b) * heads * square;
    T* o = out + static_cast<std::int64_t>(b) * seq * h;
    if (dropout.active()) {
      launch<dropout_probs_kernel<T>>(blocks_for(dropped.size()), kThreads, 0, stream(ctx), p,
                                      dropped.data(), seq, heads, b, dropout);
      p = dropped.data();
    }
    gemm_batched<T>(ctx, false, false, seq, d, seq, 1.0f, p, seq, square, v, ld, d, 0.0f, o, h, d,
                    heads);
  }
}

template <typename T>
void attention_backward(Context& ctx, const T* qkv, const T* probs, const T* d_out, T* d_qkv,
                        int batch, int seq, int heads, int h, const DropoutKey& dropout) {
  if (batch == 0) return;
  const int d = h / heads, ld = 3 * h;
  const std::int64_t square = static_cast<std::int64_t>(seq) * seq;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Tensor<T> scratch(ctx.device(), static_cast<std::size_t>(heads) * square);  // dP, then dS
  Tensor<T> dropped(ctx.device(), dropout.active() ? static_cast<std::size_t>(heads) * square : 0);
  for (int b = 0; b < batch; ++b) {
    const T* q = qkv + static_cast<std::int64_t>(b) * seq * ld;
    const T* k = q + h;
    const T* v = q + 2 * h;
    T* dq = d_qkv + static_cast<std::int64_t>(b) * seq * ld;
    T* dk = dq + h;
    T* dv = dq + 2 * h;
    const T* p = probs + static_cast<std::int64_t>(b) * heads * square;
    const T* dout = d_out + static_cast<std::int64_t>(b) * seq * h;
    const T* pv = p;  // what multiplied V: the dropped probabilities under dropout
    if (dropout.active()) {
      launch<dropout_probs_kernel<T>>(blocks_for(dropped.size()), kThreads, 0, stream(ctx), p,
                                      dropped.data(), seq, heads, b, dropout);
      pv = dropped.data();
    }
    // dV = P^T dO; dP = dO V^T
    gemm_batched<T>(ctx, true, false, seq, d, seq, 1.0f, pv, seq, square, dout, h, d, 0.0f, dv, ld,
                    d, heads);
    gemm_batched<T>(ctx, false, true, seq, seq, d, 1.0f, dout, h, d, v, ld, d, 0.0f, scratch.data(),
                    seq, square, heads);
    launch<softmax_backward_kernel<T>>(static_cast<unsigned>(heads * seq), threads_for(seq), 0,
                                       stream(ctx), p, scratch.data(), seq, scale, b, dropout);
    // dQ = dS K; dK = dS^T Q
    gemm_batched<T>(ctx, false, false, seq, d, seq, 1.0f, scratch.data(), seq, square, k, ld, d,
                    0.0f, dq, ld, d, heads);
    gemm_batched<T>(ctx, true, false, seq, d, seq, 1.0f, scratch.data(), seq, square, q, ld, d,
                    0.0f, dk, ld, d, heads);
  }
}

#define TED_INSTANTIATE_ATTENTION(T)                                                              \
  template void attention_forward<T>(Context&, const T*, T*, T*, int, int, int, int,              \
                                     const DropoutKey&);                                          \
  template void attention_backward<T>(Context&, const T*, const T*, const T*, T*, int, int, int,  \
                                      int, const DropoutKey&);                                    \
  template void flash_attention_forward<T>(Context&, const T*, T*, float*, int, int, int, int,    \
                                           const DropoutKey&);                                    \
  template void flash_attention_backward<T>(Context&, const T*, const T*, const float*, const T*, \
                                            T*, int, int, int, int, const DropoutKey&);
TED_INSTANTIATE_ATTENTION(float)
TED_INSTANTIATE_ATTENTION(Half)
TED_INSTANTIATE_ATTENTION(BFloat16)

}  // namespace ted::kernels::cuda
