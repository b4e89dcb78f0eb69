// The CUDA kernels of the MoE GPT: what the CUDA backend's kernel table (backend/cuda/
// cuda_ops.cpp) runs, with the shapes and conventions of backend/ops.hpp. Plain C++17 (no CUDA
// headers), so host code can call it; compiled only where nvcc is found (TED_HAVE_CUDA).
//
// Precision: T (float, Half, BFloat16) is the storage type of activations and weight copies;
// every kernel computes in fp32 and cuBLAS accumulates in fp32 (CUBLAS_COMPUTE_32F, no TF32, so
// the fp32 path can be held to ~1e-5 of the CPU reference); parameter gradients, the gate's
// logits, LayerNorm statistics and optimizer state are fp32. Per-element math (GeLU, 16-bit
// rounding, AdamW, the routing and init random numbers, a shard's index map) is the same
// TED_HOST_DEVICE code the CPU backend runs.
//
// Every call queues work on the context's stream and returns; only functions that return a
// host value (losses, statistics, sums, flags) wait for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ted/core/dtype.hpp"
#include "ted/core/grad_out.hpp"
#include "ted/core/index_range.hpp"
#include "ted/core/slice_map.hpp"
#include "ted/device/tensor.hpp"
#include "ted/kernels/adamw.hpp"
#include "ted/kernels/elementwise.hpp"
#include "ted/routing/gating.hpp"

namespace ted::kernels::cuda {

// One CUDA device's stream with a cuBLAS handle bound to it.
class Context {
 public:
  explicit Context(Device& device);  // throws unless `device` is (or wraps) a CUDA device
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device& device() { return device_; }  // allocations go here (it may be a tracking wrapper)
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  Device& device_;
  std::unique_ptr<Impl> impl_;
};

// ---- element-wise --------------------------------------------------------------------------
template <typename From, typename To>
void convert(Context& ctx, const From* src, To* dst, std::size_t count);
template <typename T>
void add(Context& ctx, const T* a, T* y, std::size_t count);  // y += a
// grad += g in fp32, rounded once to T (16-bit gradients).
template <typename T>
void accumulate(Context& ctx, const float* g, T* grad, std::size_t count);
// y[row, :] += bias[(row / rows_per_bias) mod biases, :].
template <typename T>
void add_bias(Context& ctx, T* y, const T* bias, int rows, int width, int rows_per_bias,
              int biases);
// db[(row / rows_per_bias) mod biases, :] += column sums of dy (fp32).
template <typename T>
void bias_grad(Context& ctx, const T* dy, float* db, int rows, int width, int rows_per_bias,
               int biases);
// The same into a parameter gradient (GradOut): fp32, or through an fp32 scratch of the bias
// added into the 16-bit gradient once.
template <typename T>
void bias_grad_into(Context& ctx, const T* dy, GradOut<T> db, int rows, int width,
                    int rows_per_bias, int biases);
// A weight gradient's GEMM, C += op(A) op(B) (row-major, as gemm below): into fp32, or
// into 16-bit storage with fp32 accumulation, rounded once (beta = 1).
template <typename T>
void weight_gemm(Context& ctx, bool ta, bool tb, int m, int n, int k, const T* a, int lda,
                 const T* b, int ldb, GradOut<T> c, int ldc);
// dst[i] = std * random::normal(seed, kInit, key, global_index(map, i)), rounded to T.
template <typename T>
void init_normal(Context& ctx, T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key,
                 double std, const model::SliceMap& map);

// ---- GEMM (row-major, as kernels/cpu/blas.hpp): C = alpha op(A) op(B) + beta C -------------
template <typename T>
void gemm(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a,
          int lda, const T* b, int ldb, float beta, T* c, int ldc);
// The same with an fp32 C (weight gradients, gate logits).
template <typename T>
void gemm_f32_out(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const T* a, int lda, const T* b, int ldb, float beta, float* c, int ldc);
// `batch` GEMMs whose operands are `stride_*` elements apart (experts, attention heads).
template <typename T>
void gemm_batched(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                  const T* a, int lda, std::int64_t stride_a, const T* b, int ldb,
                  std::int64_t stride_b, float beta, T* c, int ldc, std::int64_t stride_c,
                  int batch);
template <typename T>
void gemm_batched_f32_out(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k,
                          float alpha, const T* a, int lda, std::int64_t stride_a, const T* b,
                          int ldb, std::int64_t stride_b, float beta, float* c, int ldc,
                          std::int64_t stride_c, int batch);

// ---- GEMMs with an epilogue (cuBLASLt) ---------------------------------------------------------
// D [m, n] (row-major, leading dimension ldd, `batch` of them stride_d apart) =
//   epilogue(op(A) op(B) + residual + bias), computed in fp32 and rounded into D once:
//   none           D = sum
//   bias           D = sum (the bias added; any kind may have a bias or a residual)
//   gelu_aux_bias  aux = sum, D = gelu(sum): a first FFN layer, keeping its GeLU input
//   dgelu          D = sum * gelu'(aux): the gradient through that GeLU, aux the kept input
// bias is [n] per batch entry, bias_stride apart; residual has D's layout; aux [m, n] with
// leading dimension ld_aux, aux_stride apart. For 16-bit T this is one cuBLASLt matmul with a
// fused epilogue where the library has one for the shape (the GPU reads and writes D once);
// otherwise a GEMM into fp32 and one element-wise pass: always for fp32 (whose results stay
// those of the plain GEMM followed by our element-wise kernels, bit for bit) and for the GeLU
// gradient (cuBLASLt runs that epilogue as a slower kernel of its own after the GEMM).
// TED_CUBLASLT=0 in the environment turns the cuBLASLt path off (a comparison, a workaround).
enum class Epilogue { none, bias, gelu_aux_bias, dgelu };
template <typename T>
struct GemmEpilogue {
  Epilogue kind = Epilogue::none;
  const T* bias = nullptr;
  std::int64_t bias_stride = 0;
  T* aux = nullptr;  // written by gelu_aux_bias, read by dgelu
  int ld_aux = 0;
  std::int64_t aux_stride = 0;
  const T* residual = nullptr;
};
template <typename T>
void gemm_fused(Context& ctx, bool trans_a, bool trans_b, int m, int n, int k, const T* a, int lda,
                std::int64_t stride_a, const T* b, int ldb, std::int64_t stride_b, T* d, int ldd,
                std::int64_t stride_d, int batch, const GemmEpilogue<T>& epilogue);
// How this context's fused GEMMs ran so far: as one cuBLASLt call each, or GEMM + pass.
struct GemmPaths {
  long long cublaslt = 0;
  long long fallback = 0;
};
GemmPaths gemm_paths(Context& ctx);

// ---- the dense layers ------------------------------------------------------------------------
template <typename T>
void linear_forward(Context& ctx, const T* x, const T* w, const T* b, T* y, int n, int in, int out);
// y = x W + b + residual (the row-parallel layer's output with its skip connection).
template <typename T>
void linear_residual_forward(Context& ctx, const T* x, const T* w, const T* b, const T* residual,
                             T* y, int n, int in, int out);
// hidden = x W + b, act = gelu(hidden): an FFN's first layer.
template <typename T>
void linear_gelu_forward(Context& ctx, const T* x, const T* w, const T* b, T* hidden, T* act, int n,
                         int in, int out);
// d_hidden = (dy W^T) * gelu'(hidden) (overwritten), db += its column sums: back through an
// FFN's second layer and the GeLU before it. w is [in, out], d_hidden and hidden [n, in].
template <typename T>
void linear_dgelu_backward(Context& ctx, const T* dy, const T* w, const T* hidden, T* d_hidden,
                           GradOut<T> db, int n, int in, int out);
// Parameter gradients (GradOut) accumulate into fp32, or into 16-bit storage: the GEMMs' through
// cuBLAS's C in T (fp32 accumulation, rounded once with beta = 1), the column sums' through an
// fp32 scratch of the bias (a few KiB) added in once.
template <typename T>
void linear_backward(Context& ctx, const T* x, const T* w, const T* dy, T* dx, GradOut<T> dw,
                     GradOut<T> db, int n, int in, int out);
template <typename T>
void gate_logits(Context& ctx, const T* x, const T* w, float* logits, int n, int in, int out);
template <typename T>
void layernorm_forward(Context& ctx, const T* x, const T* gamma, const T* beta, T* y, float* mean,
                       float* rstd, int n, int h);
template <typename T>
void layernorm_backward(Context& ctx, const T* x, const T* gamma, const float* mean,
                        const float* rstd, const T* dy, T* dx, GradOut<T> dgamma, GradOut<T> dbeta,
                        int n, int h);
// y = (y + bias) + residual.
template <typename T>
void add_bias_residual(Context& ctx, T* y, const T* bias, const T* residual, int rows, int width);
// Dropout with the counter-based mask of kernels/elementwise.hpp (y may be x); and
// y = residual + dropout(y + bias) (bias may be null), in fp32, rounded once.
template <typename T>
void dropout(Context& ctx, const T* x, T* y, int rows, int width, const DropoutKey& key);
template <typename T>
void bias_dropout_residual(Context& ctx, T* y, const T* bias, const T* residual, int rows,
                           int width, const DropoutKey& key);
// With `dropout` active, P V takes the dropped probabilities (a scratch of heads x seq x seq
// from the context's device); probs stay undropped.
template <typename T>
void attention_forward(Context& ctx, const T* qkv, T* out, T* probs, int batch, int seq, int heads,
                       int h, const DropoutKey& dropout);
// d_qkv overwritten; its scratch (heads x seq x seq, twice with dropout) comes from the
// context's device.
template <typename T>
void attention_backward(Context& ctx, const T* qkv, const T* probs, const T* d_out, T* d_qkv,
                        int batch, int seq, int heads, int h, const DropoutKey& dropout);
// Fused causal attention (FlashAttention-2, kernels/cuda/flash_attention.cuh): one block per
// (sequence, head, query tile), key and value tiles in shared memory, an online softmax; lse
// [batch, heads, seq] keeps each row's log-sum-exp for the backward. Dropout as the
// materialised attention's, the mask drawn where P meets V.
template <typename T>
void flash_attention_forward(Context& ctx, const T* qkv, T* out, float* lse, int batch, int seq,
                             int heads, int h, const DropoutKey& dropout);
// d_qkv overwritten. Recomputes the scores tile by tile; its scratch (each row's dO . O and an
// fp32 dQ accumulator) comes from the context's device.
template <typename T>
void flash_attention_backward(Context& ctx, const T* qkv, const T* out, const float* lse,
                              const T* d_out, T* d_qkv, int batch, int seq, int heads, int h,
                              const DropoutKey& dropout);
// Keeps each row's log-sum-exp in log_sum [n] for the backward.
template <typename T>
double cross_entropy_loss(Context& ctx, const T* logits, const std::int32_t* targets,
                          float* log_sum, int n, int vocab);
// d_logits = ((softmax - onehot) / n) * scale, rounded once; may alias logits. The first
// `words` columns hold the words first_word and on; the rest (padding) get 0.
template <typename T>
void cross_entropy_backward(Context& ctx, const T* logits, const std::int32_t* targets,
                            const float* log_sum, T* d_logits, int n, int vocab, float scale,
                            int first_word, int words);
// The vocabulary-parallel cross-entropy's steps (backend/ops.hpp): each row's max over its
// words; each row's sum of exp(logit - max) and target logit (partials [2n]); then log_sum and
// the mean loss (waits for it).
template <typename T>
void cross_entropy_max(Context& ctx, const T* logits, float* row_max, int n, int cols, int words);
template <typename T>
void cross_entropy_partials(Context& ctx, const T* logits, const std::int32_t* targets,
                            const float* row_max, float* partials, int n, int cols, int first_word,
                            int words);
double cross_entropy_finish(Context& ctx, const float* row_max, const float* partials,
                            float* log_sum, int n);
// tok holds the words first_word .. first_word + words - 1 (a token outside: a zero row, no
// gradient); pos, dpos may be null.
template <typename T>
void embedding_forward(Context& ctx, const std::int32_t* tokens, const T* tok, const T* pos, T* x,
                       int n, int seq, int h, int first_word, int words);
template <typename T>
void embedding_backward(Context& ctx, const std::int32_t* tokens, const T* dx, GradOut<T> dtok,
                        GradOut<T> dpos, int n, int seq, int h, int first_word, int words);
// The output layer on its tied embedding table [rows, h]: logits = x table^T; backward
// dx += d_logits table (if dx), d_table += d_logits^T x (fp32).
template <typename T>
void lm_head_forward(Context& ctx, const T* x, const T* table, T* logits, int n, int h, int rows);
template <typename T>
void lm_head_backward(Context& ctx, const T* x, const T* table, const T* d_logits, T* dx,
                      GradOut<T> d_table, int n, int h, int rows);

// ---- MoE: routing, token permutation, experts ------------------------------------------------
// One gating group's routing into `out` (routing/gating.hpp), allocated on the context's device.
// Synchronises only for a dropless capacity (the largest load is read back).
void route(Context& ctx, const float* logits, int tokens, const routing::GateConfig& config,
           const routing::RoutingKey& key, routing::Routing<float>& out);
template <typename T>
void route_backward(Context& ctx, const routing::Routing<float>& routing, const float* d_weight,
                    float aux_scale, T* d_logits);
routing::RoutingStats routing_stats(Context& ctx, const routing::Routing<float>& routing);
// buffer [experts, capacity, h] (overwritten; empty slots 0); capacity >= the routing's.
template <typename T>
void dispatch(Context& ctx, const T* x, const routing::Routing<float>& routing, T* buffer, int h,
              int capacity);
template <typename T>
void dispatch_backward(Context& ctx, const T* d_buffer, const routing::Routing<float>& routing,
                       T* dx, int h, int capacity);
template <typename T>
void combine(Context& ctx, const T* expert_out, const routing::Routing<float>& routing, T* y, int h,
             int capacity);
template <typename T>
void combine_backward(Context& ctx, const T* expert_out, const T* dy,
                      const routing::Routing<float>& routing, T* d_expert_out, float* d_weight,
                      int h, int capacity);
// in [sources, experts, rows, h], block b on local expert b mod experts: per source, one
// strided batch of GEMMs over the experts. out = GeLU(in W1 + b1) W2, without b2.
template <typename T>
void experts_forward(Context& ctx, const T* in, const T* w1, const T* b1, const T* w2, T* hidden,
                     T* act, T* out, int sources, int experts, int rows, int h, int f);
template <typename T>
void experts_backward(Context& ctx, const T* in, const T* w1, const T* w2, const T* hidden,
                      const T* act, const T* d_out, T* d_in, GradOut<T> dw1, GradOut<T> db1,
                      GradOut<T> dw2, GradOut<T> db2, int sources, int experts, int rows, int h,
                      int f);

// ---- the optimizer and loss scaling ------------------------------------------------------------
// out = g * scale in fp32, g of any storage type (16-bit gradients widened).
template <typename T>
void scale_copy(Context& ctx, const T* g, float* out, std::size_t count, float scale);
void adamw(Context& ctx, float* value, float* m, float* v, const float* g, std::size_t count,
           const AdamHyper<float>& hyper);
// initial + the sum of squares over the ranges, in fp64 (waits for the result).
template <typename T>
double sum_squares(Context& ctx, const T* data, const IndexRange* ranges, std::size_t range_count,
                   double initial);
// Whether any of count elements is inf or NaN (waits for the result).
template <typename T>
bool has_non_finite(Context& ctx, const T* data, std::size_t count);

}  // namespace ted::kernels::cuda
