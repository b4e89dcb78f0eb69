// The CUDA kernels of the MoE GPT: the GPU counterpart of ted/kernels/cpu/layers.hpp and
// ted/model/gating.hpp, plus the fused optimizer step and the fp16 loss-scaling checks.
// Plain C++ (no CUDA headers), so host code and the tests can call it; compiled only where
// nvcc is found (TED_HAVE_CUDA).
//
// Precision: activations are stored in T = float, Half or BFloat16; every kernel computes in
// fp32 and cuBLAS accumulates in fp32 (CUBLAS_COMPUTE_32F, no TF32, so the fp32 path can be
// held to ~1e-5 of the CPU reference). Matrices enter GEMMs as T; vectors (biases, LayerNorm,
// embeddings) are read from the fp32 master copy; every gradient of a parameter accumulates in
// fp32. Per-element math (GeLU, 16-bit rounding, AdamW, the routing RNG) is the same
// TED_HOST_DEVICE code the CPU backend runs.
//
// Every call queues work on the context's stream and returns; only functions that return a
// host value (sum, squared_norm, dropped, ...) synchronise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ted/backend/tensor.hpp"
#include "ted/core/dtype.hpp"
#include "ted/model/gating.hpp"

namespace ted::kernels::cuda {

// One CUDA device's stream with a cuBLAS handle bound to it.
class Context {
 public:
  explicit Context(Device& device);  // throws unless `device` is a CUDA device
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device& device() { return device_; }
  void synchronize();
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  Device& device_;
  std::unique_ptr<Impl> impl_;
};

// ---- conversions and element-wise --------------------------------------------------------
template <typename T>
void from_float(Context& ctx, const float* src, T* dst, std::size_t count);
template <typename T>
void to_float(Context& ctx, const T* src, float* dst, std::size_t count);
template <typename T>
void copy(Context& ctx, const T* src, T* dst, std::size_t count);
template <typename T>
void zero(Context& ctx, T* dst, std::size_t count);
template <typename T>
void add(Context& ctx, const T* a, T* y, std::size_t count);      // y += a
float sum(Context& ctx, const float* values, std::size_t count);  // synchronises
// dst[i] = std * random::normal(seed, kInit, key, i): the CPU init's generator, on the device
// (benchmark weights at sizes the host would take minutes to fill).
void init_normal(Context& ctx, float* dst, std::size_t count, std::uint64_t seed, std::uint64_t key,
                 float std);

// ---- GEMM (row-major, as kernels/cpu/blas.hpp): C = alpha op(A) op(B) + beta C -----------
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

// ---- layers (shapes and conventions as kernels/cpu/layers.hpp) --------------------------
// y[rows, width] += bias[(row / rows_per_bias), :] (experts: one bias per block of rows).
template <typename T>
void add_bias(Context& ctx, T* y, const float* bias, int rows, int width, int rows_per_bias);
// db[(row / rows_per_bias), :] += column sums of dy (fp32).
template <typename T>
void bias_grad(Context& ctx, const T* dy, float* db, int rows, int width, int rows_per_bias);

// y = x W + b; b may be null.
template <typename T>
void linear_forward(Context& ctx, const T* x, const T* w, const float* b, T* y, int n, int in,
                    int out);
// dx += dy W^T (if dx), dW += x^T dy, db += column sums of dy (if db).
template <typename T>
void linear_backward(Context& ctx, const T* x, const T* w, const T* dy, T* dx, float* dw, float* db,
                     int n, int in, int out);

template <typename T>
void layernorm_forward(Context& ctx, const T* x, const float* gamma, const float* beta, T* y,
                       float* mean, float* rstd, int n, int h);
// dx += ..., dgamma += ..., dbeta += ...
template <typename T>
void layernorm_backward(Context& ctx, const T* x, const float* gamma, const float* mean,
                        const float* rstd, const T* dy, T* dx, float* dgamma, float* dbeta, int n,
                        int h);

template <typename T>
void gelu_forward(Context& ctx, const T* x, T* y, std::size_t count);
template <typename T>  // dx = dy * gelu'(x); may alias dy
void gelu_backward(Context& ctx, const T* x, const T* dy, T* dx, std::size_t count);

// Causal attention on qkv [batch*seq, 3h]; probs [batch, heads, seq, seq].
template <typename T>
void attention_forward(Context& ctx, const T* qkv, T* out, T* probs, int batch, int seq, int heads,
                       int h);
// d_qkv overwritten; scratch holds heads * seq * seq elements.
template <typename T>
void attention_backward(Context& ctx, const T* qkv, const T* probs, const T* d_out, T* d_qkv,
                        T* scratch, int batch, int seq, int heads, int h);

// Per-row loss (fp32) and d_logits = scale * (softmax - onehot) / n. The mean loss is
// sum(row_loss) / n. d_logits may alias logits.
template <typename T>
void cross_entropy(Context& ctx, const T* logits, const std::int32_t* targets, T* d_logits,
                   float* row_loss, int n, int vocab, float scale);

template <typename T>
void embedding_forward(Context& ctx, const std::int32_t* tokens, const float* tok, const float* pos,
                       T* x, int n, int seq, int h);
template <typename T>
void embedding_backward(Context& ctx, const std::int32_t* tokens, const T* dx, float* dtok,
                        float* dpos, int n, int seq, int h);

// ---- MoE: gate, routing, token permutation, experts -------------------------------------
// One gating group's routing on the device, the semantics of model::route (gating.hpp).
struct DeviceRouting {
  int tokens = 0, experts = 0, top_k = 1, capacity = 0;
  Tensor<float> probs;               // [tokens, experts]
  Tensor<std::int32_t> expert;       // [tokens, top_k]
  Tensor<std::int32_t> slot;         // [tokens, top_k]; -1 = dropped
  Tensor<float> gate_value;          // [tokens, top_k]
  Tensor<float> weight;              // [tokens, top_k]
  Tensor<std::int32_t> first_count;  // [experts]
  Tensor<float> aux;                 // [1]
  Tensor<std::int32_t> order;        // [tokens] priority order (position, or RTS)
  // Workspace, kept between calls so routing neither allocates nor synchronises.
  Tensor<float> aux_terms;                      // [experts]
  Tensor<std::uint64_t> scores, sorted_scores;  // [tokens] RTS keys
  Tensor<std::int32_t> identity, load;          // [tokens], [experts]
  DeviceBuffer sort_temp;                       // CUB's radix-sort temporaries
};

// logits [tokens, experts] in fp32 (the gate GEMM writes fp32). Allocates `out` when the shape
// changes; synchronises only for a dropless capacity (the largest load is read back).
void route(Context& ctx, const float* logits, int tokens, const model::GateConfig& config,
           const model::RoutingKey& key, DeviceRouting& out);
// d_logits (overwritten) from d_weight [tokens, top_k] and aux_scale * d aux.
template <typename T>
void route_backward(Context& ctx, const DeviceRouting& routing, const float* d_weight,
                    float aux_scale, T* d_logits);
int dropped(Context& ctx, const DeviceRouting& routing);  // synchronises
float aux(Context& ctx, const DeviceRouting& routing);    // synchronises

// buffer [experts, capacity, h] (overwritten; empty slots 0) gathers the kept tokens of x.
template <typename T>
void dispatch(Context& ctx, const T* x, const DeviceRouting& routing, T* buffer, int h);
// dx[s] += the gradients of its kept slots.
template <typename T>
void dispatch_backward(Context& ctx, const T* d_buffer, const DeviceRouting& routing, T* dx, int h);
// y[s] = sum over kept choices of weight * expert_out[expert, slot] (overwritten).
template <typename T>
void combine(Context& ctx, const T* expert_out, const DeviceRouting& routing, T* y, int h);
// d_expert_out overwritten (0 in empty slots); d_weight [tokens, top_k] fp32 overwritten.
template <typename T>
void combine_backward(Context& ctx, const T* expert_out, const T* dy, const DeviceRouting& routing,
                      T* d_expert_out, float* d_weight, int h);

// The experts' FFNs as batched GEMMs: in [E, C, h]; w1 [E, h, f]; b1 [E, f]; w2 [E, f, h];
// b2 [E, h]. Keeps hidden (before GeLU) and act; writes out [E, C, h].
template <typename T>
void expert_ffn_forward(Context& ctx, const T* in, const T* w1, const float* b1, const T* w2,
                        const float* b2, T* hidden, T* act, T* out, int experts, int capacity,
                        int h, int f);
// d_in overwritten; d_act is scratch [E, C, f]; parameter gradients accumulate (fp32).
template <typename T>
void expert_ffn_backward(Context& ctx, const T* in, const T* w1, const T* w2, const T* hidden,
                         const T* act, const T* d_out, T* d_in, T* d_act, float* dw1, float* db1,
                         float* dw2, float* db2, int experts, int capacity, int h, int f);

// ---- optimizer and loss scaling ----------------------------------------------------------
struct AdamStep {
  float lr, beta1, beta2, eps, weight_decay;
  float correction1, correction2;  // 1 - beta^t
  float grad_scale;                // multiplies the gradient first (unscale x clip)
};
// One fused AdamW step on fp32 master weights; also writes their T copy (may be null).
template <typename T>
void adamw(Context& ctx, float* master, const float* grad, float* m, float* v, T* copy,
           std::size_t count, const AdamStep& step, bool decay);
// Sum of squares in fp64 (synchronises).
double squared_norm(Context& ctx, const float* values, std::size_t count);
// true when any value is inf or NaN (synchronises): the fp16 overflow check.
bool has_non_finite(Context& ctx, const float* values, std::size_t count);

}  // namespace ted::kernels::cuda
