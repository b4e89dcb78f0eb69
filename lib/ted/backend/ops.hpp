// The backend line of the model: every kernel the model, the MoE layer and the optimizer run,
// as one table of virtual functions per backend and storage type (the way ggml draws its
// backend line). The model code is written once against this table and never touches a buffer
// element; the CPU backend (backend/cpu) and the CUDA backend (backend/cuda) implement it, and
// backend/registry.hpp picks one for a device. Buffer copies are the Device's (device/device.hpp).
//
// Types. T is the storage type of activations and of the weight copies the kernels read: fp32,
// bf16 or fp16 (fp64 on the CPU, for the gradient checks). M = master_t<T> is the type of the
// master weights and of the optimizer state, and what every kernel computes and accumulates in:
// fp32 (fp64 for fp64). In fp32 the weight copy is the master. Weight gradients (GradOut,
// core/grad_out.hpp) are M buffers the backward kernels accumulate into, or with 16-bit gradients
// (training.grad_dtype) the T buffers themselves, each call's contribution summed in M and
// rounded once into them (the embedding's scatter-add a table row's tokens at a time).
//
// Shapes and conventions are those of kernels/cpu/linear.hpp: rows are tokens, weights are
// [in, out] (y = x W + b), backward functions accumulate (+=) into parameter gradients and into
// an input gradient named dx. Pointers are in the device's memory; counts are elements. Calls
// are queued on the device in order; those returning a host value wait for their result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ted/core/dtype.hpp"
#include "ted/core/grad_out.hpp"
#include "ted/core/index_range.hpp"
#include "ted/core/slice_map.hpp"
#include "ted/device/device.hpp"
#include "ted/kernels/adamw.hpp"
#include "ted/kernels/elementwise.hpp"
#include "ted/routing/gating.hpp"

namespace ted {

template <typename T>
class Ops {
 public:
  using M = master_t<T>;
  explicit Ops(Device& device) : device_(device) {}
  virtual ~Ops() = default;
  Ops(const Ops&) = delete;
  Ops& operator=(const Ops&) = delete;

  Device& device() const { return device_; }
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // What a benchmark line should say about the kernels that ran (the CUDA backend: how its
  // GEMM epilogues ran); empty where there is nothing to say.
  virtual std::string kernel_notes() { return ""; }

  // ---- element-wise --------------------------------------------------------------------------
  // y += a.
  virtual void add(const T* a, T* y, std::size_t count) = 0;
  // y[row, :] += bias[(row / rows_per_bias) mod biases, :]: one bias (rows_per_bias = rows), or
  // one per expert block of the MoE exchange's [sources, biases, rows_per_bias] layout.
  virtual void add_bias(T* y, const T* bias, int rows, int width, int rows_per_bias,
                        int biases) = 0;
  // y = (y + bias) + residual for one bias [width] over rows [rows, width]: a row-parallel
  // layer's output, its bias and the skip connection in one pass.
  virtual void add_bias_residual(T* y, const T* bias, const T* residual, int rows, int width) = 0;
  // Element-wise conversion between any two of the floating-point types (rounding on store):
  // master weights to their copies and back.
  virtual void convert(const void* src, DataType src_type, void* dst, DataType dst_type,
                       std::size_t count) = 0;
  // dst[i] = std * normal(seed, kInit, key, global_index(map, i)) rounded to T: a parameter
  // shard's initial values (core/random.hpp), the same on every backend and layout.
  virtual void init_normal(T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key,
                           double std, const model::SliceMap& map) = 0;

  // ---- dropout (kernels/elementwise.hpp: the mask of DropoutKey) ----------------------------
  // y[r, j] = x[r, j] * the mask of (token row r, feature j); y may be x. A sub-layer's dropout,
  // and its backward (the same mask on the gradient).
  virtual void dropout(const T* x, T* y, int rows, int width, const kernels::DropoutKey& key) = 0;
  // y = residual + dropout(y + bias) for one bias [width] (or null) over rows [rows, width],
  // computed in M and rounded once: a sub-layer's output, its dropout and the skip connection
  // (Megatron's bias-dropout-add).
  virtual void bias_dropout_residual(T* y, const T* bias, const T* residual, int rows, int width,
                                     const kernels::DropoutKey& key) = 0;

  // ---- the dense layers ------------------------------------------------------------------------
  // x[i] = tok[tokens[i] - first_word] + pos[i mod seq]; backward accumulates into both tables.
  // tok holds the rows of the words first_word .. first_word + words - 1 (the whole vocabulary,
  // or a tensor rank's slice of the vocabulary-parallel embedding): a token outside them gives a
  // zero row and no gradient here. pos (dpos) may be null: nothing added (no gradient). Into
  // 16-bit gradients each row of a table gets its tokens' (positions') sum, in M, rounded once.
  virtual void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x,
                                 int n, int seq, int h, int first_word, int words) = 0;
  virtual void embedding_backward(const std::int32_t* tokens, const T* dx, GradOut<T> dtok,
                                  GradOut<T> dpos, int n, int seq, int h, int first_word,
                                  int words) = 0;
  // The output layer on the embedding table it is tied to, table [rows, h] as the embedding
  // keeps it: logits [n, rows] = x table^T. Backward: dx += d_logits table (if dx), d_table +=
  // d_logits^T x.
  virtual void lm_head_forward(const T* x, const T* table, T* logits, int n, int h, int rows) = 0;
  virtual void lm_head_backward(const T* x, const T* table, const T* d_logits, T* dx,
                                GradOut<T> d_table, int n, int h, int rows) = 0;
  // LayerNorm over h (eps 1e-5), keeping each row's mean and 1/std.
  virtual void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, M* mean, M* rstd,
                                 int n, int h) = 0;
  virtual void layernorm_backward(const T* x, const T* gamma, const M* mean, const M* rstd,
                                  const T* dy, T* dx, GradOut<T> dgamma, GradOut<T> dbeta, int n,
                                  int h) = 0;
  // y = x W + b (b may be null); backward: dx += dy W^T (if dx), dW += x^T dy, db += sums.
  virtual void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) = 0;
  virtual void linear_backward(const T* x, const T* w, const T* dy, T* dx, GradOut<T> dw,
                               GradOut<T> db, int n, int in, int out) = 0;
  // y = x W + b + residual: a row-parallel layer's output with its skip connection, where no
  // tensor reduction comes between (T = 1); a backend may fuse both into the GEMM.
  virtual void linear_residual_forward(const T* x, const T* w, const T* b, const T* residual, T* y,
                                       int n, int in, int out) = 0;
  // An FFN's first layer: hidden = x W + b (kept for the backward) and act = gelu(hidden), in M,
  // rounded into T (act from the unrounded sum where the backend fuses the two).
  virtual void linear_gelu_forward(const T* x, const T* w, const T* b, T* hidden, T* act, int n,
                                   int in, int out) = 0;
  // Back through an FFN's second layer (w [in, out]) and the GeLU before it: d_hidden =
  // (dy W^T) * gelu'(hidden) (overwritten, [n, in]), db += d_hidden's column sums (db may be
  // null). The second layer's weight gradient is linear_backward's, with dx null.
  virtual void linear_dgelu_backward(const T* dy, const T* w, const T* hidden, T* d_hidden,
                                     GradOut<T> db, int n, int in, int out) = 0;
  // The gate's logits x W in the master type (routing decisions are made in fp32).
  virtual void gate_logits(const T* x, const T* w, M* logits, int n, int in, int out) = 0;
  // Causal multi-head attention on qkv [batch*seq, 3h]; probs [batch, heads, seq, seq]. With
  // `dropout` active, out = dropout(probs) v (kernels/cpu/attention.hpp: the mask's rows are the
  // query tokens, its features (global head, key position)); probs stay undropped.
  virtual void attention_forward(const T* qkv, T* out, T* probs, int batch, int seq, int heads,
                                 int h, const kernels::DropoutKey& dropout) = 0;
  // d_qkv is overwritten.
  virtual void attention_backward(const T* qkv, const T* probs, const T* d_out, T* d_qkv, int batch,
                                  int seq, int heads, int h,
                                  const kernels::DropoutKey& dropout) = 0;
  // The same attention fused (FlashAttention-2): the scores live one tile at a time; lse
  // [batch, heads, seq] keeps each row's log-sum-exp of its scaled scores for the backward,
  // which recomputes them tile by tile from qkv, and takes the forward's out as well. The
  // same dropout mask as the materialised attention's.
  virtual void flash_attention_forward(const T* qkv, T* out, M* lse, int batch, int seq, int heads,
                                       int h, const kernels::DropoutKey& dropout) = 0;
  // d_qkv is overwritten.
  virtual void flash_attention_backward(const T* qkv, const T* out, const M* lse, const T* d_out,
                                        T* d_qkv, int batch, int seq, int heads, int h,
                                        const kernels::DropoutKey& dropout) = 0;
  // Which kernel flash_attention_* runs for this shape in this storage type, with or without
  // dropout on the probabilities: "flash" (the suite's own FlashAttention-2) or "cudnn"
  // (cuDNN's fused attention, the kernels the field runs on a GPU), and whether it is the
  // backend's fastest attention for the shape (what model.attention = auto takes; false: the
  // materialised one is faster here).
  struct FusedAttention {
    std::string kernel;
    bool fastest = true;
    std::string note;  // on a GPU without cuDNN's attention for the shape: why not
  };
  virtual FusedAttention fused_attention(int seq, int heads, int h, bool dropout) = 0;
  // The mean cross-entropy of logits [n, vocab] against targets; keeps each row's log-sum-exp
  // in log_sum [n] for the backward.
  virtual double cross_entropy_loss(const T* logits, const std::int32_t* targets, M* log_sum, int n,
                                    int vocab) = 0;
  // d_logits = scale * (softmax - onehot) / n, computed in M and rounded once, so 16-bit
  // storage holds the scaled gradient. d_logits may alias logits. logits [n, vocab] hold the
  // words first_word .. first_word + words - 1 in their first `words` columns (the whole
  // vocabulary: 0 and vocab; or a tensor rank's slice), the rest padding, whose gradient is 0.
  virtual void cross_entropy_backward(const T* logits, const std::int32_t* targets,
                                      const M* log_sum, T* d_logits, int n, int vocab, M scale,
                                      int first_word, int words) = 0;
  // The vocabulary-parallel cross-entropy (Megatron's), in steps around the tensor group's
  // all-reduces, on logits [n, cols] of the words first_word .. first_word + words - 1 (the
  // first `words` columns; the rest padding, left out): row_max [n], each row's max over them
  // (-inf where words is 0), to be all-reduced with max;
  virtual void cross_entropy_max(const T* logits, M* row_max, int n, int cols, int words) = 0;
  // partials [2n]: each row's sum of exp(logit - row_max), then its target's logit where the
  // slice holds the target (else 0), to be all-reduced with sum;
  virtual void cross_entropy_partials(const T* logits, const std::int32_t* targets,
                                      const M* row_max, M* partials, int n, int cols,
                                      int first_word, int words) = 0;
  // then log_sum [n] = row_max + log(sum) for the backward, and the mean cross-entropy. On the
  // whole vocabulary the three steps give cross_entropy_loss's result.
  virtual double cross_entropy_finish(const M* row_max, const M* partials, M* log_sum, int n) = 0;

  // ---- the MoE layer ---------------------------------------------------------------------------
  // Routing of one gating group (routing/gating.hpp), allocating `out`'s buffers on the device.
  virtual void route(const M* logits, int tokens, const routing::GateConfig& config,
                     const routing::RoutingKey& key, routing::Routing<M>& out) = 0;
  // d_logits (overwritten) from the combine weights' gradient [tokens, top_k] and
  // aux_scale * d aux.
  virtual void route_backward(const routing::Routing<M>& routing, const M* d_weight, M aux_scale,
                              T* d_logits) = 0;
  // The aux loss, the dropped choices and each expert's load before drops (a read-back).
  virtual routing::RoutingStats routing_stats(const routing::Routing<M>& routing) = 0;
  // buffer [experts, capacity, h] (overwritten; empty slots 0) gathers the kept tokens of x.
  // `capacity` is the buffer's (padded) capacity, at least the routing's.
  virtual void dispatch(const T* x, const routing::Routing<M>& routing, T* buffer, int h,
                        int capacity) = 0;
  // dx[s] += the gradients of its kept slots.
  virtual void dispatch_backward(const T* d_buffer, const routing::Routing<M>& routing, T* dx,
                                 int h, int capacity) = 0;
  // y[s] = sum over kept choices of weight * expert_out[expert, slot] (overwritten).
  virtual void combine(const T* expert_out, const routing::Routing<M>& routing, T* y, int h,
                       int capacity) = 0;
  // d_expert_out overwritten (0 in empty slots); d_weight [tokens, top_k] overwritten.
  virtual void combine_backward(const T* expert_out, const T* dy,
                                const routing::Routing<M>& routing, T* d_expert_out, M* d_weight,
                                int h, int capacity) = 0;
  // This rank's experts on what the exchange brought: `in` is [sources, experts, rows, h]
  // (block b belongs to local expert b mod experts); w1 [experts, h, f], b1 [experts, f],
  // w2 [experts, f, h]. Keeps hidden (before GeLU) and act [.., rows, f]; out = act W2 without
  // its bias (the model adds b2 after the tensor reduction).
  // used_rows (host, one per block, or null for all rows): block b's rows at or past
  // used_rows[b] are empty capacity slots. A backend may leave them out: their out rows are
  // then 0 and their hidden and act rows unspecified, so callers read out only where tokens are.
  virtual void experts_forward(const T* in, const T* w1, const T* b1, const T* w2, T* hidden,
                               T* act, T* out, int sources, int experts, int rows, int h, int f,
                               const std::int32_t* used_rows) = 0;
  // d_in overwritten; the parameter gradients accumulate (db2 over d_out's rows). used_rows as
  // in experts_forward, where d_out must be 0 (an empty slot's gradient); d_in is 0 there.
  virtual void experts_backward(const T* in, const T* w1, const T* w2, const T* hidden,
                                const T* act, const T* d_out, T* d_in, GradOut<T> dw1,
                                GradOut<T> db1, GradOut<T> dw2, GradOut<T> db2, int sources,
                                int experts, int rows, int h, int f,
                                const std::int32_t* used_rows) = 0;

  // ---- the optimizer ---------------------------------------------------------------------------
  // out[i] = g[i] * scale in M, g of type M or T (16-bit gradients are widened here, a tile at
  // a time: the optimizer's temporary is their only M copy).
  virtual void scale_copy(const void* g, DataType g_type, M* out, std::size_t count, M scale) = 0;
  // One AdamW update (kernels/adamw.hpp) of count elements with their clipped gradient g.
  virtual void adamw(M* value, M* m, M* v, const M* g, std::size_t count,
                     const kernels::AdamHyper<M>& hyper) = 0;
  // initial + the sum of squares over the ranges, accumulated in fp64 (a host value; on the CPU
  // in order, and `initial` lets sums over several buffers add up in one order).
  virtual double sum_squares(const void* data, DataType dtype, std::span<const IndexRange> ranges,
                             double initial) = 0;
  // Whether any of count elements is inf or NaN (a host value): fp16's overflow check.
  virtual bool has_non_finite(const void* data, DataType dtype, std::size_t count) = 0;

 protected:
  Device& device_;
};

}  // namespace ted
