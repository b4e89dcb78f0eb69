#include "ted/backend/cuda/cuda_ops.hpp"

#include <string>
#include <type_traits>

#include "ted/core/error.hpp"
#include "ted/kernels/cuda/cudnn_attention.hpp"
#include "ted/kernels/cuda/kernels.hpp"

namespace ted::cuda {
namespace {

namespace kc = ted::kernels::cuda;

// Calls f with a typed pointer for a buffer of the storage types the kernels have.
template <typename F>
auto with_typed(const void* data, DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::f32:
      return f(static_cast<const float*>(data));
    case DataType::f16:
      return f(static_cast<const Half*>(data));
    case DataType::bf16:
      return f(static_cast<const BFloat16*>(data));
    default:
      throw Error("the CUDA backend has no " + std::string(to_string(dtype)) + " kernels");
  }
}

template <typename T>
class CudaOps final : public Ops<T> {
 public:
  using M = float;
  explicit CudaOps(Device& device) : Ops<T>(device), ctx_(device), cudnn_(device) {}
  std::string name() const override { return "cuda"; }
  std::string kernel_notes() override {
    const kc::GemmPaths paths = kc::gemm_paths(ctx_);
    return "GEMM epilogues: " + std::to_string(paths.cublaslt) + " fused by cuBLASLt, " +
           std::to_string(paths.fallback) + " as GEMM + pass";
  }

  void add(const T* a, T* y, std::size_t count) override { kc::add<T>(ctx_, a, y, count); }
  void add_bias(T* y, const T* bias, int rows, int width, int rows_per_bias, int biases) override {
    kc::add_bias<T>(ctx_, y, bias, rows, width, rows_per_bias, biases);
  }
  void add_bias_residual(T* y, const T* bias, const T* residual, int rows, int width) override {
    kc::add_bias_residual<T>(ctx_, y, bias, residual, rows, width);
  }
  void convert(const void* src, DataType src_type, void* dst, DataType dst_type,
               std::size_t count) override {
    with_typed(src, src_type, [&](auto* in) {
      with_typed(dst, dst_type, [&](auto* out) {
        using Out = std::remove_const_t<std::remove_pointer_t<decltype(out)>>;
        kc::convert(ctx_, in, const_cast<Out*>(out), count);
        return 0;
      });
      return 0;
    });
  }
  void init_normal(T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key, double std,
                   const model::SliceMap& map) override {
    kc::init_normal<T>(ctx_, dst, count, seed, key, std, map);
  }

  void dropout(const T* x, T* y, int rows, int width, const kernels::DropoutKey& key) override {
    kc::dropout<T>(ctx_, x, y, rows, width, key);
  }
  void bias_dropout_residual(T* y, const T* bias, const T* residual, int rows, int width,
                             const kernels::DropoutKey& key) override {
    kc::bias_dropout_residual<T>(ctx_, y, bias, residual, rows, width, key);
  }
  void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x, int n,
                         int seq, int h, int first_word, int words) override {
    kc::embedding_forward<T>(ctx_, tokens, tok, pos, x, n, seq, h, first_word, words);
  }
  void embedding_backward(const std::int32_t* tokens, const T* dx, GradOut<T> dtok, GradOut<T> dpos,
                          int n, int seq, int h, int first_word, int words) override {
    kc::embedding_backward<T>(ctx_, tokens, dx, dtok, dpos, n, seq, h, first_word, words);
  }
  void lm_head_forward(const T* x, const T* table, T* logits, int n, int h, int rows) override {
    kc::lm_head_forward<T>(ctx_, x, table, logits, n, h, rows);
  }
  void lm_head_backward(const T* x, const T* table, const T* d_logits, T* dx, GradOut<T> d_table,
                        int n, int h, int rows) override {
    kc::lm_head_backward<T>(ctx_, x, table, d_logits, dx, d_table, n, h, rows);
  }
  void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, M* mean, M* rstd, int n,
                         int h) override {
    kc::layernorm_forward<T>(ctx_, x, gamma, beta, y, mean, rstd, n, h);
  }
  void layernorm_backward(const T* x, const T* gamma, const M* mean, const M* rstd, const T* dy,
                          T* dx, GradOut<T> dgamma, GradOut<T> dbeta, int n, int h) override {
    kc::layernorm_backward<T>(ctx_, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, n, h);
  }
  void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) override {
    kc::linear_forward<T>(ctx_, x, w, b, y, n, in, out);
  }
  void linear_backward(const T* x, const T* w, const T* dy, T* dx, GradOut<T> dw, GradOut<T> db,
                       int n, int in, int out) override {
    kc::linear_backward<T>(ctx_, x, w, dy, dx, dw, db, n, in, out);
  }
  void linear_residual_forward(const T* x, const T* w, const T* b, const T* residual, T* y, int n,
                               int in, int out) override {
    kc::linear_residual_forward<T>(ctx_, x, w, b, residual, y, n, in, out);
  }
  void linear_gelu_forward(const T* x, const T* w, const T* b, T* hidden, T* act, int n, int in,
                           int out) override {
    kc::linear_gelu_forward<T>(ctx_, x, w, b, hidden, act, n, in, out);
  }
  void linear_dgelu_backward(const T* dy, const T* w, const T* hidden, T* d_hidden, GradOut<T> db,
                             int n, int in, int out) override {
    kc::linear_dgelu_backward<T>(ctx_, dy, w, hidden, d_hidden, db, n, in, out);
  }
  void gate_logits(const T* x, const T* w, M* logits, int n, int in, int out) override {
    kc::gate_logits<T>(ctx_, x, w, logits, n, in, out);
  }
  void attention_forward(const T* qkv, T* out, T* probs, int batch, int seq, int heads, int h,
                         const kernels::DropoutKey& dropout) override {
    kc::attention_forward<T>(ctx_, qkv, out, probs, batch, seq, heads, h, dropout);
  }
  void attention_backward(const T* qkv, const T* probs, const T* d_out, T* d_qkv, int batch,
                          int seq, int heads, int h, const kernels::DropoutKey& dropout) override {
    kc::attention_backward<T>(ctx_, qkv, probs, d_out, d_qkv, batch, seq, heads, h, dropout);
  }
  // cuDNN's fused attention where it runs the shape (bf16, fp16), else the suite's own kernel:
  // the same choice for a shape in both directions, so the statistics match. Dropout on the
  // probabilities is never cuDNN's: its mask comes from its own generator (Philox, seeded per
  // call), which no other backend, layout or recompute could draw again, and handing it our
  // mask would take a [batch, heads, seq, seq] tensor, what fused attention is there to avoid.
  typename Ops<T>::FusedAttention fused_attention(int seq, int heads, int h,
                                                  bool dropout) override {
    const std::string why =
        dropout ? "dropout on the attention probabilities: cuDNN would draw its own mask, not the "
                  "suite's counter-based one"
                : cudnn_.unsupported(dtype_of<T>::value, seq, heads, h);
    if (why.empty()) return {"cudnn", true, ""};
    return {"flash", false, why};  // the materialised attention (cuBLAS) is faster than ours
  }
  void flash_attention_forward(const T* qkv, T* out, M* lse, int batch, int seq, int heads, int h,
                               const kernels::DropoutKey& dropout) override {
    if (!dropout.active() && use_cudnn(seq, heads, h))
      cudnn_.forward(dtype_of<T>::value, qkv, out, lse, batch, seq, heads, h);
    else
      kc::flash_attention_forward<T>(ctx_, qkv, out, lse, batch, seq, heads, h, dropout);
  }
  void flash_attention_backward(const T* qkv, const T* out, const M* lse, const T* d_out, T* d_qkv,
                                int batch, int seq, int heads, int h,
                                const kernels::DropoutKey& dropout) override {
    if (!dropout.active() && use_cudnn(seq, heads, h))
      cudnn_.backward(dtype_of<T>::value, qkv, out, lse, d_out, d_qkv, batch, seq, heads, h);
    else
      kc::flash_attention_backward<T>(ctx_, qkv, out, lse, d_out, d_qkv, batch, seq, heads, h,
                                      dropout);
  }
  double cross_entropy_loss(const T* logits, const std::int32_t* targets, M* log_sum, int n,
                            int vocab) override {
    return kc::cross_entropy_loss<T>(ctx_, logits, targets, log_sum, n, vocab);
  }
  void cross_entropy_backward(const T* logits, const std::int32_t* targets, const M* log_sum,
                              T* d_logits, int n, int vocab, M scale, int first_word,
                              int words) override {
    kc::cross_entropy_backward<T>(ctx_, logits, targets, log_sum, d_logits, n, vocab, scale,
                                  first_word, words);
  }
  void cross_entropy_max(const T* logits, M* row_max, int n, int cols, int words) override {
    kc::cross_entropy_max<T>(ctx_, logits, row_max, n, cols, words);
  }
  void cross_entropy_partials(const T* logits, const std::int32_t* targets, const M* row_max,
                              M* partials, int n, int cols, int first_word, int words) override {
    kc::cross_entropy_partials<T>(ctx_, logits, targets, row_max, partials, n, cols, first_word,
                                  words);
  }
  double cross_entropy_finish(const M* row_max, const M* partials, M* log_sum, int n) override {
    return kc::cross_entropy_finish(ctx_, row_max, partials, log_sum, n);
  }

  void route(const M* logits, int tokens, const routing::GateConfig& config,
             const routing::RoutingKey& key, routing::Routing<M>& out) override {
    kc::route(ctx_, logits, tokens, config, key, out);
  }
  void route_backward(const routing::Routing<M>& routing, const M* d_weight, M aux_scale,
                      T* d_logits) override {
    kc::route_backward<T>(ctx_, routing, d_weight, aux_scale, d_logits);
  }
  routing::RoutingStats routing_stats(const routing::Routing<M>& routing) override {
    return kc::routing_stats(ctx_, routing);
  }
  void dispatch(const T* x, const routing::Routing<M>& routing, T* buffer, int h,
                int capacity) override {
    kc::dispatch<T>(ctx_, x, routing, buffer, h, capacity);
  }
  void dispatch_backward(const T* d_buffer, const routing::Routing<M>& routing, T* dx, int h,
                         int capacity) override {
    kc::dispatch_backward<T>(ctx_, d_buffer, routing, dx, h, capacity);
  }
  void combine(const T* expert_out, const routing::Routing<M>& routing, T* y, int h,
               int capacity) override {
    kc::combine<T>(ctx_, expert_out, routing, y, h, capacity);
  }
  void combine_backward(const T* expert_out, const T* dy, const routing::Routing<M>& routing,
                        T* d_expert_out, M* d_weight, int h, int capacity) override {
    kc::combine_backward<T>(ctx_, expert_out, dy, routing, d_expert_out, d_weight, h, capacity);
  }
  // used_rows is not used: the experts' GEMMs are strided batches over every slot (leaving the
  // empty ones out would take a grouped GEMM), which the contract allows.
  void experts_forward(const T* in, const T* w1, const T* b1, const T* w2, T* hidden, T* act,
                       T* out, int sources, int experts, int rows, int h, int f,
                       const std::int32_t*) override {
    kc::experts_forward<T>(ctx_, in, w1, b1, w2, hidden, act, out, sources, experts, rows, h, f);
  }
  void experts_backward(const T* in, const T* w1, const T* w2, const T* hidden, const T* act,
                        const T* d_out, T* d_in, GradOut<T> dw1, GradOut<T> db1, GradOut<T> dw2,
                        GradOut<T> db2, int sources, int experts, int rows, int h, int f,
                        const std::int32_t*) override {
    kc::experts_backward<T>(ctx_, in, w1, w2, hidden, act, d_out, d_in, dw1, db1, dw2, db2, sources,
                            experts, rows, h, f);
  }

  void scale_copy(const void* g, DataType g_type, M* out, std::size_t count, M scale) override {
    with_typed(g, g_type, [&](auto* typed) {
      kc::scale_copy(ctx_, typed, out, count, scale);
      return 0;
    });
  }
  void adamw(M* value, M* m, M* v, const M* g, std::size_t count,
             const kernels::AdamHyper<M>& hyper) override {
    kc::adamw(ctx_, value, m, v, g, count, hyper);
  }
  double sum_squares(const void* data, DataType dtype, std::span<const IndexRange> ranges,
                     double initial) override {
    return with_typed(data, dtype, [&](auto* typed) {
      return kc::sum_squares(ctx_, typed, ranges.data(), ranges.size(), initial);
    });
  }
  bool has_non_finite(const void* data, DataType dtype, std::size_t count) override {
    return with_typed(data, dtype,
                      [&](auto* typed) { return kc::has_non_finite(ctx_, typed, count); });
  }

 private:
  bool use_cudnn(int seq, int heads, int h) {
    return cudnn_.unsupported(dtype_of<T>::value, seq, heads, h).empty();
  }

  kc::Context ctx_;
  kc::CudnnAttention cudnn_;
};

}  // namespace

template <typename T>
std::unique_ptr<Ops<T>> make_cuda_ops(Device& device) {
  return std::make_unique<CudaOps<T>>(device);
}

template std::unique_ptr<Ops<float>> make_cuda_ops<float>(Device&);
template std::unique_ptr<Ops<Half>> make_cuda_ops<Half>(Device&);
template std::unique_ptr<Ops<BFloat16>> make_cuda_ops<BFloat16>(Device&);

}  // namespace ted::cuda
