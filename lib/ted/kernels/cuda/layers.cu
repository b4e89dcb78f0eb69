// The dense layers on the GPU: conversions, bias, initialisation, linear, LayerNorm, GeLU,
// causal attention (materialised here, fused in flash_attention.cuh), cross-entropy and the
// embedding. The same shapes and conventions as kernels/cpu/layers.cpp (backend/ops.hpp).
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ted/core/random.hpp"
#include "ted/kernels/cuda/common.cuh"
#include "ted/kernels/cuda/flash_attention.cuh"
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

// One block per row; two passes over the row in fp32.
template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                         float* mean, float* rstd, int h) {
  __shared__ float shared[32];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  float s = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) s += load(x[base + j]);
  const float mu = block_sum(s, shared) / h;
  float var = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    float d = load(x[base + j]) - mu;
    var += d * d;
  }
  const float r = rsqrtf(block_sum(var, shared) / h + 1e-5f);
  for (int j = threadIdx.x; j < h; j += blockDim.x)
    y[base + j] = store<T>((load(x[base + j]) - mu) * r * load(gamma[j]) + load(beta[j]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
}

// One block per row, read once a Pack at a time into the block's shared row (fp32), then the
// mean, the variance about it and the output from there.
template <typename T>
__global__ void layernorm_forward_packs_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                               float* mean, float* rstd, int h) {
  constexpr int P = Pack<T>::kSize;
  __shared__ float shared[32];
  float* row = dynamic_shared<float>();
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  float s = 0;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    const Pack<T> p = load_pack(x + base + j);
    for (int q = 0; q < P; ++q) s += (row[j + q] = load(p.v[q]));
  }
  const float mu = block_sum(s, shared) / h;  // each thread reads back only what it wrote
  float var = 0;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P)
    for (int q = 0; q < P; ++q) {
      const float d = row[j + q] - mu;
      var += d * d;
    }
  const float r = rsqrtf(block_sum(var, shared) / h + 1e-5f);
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    const Pack<T> g = load_pack(gamma + j), b = load_pack(beta + j);
    Pack<T> out;
    for (int q = 0; q < P; ++q)
      out.v[q] = store<T>((row[j + q] - mu) * r * load(g.v[q]) + load(b.v[q]));
    store_pack(y + base + j, out);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
}

// dx += r (g - (sum g + xhat sum g xhat) / h), g = dy gamma: one block per row, x and dy read once
// a Pack at a time, xhat and g kept in the block's shared memory (2h floats).
template <typename T>
__global__ void layernorm_backward_dx_packs_kernel(const T* x, const T* gamma, const float* mean,
                                                   const float* rstd, const T* dy, T* dx, int h) {
  constexpr int P = Pack<T>::kSize;
  __shared__ float shared[32];
  float* xhat = dynamic_shared<float>();
  float* g = xhat + h;
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sum_g = 0, sum_gx = 0;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    const Pack<T> px = load_pack(x + base + j), pd = load_pack(dy + base + j);
    const Pack<T> pg = load_pack(gamma + j);
    for (int q = 0; q < P; ++q) {
      const float xh = (load(px.v[q]) - mu) * r, gq = load(pd.v[q]) * load(pg.v[q]);
      xhat[j + q] = xh;
      g[j + q] = gq;
      sum_g += gq;
      sum_gx += gq * xh;
    }
  }
  sum_g = block_sum(sum_g, shared);
  sum_gx = block_sum(sum_gx, shared);
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    Pack<T> out = load_pack(dx + base + j);
    for (int q = 0; q < P; ++q)
      out.v[q] = store<T>(load(out.v[q]) + r * (g[j + q] - (sum_g + xhat[j + q] * sum_gx) / h));
    store_pack(dx + base + j, out);
  }
}

template <typename T>
__global__ void layernorm_backward_dx_kernel(const T* x, const T* gamma, const float* mean,
                                             const float* rstd, const T* dy, T* dx, int h) {
  __shared__ float shared[32];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sum_g = 0, sum_gx = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    float xhat = (load(x[base + j]) - mu) * r;
    float g = load(dy[base + j]) * load(gamma[j]);
    sum_g += g;
    sum_gx += g * xhat;
  }
  sum_g = block_sum(sum_g, shared);
  sum_gx = block_sum(sum_gx, shared);
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    float xhat = (load(x[base + j]) - mu) * r;
    float g = load(dy[base + j]) * load(gamma[j]);
    dx[base + j] = store<T>(load(dx[base + j]) + r * (g - (sum_g + xhat * sum_gx) / h));
  }
}

// dgamma, dbeta: columns across x, chunks of rows across y, partials added atomically.
template <typename T>
__global__ void layernorm_backward_params_kernel(const T* x, const float* mean, const float* rstd,
                                                 const T* dy, float* dgamma, float* dbeta, int n,
                                                 int h, int chunk) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= h) return;
  const int first = blockIdx.y * chunk, last = min(n, first + chunk);
  float g = 0, b = 0;
  for (int r = first; r < last; ++r) {
    std::size_t i = static_cast<std::size_t>(r) * h + col;
    float grad = load(dy[i]);
    g += grad * (load(x[i]) - mean[r]) * rstd[r];
    b += grad;
  }
  if (first < last) {
    atomicAdd(dgamma + col, g);
    atomicAdd(dbeta + col, b);
  }
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

// Row max and log-sum-exp of one row of logits, in fp32 (every thread gets both).
template <typename T>
__device__ float row_log_sum(const T* row, int vocab, float* shared) {
  float max = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) max = fmaxf(max, load(row[j]));
  max = block_max(max, shared);
  float sum = 0;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(load(row[j]) - max);
  return logf(block_sum(sum, shared)) + max;
}

template <typename T>
__global__ void cross_entropy_loss_kernel(const T* logits, const std::int32_t* targets,
                                          float* log_sum, float* row_loss, int vocab) {
  __shared__ float shared[32];
  const T* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;
  const float lse = row_log_sum(row, vocab, shared);
  if (threadIdx.x == 0) {
    log_sum[blockIdx.x] = lse;
    row_loss[blockIdx.x] = lse - load(row[targets[blockIdx.x]]);
  }
}

// The CPU's order: (p * factor, minus factor at the target) * scale, rounded once; 0 in the
// padding columns (words and after). Element j is read before it is written, so in place is
// fine.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const std::int32_t* targets,
                                              const float* log_sum, T* d_logits, int vocab,
                                              float factor, float scale, int first_word,
                                              int words) {
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * vocab;
  const float lse = log_sum[blockIdx.x];
  const int target = targets[blockIdx.x] - first_word;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    if (j >= words) {
      d_logits[base + j] = store<T>(0.0f);
      continue;
    }
    float g = expf(load(logits[base + j]) - lse) * factor;
    if (j == target) g -= factor;
    d_logits[base + j] = store<T>(g * scale);
  }
}

// The vocabulary-parallel cross-entropy's steps, one block per row of logits [n, cols] whose
// first `words` columns are words (backend/ops.hpp): the row's max; then its sum of
// exp(logit - the whole vocabulary's max) and its target's logit where it is here.
template <typename T>
__global__ void cross_entropy_max_kernel(const T* logits, float* row_max, int cols, int words) {
  __shared__ float shared[32];
  const T* row = logits + static_cast<std::size_t>(blockIdx.x) * cols;
  float max = -INFINITY;
  for (int j = threadIdx.x; j < words; j += blockDim.x) max = fmaxf(max, load(row[j]));
  max = block_max(max, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = max;
}

template <typename T>
__global__ void cross_entropy_partials_kernel(const T* logits, const std::int32_t* targets,
                                              const float* row_max, float* partials, int n,
                                              int cols, int first_word, int words) {
  __shared__ float shared[32];
  const T* row = logits + static_cast<std::size_t>(blockIdx.x) * cols;
  const float max = row_max[blockIdx.x];
  float sum = 0;
  for (int j = threadIdx.x; j < words; j += blockDim.x) sum += expf(load(row[j]) - max);
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    const int target = targets[blockIdx.x] - first_word;
    partials[blockIdx.x] = sum;
    partials[n + blockIdx.x] = target >= 0 && target < words ? load(row[target]) : 0.0f;
  }
}

// log_sum = max + log(sum) and each row's loss, from the whole vocabulary's statistics.
__global__ void cross_entropy_finish_kernel(const float* row_max, const float* partials,
                                            float* log_sum, float* row_loss, int n) {
  TED_GRID_STRIDE(i, static_cast<std::size_t>(n)) {
    const float lse = logf(partials[i]) + row_max[i];
    log_sum[i] = lse;
    row_loss[i] = lse - partials[n + i];
  }
}

// Per block, its rows' losses summed; add_partials adds the blocks' sums in a fixed order.
__global__ void sum_kernel(const float* values, std::size_t count, double* partials) {
  __shared__ float shared[32];
  float part = 0;
  TED_GRID_STRIDE(i, count) part += values[i];
  part = block_sum(part, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = part;
}

// x = tok[token - first_word] (0 for a token outside the table's words) + pos (0 without one).
template <typename T>
__global__ void embedding_forward_kernel(const std::int32_t* tokens, const T* tok, const T* pos,
                                         T* x, int n, int seq, int h, int first_word, int words) {
  const std::size_t count = static_cast<std::size_t>(n) * h;
  TED_GRID_STRIDE(i, count) {
    const std::size_t row = i / h, col = i % h;
    const int word = tokens[row] - first_word;
    const float t =
        word >= 0 && word < words ? load(tok[static_cast<std::size_t>(word) * h + col]) : 0.0f;
    x[i] = store<T>(t + (pos ? load(pos[(row % seq) * h + col]) : 0.0f));
  }
}

// One block per token row, a Pack at a time.
template <typename T>
__global__ void embedding_forward_rows_kernel(const std::int32_t* tokens, const T* tok,
                                              const T* pos, T* x, int seq, int h, int first_word,
                                              int words) {
  constexpr int P = Pack<T>::kSize;
  const std::size_t row = blockIdx.x;
  const int word = tokens[row] - first_word;
  const T* t = word >= 0 && word < words ? tok + static_cast<std::size_t>(word) * h : nullptr;
  const T* p = pos ? pos + (row % seq) * h : nullptr;
  T* out = x + row * h;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    float a[P] = {}, b[P] = {};
    if (t) {
      const Pack<T> v = load_pack(t + j);
      for (int q = 0; q < P; ++q) a[q] = load(v.v[q]);
    }
    if (p) {
      const Pack<T> v = load_pack(p + j);
      for (int q = 0; q < P; ++q) b[q] = load(v.v[q]);
    }
    Pack<T> sum;
    for (int q = 0; q < P; ++q) sum.v[q] = store<T>(a[q] + b[q]);
    store_pack(out + j, sum);
  }
}

template <typename T>
__global__ void embedding_backward_kernel(const std::int32_t* tokens, const T* dx, float* dtok,
                                          float* dpos, int n, int seq, int h, int first_word,
                                          int words) {
  const std::size_t count = static_cast<std::size_t>(n) * h;
  TED_GRID_STRIDE(i, count) {
    const std::size_t row = i / h, col = i % h;
    const float g = load(dx[i]);
    const int word = tokens[row] - first_word;
    if (dtok && word >= 0 && word < words)
      atomicAdd(dtok + static_cast<std::size_t>(word) * h + col, g);
    if (dpos) atomicAdd(dpos + (row % seq) * h + col, g);
  }
}

// 16-bit position gradients: each position's sum over the sequences (rows p, p + seq, ...) in
// fp32, added into the 16-bit gradient once.
template <typename T>
__global__ void position_grad_kernel(const T* dx, T* dpos, int n, int seq, int h) {
  const std::size_t count = static_cast<std::size_t>(seq) * h;
  TED_GRID_STRIDE(k, count) {
    float sum = 0.0f;
    for (std::size_t i = k / h; i < static_cast<std::size_t>(n); i += seq)
      sum += load(dx[i * h + k % h]);
    dpos[k] = store<T>(load(dpos[k]) + sum);
  }
}

// 16-bit token-table gradients: the rows sorted by word (keys: the word in this slice, or
// kNoWord for a token outside it), then per (first row of a word, column) the word's rows
// summed in fp32 in row order, added into the 16-bit row once.
constexpr std::uint32_t kNoWord = 0xffffffffu;

__global__ void word_keys_kernel(const std::int32_t* tokens, std::uint32_t* keys,
                                 std::int32_t* rows, int n, int first_word, int words) {
  TED_GRID_STRIDE(i, static_cast<std::size_t>(n)) {
    const int word = tokens[i] - first_word;
    keys[i] = word >= 0 && word < words ? static_cast<std::uint32_t>(word) : kNoWord;
    rows[i] = static_cast<std::int32_t>(i);
  }
}

template <typename T>
__global__ void word_grad_kernel(const std::uint32_t* keys, const std::int32_t* rows, const T* dx,
                                 T* dtok, int n, int h) {
  const std::size_t count = static_cast<std::size_t>(n) * h;
  TED_GRID_STRIDE(k, count) {
    const std::size_t at = k / h, col = k % h;
    const std::uint32_t word = keys[at];
    if (word == kNoWord || (at > 0 && keys[at - 1] == word)) continue;  // not a word's first row
    float sum = 0.0f;
    for (std::size_t e = at; e < static_cast<std::size_t>(n) && keys[e] == word; ++e)
      sum += load(dx[static_cast<std::size_t>(rows[e]) * h + col]);
    T* out = dtok + static_cast<std::size_t>(word) * h + col;
    *out = store<T>(load(*out) + sum);
  }
}

constexpr int kRowChunk = 256;  // rows per partial sum in the column reductions

// Rows per chunk of a column reduction over `rows` rows: kRowChunk, or more where that would
// need more chunks than a grid's y dimension has (65535).
int row_chunk(int rows) {
  const int needed = static_cast<int>((static_cast<std::int64_t>(rows) + 65534) / 65535);
  return needed > kRowChunk ? needed : kRowChunk;
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

// A weight gradient's GEMM, C += A B: into the fp32 gradient, or into the 16-bit one, cuBLAS
// accumulating in fp32 and rounding once on store (beta = 1).
template <typename T>
void weight_gemm(Context& ctx, bool ta, bool tb, int m, int n, int k, const T* a, int lda,
                 const T* b, int ldb, GradOut<T> c, int ldc) {
  if (c.low)
    gemm<T>(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c.low, ldc);
  else
    gemm_f32_out<T>(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c.master, ldc);
}

template <typename T>
void init_normal(Context& ctx, T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key,
                 double std, const model::SliceMap& map) {
  if (!count) return;
  launch<init_normal_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), dst, count, seed, key,
                                std, map);
}

// The dense layers' GEMMs carry their bias, residual and GeLU in the epilogue (gemm_fused).
template <typename T>
void linear_forward(Context& ctx, const T* x, const T* w, const T* b, T* y, int n, int in,
                    int out) {
  if (n == 0) return;
  if (!b) {
    gemm<T>(ctx, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
    return;
  }
  GemmEpilogue<T> e;
  e.kind = Epilogue::bias;
  e.bias = b;
  gemm_fused<T>(ctx, false, false, n, out, in, x, in, 0, w, out, 0, y, out, 0, 1, e);
}

template <typename T>
void linear_residual_forward(Context& ctx, const T* x, const T* w, const T* b, const T* residual,
                             T* y, int n, int in, int out) {
  if (n == 0) return;
  GemmEpilogue<T> e;
  e.kind = b ? Epilogue::bias : Epilogue::none;
  e.bias = b;
  e.residual = residual;
  gemm_fused<T>(ctx, false, false, n, out, in, x, in, 0, w, out, 0, y, out, 0, 1, e);
}

template <typename T>
void linear_gelu_forward(Context& ctx, const T* x, const T* w, const T* b, T* hidden, T* act, int n,
                         int in, int out) {
  if (n == 0) return;
  GemmEpilogue<T> e;
  e.kind = Epilogue::gelu_aux_bias;
  e.bias = b;
  e.aux = hidden;
  e.ld_aux = out;
  gemm_fused<T>(ctx, false, false, n, out, in, x, in, 0, w, out, 0, act, out, 0, 1, e);
}

template <typename T>
void linear_dgelu_backward(Context& ctx, const T* dy, const T* w, const T* hidden, T* d_hidden,
                           GradOut<T> db, int n, int in, int out) {
  if (n == 0) return;
  GemmEpilogue<T> e;
  e.kind = Epilogue::dgelu;
  e.aux = const_cast<T*>(hidden);  // read only: dgelu reads its aux
  e.ld_aux = in;
  gemm_fused<T>(ctx, false, true, n, in, out, dy, out, 0, w, out, 0, d_hidden, in, 0, 1, e);
  bias_grad_into<T>(ctx, d_hidden, db, n, in, n, 1);
}

template <typename T>
void linear_backward(Context& ctx, const T* x, const T* w, const T* dy, T* dx, GradOut<T> dw,
                     GradOut<T> db, int n, int in, int out) {
  if (n == 0) return;
  if (dx) gemm<T>(ctx, false, true, n, in, out, 1.0f, dy, out, w, out, 1.0f, dx, in);
  weight_gemm<T>(ctx, true, false, in, out, n, x, in, dy, out, dw, out);
  bias_grad_into<T>(ctx, dy, db, n, out, n, 1);
}

template <typename T>
void gate_logits(Context& ctx, const T* x, const T* w, float* logits, int n, int in, int out) {
  if (n == 0) return;
  gemm_f32_out<T>(ctx, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, logits, out);
}

// The LayerNorm row kernels keep rows in shared memory: up to this many floats per block (the
// default limit of 48 KiB, no opt-in needed).
constexpr int kRowFloats = 12 * 1024;

template <typename T>
void layernorm_forward(Context& ctx, const T* x, const T* gamma, const T* beta, T* y, float* mean,
                       float* rstd, int n, int h) {
  if (n == 0) return;
  if (h <= kRowFloats && packable<T>(h, {x, gamma, beta, y})) {
    launch<layernorm_forward_packs_kernel<T>>(n, row_threads(h, Pack<T>::kSize), h * sizeof(float),
                                              stream(ctx), x, gamma, beta, y, mean, rstd, h);
    return;
  }
  launch<layernorm_forward_kernel<T>>(n, threads_for(h), 0, stream(ctx), x, gamma, beta, y, mean,
                                      rstd, h);
}

template <typename T>
void layernorm_backward(Context& ctx, const T* x, const T* gamma, const float* mean,
                        const float* rstd, const T* dy, T* dx, GradOut<T> dgamma_out,
                        GradOut<T> dbeta_out, int n, int h) {
  if (n == 0) return;
  if (2 * h <= kRowFloats && packable<T>(h, {x, gamma, dy, dx}))
    launch<layernorm_backward_dx_packs_kernel<T>>(n, row_threads(h, Pack<T>::kSize),
                                                  2 * h * sizeof(float), stream(ctx), x, gamma,
                                                  mean, rstd, dy, dx, h);
  else
    launch<layernorm_backward_dx_kernel<T>>(n, threads_for(h), 0, stream(ctx), x, gamma, mean, rstd,
                                            dy, dx, h);
  // 16-bit gradients: gamma's and beta's column sums in an fp32 scratch [2, h], added in once.
  const bool low = dgamma_out.low || dbeta_out.low;
  Tensor<float> sums =
      low ? zeros<float>(ctx.device(), 2 * static_cast<std::size_t>(h)) : Tensor<float>();
  float* dgamma = low ? sums.data() : dgamma_out.master;
  float* dbeta = low ? sums.data() + h : dbeta_out.master;
  const int chunk = row_chunk(n);
  const dim3 grid((h + 127) / 128, (n + chunk - 1) / chunk);
  launch<layernorm_backward_params_kernel<T>>(grid, 128, 0, stream(ctx), x, mean, rstd, dy, dgamma,
                                              dbeta, n, h, chunk);
  if (dgamma_out.low) accumulate<T>(ctx, dgamma, dgamma_out.low, static_cast<std::size_t>(h));
  if (dbeta_out.low) accumulate<T>(ctx, dbeta, dbeta_out.low, static_cast<std::size_t>(h));
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

template <typename T>
double cross_entropy_loss(Context& ctx, const T* logits, const std::int32_t* targets,
                          float* log_sum, int n, int vocab) {
  if (n == 0) return 0.0;
  Tensor<float> row_loss(ctx.device(), static_cast<std::size_t>(n));
  Tensor<double> total = zeros<double>(ctx.device(), 1);
  launch<cross_entropy_loss_kernel<T>>(n, threads_for(vocab), 0, stream(ctx), logits, targets,
                                       log_sum, row_loss.data(), vocab);
  const unsigned blocks = partial_blocks(n);
  Tensor<double> partials(ctx.device(), blocks);
  launch<sum_kernel>(blocks, kThreads, 0, stream(ctx), row_loss.data(), n, partials.data());
  add_partials(ctx, partials.data(), blocks, total.data());
  double host = 0;
  ctx.device().copy_to_host(&host, total.data(), sizeof host);
  return static_cast<double>(static_cast<float>(host / n));
}

template <typename T>
void cross_entropy_backward(Context& ctx, const T* logits, const std::int32_t* targets,
                            const float* log_sum, T* d_logits, int n, int vocab, float scale,
                            int first_word, int words) {
  if (n == 0 || vocab == 0) return;
  launch<cross_entropy_backward_kernel<T>>(n, threads_for(vocab), 0, stream(ctx), logits, targets,
                                           log_sum, d_logits, vocab, 1.0f / static_cast<float>(n),
                                           scale, first_word, words);
}

template <typename T>
void cross_entropy_max(Context& ctx, const T* logits, float* row_max, int n, int cols, int words) {
  if (n == 0) return;
  launch<cross_entropy_max_kernel<T>>(n, threads_for(words), 0, stream(ctx), logits, row_max, cols,
                                      words);
}

template <typename T>
void cross_entropy_partials(Context& ctx, const T* logits, const std::int32_t* targets,
                            const float* row_max, float* partials, int n, int cols, int first_word,
                            int words) {
  if (n == 0) return;
  launch<cross_entropy_partials_kernel<T>>(n, threads_for(words), 0, stream(ctx), logits, targets,
                                           row_max, partials, n, cols, first_word, words);
}

// The mean as cross_entropy_loss takes it (per-block partial sums, added in a fixed order).
double cross_entropy_finish(Context& ctx, const float* row_max, const float* partials,
                            float* log_sum, int n) {
  if (n == 0) return 0.0;
  Tensor<float> row_loss(ctx.device(), static_cast<std::size_t>(n));
  Tensor<double> total = zeros<double>(ctx.device(), 1);
  launch<cross_entropy_finish_kernel>(blocks_for(n), kThreads, 0, stream(ctx), row_max, partials,
                                      log_sum, row_loss.data(), n);
  const unsigned blocks = partial_blocks(n);
  Tensor<double> sums(ctx.device(), blocks);
  launch<sum_kernel>(blocks, kThreads, 0, stream(ctx), row_loss.data(), n, sums.data());
  add_partials(ctx, sums.data(), blocks, total.data());
  double host = 0;
  ctx.device().copy_to_host(&host, total.data(), sizeof host);
  return static_cast<double>(static_cast<float>(host / n));
}

template <typename T>
void embedding_forward(Context& ctx, const std::int32_t* tokens, const T* tok, const T* pos, T* x,
                       int n, int seq, int h, int first_word, int words) {
  const std::size_t count = static_cast<std::size_t>(n) * h;
  if (!count) return;
  if (packable<T>(h, {tok, pos, x})) {
    launch<embedding_forward_rows_kernel<T>>(n, row_threads(h, Pack<T>::kSize), 0, stream(ctx),
                                             tokens, tok, pos, x, seq, h, first_word, words);
    return;
  }
  launch<embedding_forward_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), tokens, tok, pos,
                                      x, n, seq, h, first_word, words);
}

template <typename T>
void lm_head_forward(Context& ctx, const T* x, const T* table, T* logits, int n, int h, int rows) {
  if (n == 0 || rows == 0) return;
  gemm<T>(ctx, false, true, n, rows, h, 1.0f, x, h, table, h, 0.0f, logits, rows);
}

template <typename T>
void lm_head_backward(Context& ctx, const T* x, const T* table, const T* d_logits, T* dx,
                      GradOut<T> d_table, int n, int h, int rows) {
  if (n == 0 || rows == 0) return;
  if (dx) gemm<T>(ctx, false, false, n, h, rows, 1.0f, d_logits, rows, table, h, 1.0f, dx, h);
  weight_gemm<T>(ctx, true, false, rows, h, n, d_logits, rows, x, h, d_table, h);
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

template <typename T>
void embedding_backward(Context& ctx, const std::int32_t* tokens, const T* dx, GradOut<T> dtok,
                        GradOut<T> dpos, int n, int seq, int h, int first_word, int words) {
  const std::size_t count = static_cast<std::size_t>(n) * h;
  if (!count) return;
  if (dtok.master || dpos.master)
    launch<embedding_backward_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), tokens, dx,
                                         dtok.master, dpos.master, n, seq, h, first_word, words);
  if (dtok.low) {
    const std::size_t rows = static_cast<std::size_t>(n);
    std::size_t sort_bytes = 0;
    TED_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, static_cast<const std::uint32_t*>(nullptr),
        static_cast<std::uint32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
        static_cast<std::int32_t*>(nullptr), n, 0, 32, stream(ctx)));
    // keys, sorted keys, rows, sorted rows, the sort's storage (each 256-byte aligned)
    auto aligned = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
    DeviceBuffer work(ctx.device(), 4 * aligned(4 * rows) + aligned(sort_bytes));
    char* at = static_cast<char*>(work.data());
    auto take = [&](std::size_t bytes) {
      void* p = at;
      at += aligned(bytes);
      return p;
    };
    auto* keys = static_cast<std::uint32_t*>(take(4 * rows));
    auto* sorted_keys = static_cast<std::uint32_t*>(take(4 * rows));
    auto* order = static_cast<std::int32_t*>(take(4 * rows));
    auto* sorted_order = static_cast<std::int32_t*>(take(4 * rows));
    void* sort_temp = take(sort_bytes);
    launch<word_keys_kernel>(blocks_for(rows), kThreads, 0, stream(ctx), tokens, keys, order, n,
                             first_word, words);
    TED_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys, sorted_keys, order,
                                                   sorted_order, n, 0, 32, stream(ctx)));
    launch<word_grad_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), sorted_keys,
                                sorted_order, dx, dtok.low, n, h);
  }
  if (dpos.low) {
    const std::size_t positions = static_cast<std::size_t>(seq) * h;
    launch<position_grad_kernel<T>>(blocks_for(positions), kThreads, 0, stream(ctx), dx, dpos.low,
                                    n, seq, h);
  }
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

#define TED_INSTANTIATE_LAYERS(T)                                                                 \
  template void add<T>(Context&, const T*, T*, std::size_t);                                      \
  template void accumulate<T>(Context&, const float*, T*, std::size_t);                           \
  template void add_bias<T>(Context&, T*, const T*, int, int, int, int);                          \
  template void bias_grad<T>(Context&, const T*, float*, int, int, int, int);                     \
  template void init_normal<T>(Context&, T*, std::size_t, std::uint64_t, std::uint64_t, double,   \
                               const model::SliceMap&);                                           \
  template void linear_forward<T>(Context&, const T*, const T*, const T*, T*, int, int, int);     \
  template void linear_residual_forward<T>(Context&, const T*, const T*, const T*, const T*, T*,  \
                                           int, int, int);                                        \
  template void linear_gelu_forward<T>(Context&, const T*, const T*, const T*, T*, T*, int, int,  \
                                       int);                                                      \
  template void linear_dgelu_backward<T>(Context&, const T*, const T*, const T*, T*, GradOut<T>,  \
                                         int, int, int);                                          \
  template void linear_backward<T>(Context&, const T*, const T*, const T*, T*, GradOut<T>,        \
                                   GradOut<T>, int, int, int);                                    \
  template void bias_grad_into<T>(Context&, const T*, GradOut<T>, int, int, int, int);            \
  template void weight_gemm<T>(Context&, bool, bool, int, int, int, const T*, int, const T*, int, \
                               GradOut<T>, int);                                                  \
  template void gate_logits<T>(Context&, const T*, const T*, float*, int, int, int);              \
  template void layernorm_forward<T>(Context&, const T*, const T*, const T*, T*, float*, float*,  \
                                     int, int);                                                   \
  template void layernorm_backward<T>(Context&, const T*, const T*, const float*, const float*,   \
                                      const T*, T*, GradOut<T>, GradOut<T>, int, int);            \
  template void add_bias_residual<T>(Context&, T*, const T*, const T*, int, int);                 \
  template void dropout<T>(Context&, const T*, T*, int, int, const DropoutKey&);                  \
  template void bias_dropout_residual<T>(Context&, T*, const T*, const T*, int, int,              \
                                         const DropoutKey&);                                      \
  template void attention_forward<T>(Context&, const T*, T*, T*, int, int, int, int,              \
                                     const DropoutKey&);                                          \
  template void attention_backward<T>(Context&, const T*, const T*, const T*, T*, int, int, int,  \
                                      int, const DropoutKey&);                                    \
  template void flash_attention_forward<T>(Context&, const T*, T*, float*, int, int, int, int,    \
                                           const DropoutKey&);                                    \
  template void flash_attention_backward<T>(Context&, const T*, const T*, const float*, const T*, \
                                            T*, int, int, int, int, const DropoutKey&);           \
  template double cross_entropy_loss<T>(Context&, const T*, const std::int32_t*, float*, int,     \
                                        int);                                                     \
  template void cross_entropy_backward<T>(Context&, const T*, const std::int32_t*, const float*,  \
                                          T*, int, int, float, int, int);                         \
  template void cross_entropy_max<T>(Context&, const T*, float*, int, int, int);                  \
  template void cross_entropy_partials<T>(Context&, const T*, const std::int32_t*, const float*,  \
                                          float*, int, int, int, int);                            \
  template void embedding_forward<T>(Context&, const std::int32_t*, const T*, const T*, T*, int,  \
                                     int, int, int, int);                                         \
  template void embedding_backward<T>(Context&, const std::int32_t*, const T*, GradOut<T>,        \
                                      GradOut<T>, int, int, int, int, int);                       \
  template void lm_head_forward<T>(Context&, const T*, const T*, T*, int, int, int);              \
  template void lm_head_backward<T>(Context&, const T*, const T*, const T*, T*, GradOut<T>, int,  \
                                    int, int);
TED_INSTANTIATE_LAYERS(float)
TED_INSTANTIATE_LAYERS(Half)
TED_INSTANTIATE_LAYERS(BFloat16)

}  // namespace ted::kernels::cuda
