// The vocabulary's kernels on the GPU: the embedding, the output layer on its table (LM head)
// and the (vocabulary-parallel) cross-entropy. The same shapes and conventions as
// kernels/cpu/vocabulary.cpp (backend/ops.hpp).
#include <cub/device/device_radix_sort.cuh>

#include <cmath>
#include <cstdint>

#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {
namespace {

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

}  // namespace

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

#define TED_INSTANTIATE_VOCABULARY(T)                                                            \
  template double cross_entropy_loss<T>(Context&, const T*, const std::int32_t*, float*, int,    \
                                        int);                                                    \
  template void cross_entropy_backward<T>(Context&, const T*, const std::int32_t*, const float*, \
                                          T*, int, int, float, int, int);                        \
  template void cross_entropy_max<T>(Context&, const T*, float*, int, int, int);                 \
  template void cross_entropy_partials<T>(Context&, const T*, const std::int32_t*, const float*, \
                                          float*, int, int, int, int);                           \
  template void embedding_forward<T>(Context&, const std::int32_t*, const T*, const T*, T*, int, \
                                     int, int, int, int);                                        \
  template void embedding_backward<T>(Context&, const std::int32_t*, const T*, GradOut<T>,       \
                                      GradOut<T>, int, int, int, int, int);                      \
  template void lm_head_forward<T>(Context&, const T*, const T*, T*, int, int, int);             \
  template void lm_head_backward<T>(Context&, const T*, const T*, const T*, T*, GradOut<T>, int, \
                                    int, int);
TED_INSTANTIATE_VOCABULARY(float)
TED_INSTANTIATE_VOCABULARY(Half)
TED_INSTANTIATE_VOCABULARY(BFloat16)

}  // namespace ted::kernels::cuda
