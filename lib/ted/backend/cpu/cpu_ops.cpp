#include "ted/backend/cpu/cpu_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "ted/backend/cpu/op_profile.hpp"
#include "ted/core/error.hpp"
#include "ted/core/parallel.hpp"
#include "ted/core/random.hpp"
#include "ted/device/tensor.hpp"
#include "ted/kernels/cpu/attention.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/kernels/cpu/flash_attention.hpp"
#include "ted/kernels/cpu/gating.hpp"
#include "ted/kernels/cpu/layernorm.hpp"
#include "ted/kernels/cpu/linear.hpp"
#include "ted/kernels/cpu/moe.hpp"
#include "ted/kernels/cpu/vocabulary.hpp"

namespace ted::cpu {
namespace {

namespace kc = ted::kernels::cpu;

// A read-only view of n elements of T in the compute type C = master_t<T>: the buffer itself
// when T is C, else a widened copy.
template <typename T>
class In {
 public:
  using C = master_t<T>;
  In(const T* data, std::size_t n) {
    if constexpr (std::is_same_v<T, C>) {
      data_ = data;
    } else if (data) {
      copy_.resize(n);
      for (std::size_t i = 0; i < n; ++i) copy_[i] = widen(data[i]);
      data_ = copy_.data();
    }
  }
  operator const C*() const { return data_; }

 private:
  const C* data_ = nullptr;
  std::vector<C> copy_;
};

// A writable view in the compute type, rounded into the buffer when it goes out of scope (the
// buffer itself when T is C). `load`: the kernel accumulates, so start from the buffer's values.
template <typename T>
class Out {
 public:
  using C = master_t<T>;
  Out(T* data, std::size_t n, bool load) : target_(data), n_(n) {
    if constexpr (std::is_same_v<T, C>) {
      data_ = data;
    } else if (data) {
      copy_.assign(n, C(0));
      if (load)
        for (std::size_t i = 0; i < n; ++i) copy_[i] = widen(data[i]);
      data_ = copy_.data();
    }
  }
  ~Out() {
    if constexpr (!std::is_same_v<T, C>)
      if (target_)
        for (std::size_t i = 0; i < n_; ++i) target_[i] = narrow<T>(copy_[i]);
  }
  Out(const Out&) = delete;
  Out& operator=(const Out&) = delete;
  operator C*() const { return data_; }

 private:
  T* target_;
  std::size_t n_;
  C* data_ = nullptr;
  std::vector<C> copy_;
};

// A kernel's master-type view of a parameter gradient (core/grad_out.hpp): the M buffer itself,
// or for a 16-bit gradient a zeroed M accumulator whose sum is added into it, rounded once, when
// the view goes out of scope: a 16-bit-output GEMM's fp32 accumulator, as this backend widens
// every 16-bit operand of a call (In, Out).
template <typename T>
class GradView {
 public:
  using C = master_t<T>;
  GradView(const GradOut<T>& g, std::size_t n) {
    if (g.master) {
      data_ = g.master;
    } else if (g.low) {
      if constexpr (std::is_same_v<T, C>) {
        data_ = g.low;
      } else {
        target_ = g.low;
        copy_.assign(n, C(0));
        data_ = copy_.data();
      }
    }
  }
  ~GradView() {
    if constexpr (!std::is_same_v<T, C>)
      if (target_)
        for (std::size_t i = 0; i < copy_.size(); ++i)
          target_[i] = narrow<T>(widen(target_[i]) + copy_[i]);
  }
  GradView(const GradView&) = delete;
  GradView& operator=(const GradView&) = delete;
  operator C*() const { return data_; }

 private:
  T* target_ = nullptr;
  C* data_ = nullptr;
  std::vector<C> copy_;
};

template <typename T>
std::size_t count_of(int a, int b) {
  return static_cast<std::size_t>(a) * static_cast<std::size_t>(b);
}

// Calls f with a typed pointer for a floating-point buffer.
template <typename F>
auto with_typed(const void* data, DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::f32:
      return f(static_cast<const float*>(data));
    case DataType::f64:
      return f(static_cast<const double*>(data));
    case DataType::f16:
      return f(static_cast<const Half*>(data));
    case DataType::bf16:
      return f(static_cast<const BFloat16*>(data));
    default:
      throw Error("reduction over " + std::string(to_string(dtype)) + ": not a floating type");
  }
}

bool floating(DataType dtype) {
  return dtype == DataType::f32 || dtype == DataType::f64 || dtype == DataType::f16 ||
         dtype == DataType::bf16;
}

template <typename T>
class CpuOps final : public Ops<T> {
 public:
  using M = master_t<T>;
  using C = M;  // the compute type
  explicit CpuOps(Device& device) : Ops<T>(device) {
    TED_CHECK(device.kind() == DeviceKind::cpu, "CPU kernels on " + device.name());
  }
  std::string name() const override { return "cpu"; }

  void add(const T* a, T* y, std::size_t count) override {
    TED_OP_TIMER(__func__);
    parallel_for(static_cast<std::int64_t>(count), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t i = first; i < last; ++i) y[i] = narrow<T>(widen(y[i]) + widen(a[i]));
    });
  }

  void add_bias(T* y, const T* bias, int rows, int width, int rows_per_bias, int biases) override {
    TED_OP_TIMER(__func__);
    for (int r = 0; r < rows; ++r) {
      const T* b = bias + static_cast<std::size_t>((r / rows_per_bias) % biases) * width;
      T* row = y + static_cast<std::size_t>(r) * width;
      for (int j = 0; j < width; ++j) row[j] = narrow<T>(widen(row[j]) + widen(b[j]));
    }
  }

  void add_bias_residual(T* y, const T* bias, const T* residual, int rows, int width) override {
    TED_OP_TIMER(__func__);
    In<T> b(bias, width), r(residual, count_of<T>(rows, width));
    Out<T> yc(y, count_of<T>(rows, width), true);
    kc::add_bias_residual<C>(yc, b, r, rows, width);
  }

  // Through double: exact for every pair the model converts (fp32 <-> fp64, and 16-bit <-> fp32,
  // whose round trip through double is exact), with the shared rounding of core/dtype.hpp.
  // Between floating types the types are looked at once, not per element (the optimizer
  // converts whole shards every step): the same values as store_from_double(load_as_double).
  void convert(const void* src, DataType src_type, void* dst, DataType dst_type,
               std::size_t count) override {
    TED_OP_TIMER(__func__);
    if (src == dst && src_type == dst_type) return;
    if (floating(src_type) && floating(dst_type)) {
      with_typed(src, src_type, [&](auto* from) {
        return with_typed(dst, dst_type, [&](auto* to_const) {
          using D = std::remove_const_t<std::remove_pointer_t<decltype(to_const)>>;
          D* to = const_cast<D*>(to_const);
          for (std::size_t i = 0; i < count; ++i)
            to[i] = narrow<D>(static_cast<master_t<D>>(static_cast<double>(widen(from[i]))));
          return 0;
        });
      });
      return;
    }
    for (std::size_t i = 0; i < count; ++i)
      store_from_double(dst, dst_type, i, load_as_double(src, src_type, i));
  }

  void init_normal(T* dst, std::size_t count, std::uint64_t seed, std::uint64_t key, double std,
                   const model::SliceMap& map) override {
    TED_OP_TIMER(__func__);
    // Each element is a function of its global index alone, so the split changes nothing.
    parallel_for(static_cast<std::int64_t>(count), [&](std::int64_t first, std::int64_t last) {
      for (auto i = static_cast<std::size_t>(first); i < static_cast<std::size_t>(last); ++i)
        dst[i] = narrow<T>(static_cast<M>(
            std * random::normal(seed, random::kInit, key, model::global_index(map, i))));
    });
  }

  void dropout(const T* x, T* y, int rows, int width, const kernels::DropoutKey& key) override {
    TED_OP_TIMER(__func__);
    const std::size_t count = count_of<T>(rows, width);
    In<T> xc(x, count);
    Out<T> yc(y, count, false);
    kc::dropout<C>(xc, yc, rows, width, key);
  }

  void bias_dropout_residual(T* y, const T* bias, const T* residual, int rows, int width,
                             const kernels::DropoutKey& key) override {
    TED_OP_TIMER(__func__);
    In<T> b(bias, width), r(residual, count_of<T>(rows, width));
    Out<T> yc(y, count_of<T>(rows, width), true);
    kc::bias_dropout_residual<C>(yc, b, r, rows, width, key);
  }

  void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x, int n,
                         int seq, int h, int first_word, int words) override {
    TED_OP_TIMER(__func__);
    kc::embedding_forward<T>(tokens, tok, pos, x, n, seq, h, first_word, words);
  }

  void embedding_backward(const std::int32_t* tokens, const T* dx, GradOut<T> dtok, GradOut<T> dpos,
                          int n, int seq, int h, int first_word, int words) override {
    TED_OP_TIMER(__func__);
    kc::embedding_backward<T>(tokens, dx, dtok, dpos, n, seq, h, first_word, words);
  }

  void lm_head_forward(const T* x, const T* table, T* logits, int n, int h, int rows) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, h)), tc(table, count_of<T>(rows, h));
    Out<T> lc(logits, count_of<T>(n, rows), false);
    kc::lm_head_forward<C>(xc, tc, lc, n, h, rows);
  }

  void lm_head_backward(const T* x, const T* table, const T* d_logits, T* dx, GradOut<T> d_table,
                        int n, int h, int rows) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, h)), tc(table, count_of<T>(rows, h)),
        dl(d_logits, count_of<T>(n, rows));
    Out<T> dxc(dx, count_of<T>(n, h), true);
    GradView<T> dt(d_table, count_of<T>(rows, h));
    kc::lm_head_backward<C>(xc, tc, dl, dxc, dt, n, h, rows);
  }

  void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, M* mean, M* rstd, int n,
                         int h) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, h)), g(gamma, h), b(beta, h);
    Out<T> yc(y, count_of<T>(n, h), false);
    kc::layernorm_forward<C>(xc, g, b, yc, mean, rstd, n, h);
  }

  void layernorm_backward(const T* x, const T* gamma, const M* mean, const M* rstd, const T* dy,
                          T* dx, GradOut<T> dgamma, GradOut<T> dbeta, int n, int h) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, h)), g(gamma, h), dyc(dy, count_of<T>(n, h));
    Out<T> dxc(dx, count_of<T>(n, h), true);
    GradView<T> dg(dgamma, static_cast<std::size_t>(h)), db(dbeta, static_cast<std::size_t>(h));
    kc::layernorm_backward<C>(xc, g, mean, rstd, dyc, dxc, dg, db, n, h);
  }

  void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, in)), wc(w, count_of<T>(in, out)), bc(b, out);
    Out<T> yc(y, count_of<T>(n, out), false);
    kc::linear_forward<C>(xc, wc, bc, yc, n, in, out);
  }

  void linear_backward(const T* x, const T* w, const T* dy, T* dx, GradOut<T> dw, GradOut<T> db,
                       int n, int in, int out) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, in)), wc(w, count_of<T>(in, out)), dyc(dy, count_of<T>(n, out));
    Out<T> dxc(dx, count_of<T>(n, in), true);
    GradView<T> dwc(dw, count_of<T>(in, out)), dbc(db, static_cast<std::size_t>(out));
    kc::linear_backward<C>(xc, wc, dyc, dxc, dwc, dbc, n, in, out);
  }

  // The fused dense-layer ops, as their parts: the same arithmetic, bit for bit, as the model's
  // unfused calls.
  void linear_residual_forward(const T* x, const T* w, const T* b, const T* residual, T* y, int n,
                               int in, int out) override {
    linear_forward(x, w, nullptr, y, n, in, out);
    if (b) {
      add_bias_residual(y, b, residual, n, out);
    } else {
      add(residual, y, count_of<T>(n, out));
    }
  }

  void linear_gelu_forward(const T* x, const T* w, const T* b, T* hidden, T* act, int n, int in,
                           int out) override {
    linear_forward(x, w, nullptr, hidden, n, in, out);
    bias_gelu_forward(hidden, b, act, n, out);
  }

  void linear_dgelu_backward(const T* dy, const T* w, const T* hidden, T* d_hidden, GradOut<T> db,
                             int n, int in, int out) override {
    {
      TED_OP_TIMER(__func__);
      In<T> wc(w, count_of<T>(in, out)), dyc(dy, count_of<T>(n, out));
      Out<T> dx(d_hidden, count_of<T>(n, in), false);
      if (n > 0) kc::gemm(false, true, n, in, out, C(1), dyc, out, wc, out, C(0), dx, in);
    }
    gelu_bias_backward(hidden, d_hidden, db, n, in);
  }

  void gate_logits(const T* x, const T* w, M* logits, int n, int in, int out) override {
    TED_OP_TIMER(__func__);
    In<T> xc(x, count_of<T>(n, in)), wc(w, count_of<T>(in, out));
    // One BLAS call, never cut by the pool: every tensor rank computes these logits and must
    // make the same choices, so they may not depend on a rank's thread count.
    if (n > 0) kc::gemm_here(false, false, n, out, in, C(1), xc, in, wc, out, C(0), logits, out);
  }

  // The FFN's first layer after its GEMM (linear_gelu_forward), one pass: hidden [rows, width]
  // += bias, then act = gelu(hidden), computed in M (act from the unrounded sum).
  void bias_gelu_forward(T* hidden, const T* bias, T* act, int rows, int width) {
    TED_OP_TIMER(__func__);
    In<T> b(bias, width);
    Out<T> hid(hidden, count_of<T>(rows, width), true), a(act, count_of<T>(rows, width), false);
    kc::bias_gelu_forward<C>(hid, b, a, rows, width);
  }

  // d = d * gelu'(hidden) in place, and db += d's column sums (db may be null): the rest of
  // linear_dgelu_backward.
  void gelu_bias_backward(const T* hidden, T* d, GradOut<T> db_out, int rows, int width) {
    TED_OP_TIMER(__func__);
    In<T> hid(hidden, count_of<T>(rows, width));
    GradView<T> db(db_out, static_cast<std::size_t>(width));
    if constexpr (std::is_same_v<T, C>) {
      kc::gelu_bias_backward<C>(hid, d, db, rows, width);
    } else {  // the bias gradient sums the rounded d, as a separate bias pass would
      {
        Out<T> dc(d, count_of<T>(rows, width), true);
        kc::gelu_bias_backward<C>(hid, dc, nullptr, rows, width);
      }
      In<T> dc(d, count_of<T>(rows, width));
      if (db_out) kc::add_column_sums<C>(dc, db, rows, width);
    }
  }

  void attention_forward(const T* qkv, T* out, T* probs, int batch, int seq, int heads, int h,
                         const kernels::DropoutKey& dropout) override {
    TED_OP_TIMER(__func__);
    const std::size_t rows = count_of<T>(batch, seq);
    In<T> q(qkv, rows * 3 * h);
    Out<T> o(out, rows * h, false), p(probs, rows * heads * seq, false);
    kc::attention_forward<C>(q, o, p, batch, seq, heads, h, dropout);
  }

  void attention_backward(const T* qkv, const T* probs, const T* d_out, T* d_qkv, int batch,
                          int seq, int heads, int h, const kernels::DropoutKey& dropout) override {
    TED_OP_TIMER(__func__);
    const std::size_t rows = count_of<T>(batch, seq);
    In<T> q(qkv, rows * 3 * h), p(probs, rows * heads * seq), d(d_out, rows * h);
    Out<T> dq(d_qkv, rows * 3 * h, false);
    kc::attention_backward<C>(q, p, d, dq, batch, seq, heads, h, dropout);
  }

  void flash_attention_forward(const T* qkv, T* out, M* lse, int batch, int seq, int heads, int h,
                               const kernels::DropoutKey& dropout) override {
    TED_OP_TIMER(__func__);
    const std::size_t rows = count_of<T>(batch, seq);
    In<T> q(qkv, rows * 3 * h);
    Out<T> o(out, rows * h, false);
    kc::flash_attention_forward<C>(q, o, lse, batch, seq, heads, h, dropout);
  }

  void flash_attention_backward(const T* qkv, const T* out, const M* lse, const T* d_out, T* d_qkv,
                                int batch, int seq, int heads, int h,
                                const kernels::DropoutKey& dropout) override {
    TED_OP_TIMER(__func__);
    const std::size_t rows = count_of<T>(batch, seq);
    In<T> q(qkv, rows * 3 * h), o(out, rows * h), d(d_out, rows * h);
    Out<T> dq(d_qkv, rows * 3 * h, false);
    kc::flash_attention_backward<C>(q, o, lse, d, dq, batch, seq, heads, h, dropout);
  }

  typename Ops<T>::FusedAttention fused_attention(int, int, int, bool) override {
    return {"flash", true, ""};
  }

  double cross_entropy_loss(const T* logits, const std::int32_t* targets, M* log_sum, int n,
                            int vocab) override {
    TED_OP_TIMER(__func__);
    In<T> l(logits, count_of<T>(n, vocab));
    return static_cast<double>(kc::cross_entropy_loss<C>(l, targets, log_sum, n, vocab));
  }

  void cross_entropy_backward(const T* logits, const std::int32_t* targets, const M* log_sum,
                              T* d_logits, int n, int vocab, M scale, int first_word,
                              int words) override {
    TED_OP_TIMER(__func__);
    In<T> l(logits, count_of<T>(n, vocab));  // copied first for 16-bit, so aliasing is fine
    Out<T> d(d_logits, count_of<T>(n, vocab), false);
    kc::cross_entropy_backward<C>(l, targets, log_sum, d, n, vocab, scale, first_word, words);
  }

  void cross_entropy_max(const T* logits, M* row_max, int n, int cols, int words) override {
    TED_OP_TIMER(__func__);
    In<T> l(logits, count_of<T>(n, cols));
    kc::cross_entropy_max<C>(l, row_max, n, cols, words);
  }

  void cross_entropy_partials(const T* logits, const std::int32_t* targets, const M* row_max,
                              M* partials, int n, int cols, int first_word, int words) override {
    TED_OP_TIMER(__func__);
    In<T> l(logits, count_of<T>(n, cols));
    kc::cross_entropy_partials<C>(l, targets, row_max, partials, n, cols, first_word, words);
  }

  double cross_entropy_finish(const M* row_max, const M* partials, M* log_sum, int n) override {
    TED_OP_TIMER(__func__);
    return static_cast<double>(kc::cross_entropy_finish<C>(row_max, partials, log_sum, n));
  }

  void route(const M* logits, int tokens, const routing::GateConfig& config,
             const routing::RoutingKey& key, routing::Routing<M>& r) override {
    TED_OP_TIMER(__func__);
    Device& device = this->device();
    const std::size_t choices = count_of<T>(tokens, config.top_k);
    r.tokens = tokens;
    r.experts = config.experts;
    r.top_k = config.top_k;
    r.probs = Tensor<M>(device, count_of<T>(tokens, config.experts));
    r.expert = Tensor<std::int32_t>(device, choices);
    r.slot = Tensor<std::int32_t>(device, choices);
    r.gate_value = Tensor<M>(device, choices);
    r.weight = Tensor<M>(device, choices);
    r.first_count = Tensor<std::int32_t>(device, static_cast<std::size_t>(config.experts));
    r.aux = Tensor<M>(device, 1);
    r.kept.assign(experts_run_every_slot() ? 0 : static_cast<std::size_t>(config.experts), 0);
    r.capacity = kc::route<M>(
        logits, tokens, config, key,
        {r.probs.data(), r.expert.data(), r.slot.data(), r.gate_value.data(), r.weight.data(),
         r.first_count.data(), r.aux.data(), r.kept.empty() ? nullptr : r.kept.data()});
  }

  void route_backward(const routing::Routing<M>& r, const M* d_weight, M aux_scale,
                      T* d_logits) override {
    TED_OP_TIMER(__func__);
    Out<T> d(d_logits, count_of<T>(r.tokens, r.experts), false);
    kc::route_backward<M>(arrays(r), r.tokens, r.experts, r.top_k, d_weight, aux_scale, d);
  }

  routing::RoutingStats routing_stats(const routing::Routing<M>& r) override {
    TED_OP_TIMER(__func__);
    routing::RoutingStats stats;
    stats.aux = static_cast<double>(r.aux.data()[0]);
    const std::int32_t* slot = r.slot.data();
    stats.dropped = static_cast<int>(std::count(slot, slot + r.slot.size(), -1));
    stats.load.assign(static_cast<std::size_t>(r.experts), 0);
    const std::int32_t* expert = r.expert.data();
    for (std::size_t c = 0; c < r.expert.size(); ++c)
      if (expert[c] >= 0) ++stats.load[static_cast<std::size_t>(expert[c])];
    return stats;
  }

  void dispatch(const T* x, const routing::Routing<M>& r, T* buffer, int h, int capacity) override {
    TED_OP_TIMER(__func__);
    kc::dispatch<T>(x, arrays(r), r.tokens, r.experts, r.top_k, buffer, h, capacity);
  }

  void dispatch_backward(const T* d_buffer, const routing::Routing<M>& r, T* dx, int h,
                         int capacity) override {
    TED_OP_TIMER(__func__);
    kc::dispatch_backward<T>(d_buffer, arrays(r), r.tokens, r.top_k, dx, h, capacity);
  }

  void combine(const T* expert_out, const routing::Routing<M>& r, T* y, int h,
               int capacity) override {
    TED_OP_TIMER(__func__);
    kc::combine<T>(expert_out, arrays(r), r.tokens, r.top_k, y, h, capacity);
  }

  void combine_backward(const T* expert_out, const T* dy, const routing::Routing<M>& r,
                        T* d_expert_out, M* d_weight, int h, int capacity) override {
    TED_OP_TIMER(__func__);
    kc::combine_backward<T>(expert_out, dy, arrays(r), r.tokens, r.experts, r.top_k, d_expert_out,
                            d_weight, h, capacity);
  }

  void experts_forward(const T* in, const T* w1, const T* b1, const T* w2, T* hidden, T* act,
                       T* out, int sources, int experts, int rows, int h, int f,
                       const std::int32_t* used_rows) override {
    TED_OP_TIMER(__func__);
    const std::size_t blocks = count_of<T>(sources, experts);
    const std::size_t R = static_cast<std::size_t>(rows);
    In<T> x(in, blocks * R * h), w1c(w1, count_of<T>(experts, h) * f),
        b1c(b1, count_of<T>(experts, f)), w2c(w2, count_of<T>(experts, f) * h);
    Out<T> hid(hidden, blocks * R * f, false), a(act, blocks * R * f, false),
        o(out, blocks * R * h, false);
    kc::experts_forward<C>(x, w1c, b1c, w2c, hid, a, o, sources, experts, rows, h, f, used_rows);
  }

  void experts_backward(const T* in, const T* w1, const T* w2, const T* hidden, const T* act,
                        const T* d_out, T* d_in, GradOut<T> dw1, GradOut<T> db1, GradOut<T> dw2,
                        GradOut<T> db2, int sources, int experts, int rows, int h, int f,
                        const std::int32_t* used_rows) override {
    TED_OP_TIMER(__func__);
    const std::size_t blocks = count_of<T>(sources, experts);
    const std::size_t R = static_cast<std::size_t>(rows);
    In<T> x(in, blocks * R * h), w1c(w1, count_of<T>(experts, h) * f),
        w2c(w2, count_of<T>(experts, f) * h), hid(hidden, blocks * R * f), a(act, blocks * R * f),
        dout(d_out, blocks * R * h);
    Out<T> dx(d_in, blocks * R * h, false);
    // The hidden layer's gradient, on the device (so the allocator sees it).
    Tensor<C> d_hidden(this->device(), blocks * R * f);
    const std::size_t E = static_cast<std::size_t>(experts);
    GradView<T> dw1c(dw1, count_of<T>(experts, h) * f), db1c(db1, E * f),
        dw2c(dw2, count_of<T>(experts, f) * h), db2c(db2, E * h);
    kc::experts_backward<C>(x, w1c, w2c, hid, a, dout, dx, d_hidden.data(), dw1c, db1c, dw2c, db2c,
                            sources, experts, rows, h, f, used_rows);
  }

  void scale_copy(const void* g, DataType g_type, M* out, std::size_t count, M scale) override {
    TED_OP_TIMER(__func__);
    with_typed(g, g_type, [&](auto* typed) {
      for (std::size_t k = 0; k < count; ++k) out[k] = static_cast<M>(widen(typed[k])) * scale;
      return 0;
    });
  }

  void adamw(M* value, M* m, M* v, const M* g, std::size_t count,
             const kernels::AdamHyper<M>& hyper) override {
    TED_OP_TIMER(__func__);
    for (std::size_t k = 0; k < count; ++k)
      kernels::adamw_update(value[k], m[k], v[k], g[k], hyper);
  }

  double sum_squares(const void* data, DataType dtype, std::span<const IndexRange> ranges,
                     double initial) override {
    TED_OP_TIMER(__func__);
    return with_typed(data, dtype, [&](auto* typed) {
      double sum = initial;
      for (const auto& range : ranges)
        for (std::size_t k = range.begin; k < range.end; ++k) {
          const double value = static_cast<double>(widen(typed[k]));
          sum += value * value;
        }
      return sum;
    });
  }

  bool has_non_finite(const void* data, DataType dtype, std::size_t count) override {
    TED_OP_TIMER(__func__);
    return with_typed(data, dtype, [&](auto* typed) {
      for (std::size_t k = 0; k < count; ++k)
        if (!std::isfinite(static_cast<double>(widen(typed[k])))) return true;
      return false;
    });
  }

 private:
  // A routing's arrays, as the kernels of kernels/cpu read them.
  static kc::RoutingArrays<const M> arrays(const routing::Routing<M>& r) {
    return {r.probs.data(),  r.expert.data(),      r.slot.data(), r.gate_value.data(),
            r.weight.data(), r.first_count.data(), r.aux.data()};
  }
};

}  // namespace

// The routing does not report its kept slots when every slot is to run. The switch must be the
// same on every rank, as the expert group exchanges the counts.
bool experts_run_every_slot() {
  const char* text = std::getenv("TED_FULL_CAPACITY");
  return text && *text && !(text[0] == '0' && text[1] == '\0');
}

template <typename T>
std::unique_ptr<Ops<T>> make_cpu_ops(Device& device) {
  return std::make_unique<CpuOps<T>>(device);
}

template std::unique_ptr<Ops<float>> make_cpu_ops<float>(Device&);
template std::unique_ptr<Ops<double>> make_cpu_ops<double>(Device&);
template std::unique_ptr<Ops<Half>> make_cpu_ops<Half>(Device&);
template std::unique_ptr<Ops<BFloat16>> make_cpu_ops<BFloat16>(Device&);

}  // namespace ted::cpu
