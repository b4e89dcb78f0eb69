#include "ted/model/gpt.hpp"

#include <algorithm>
#include <string>

#include "ted/backend/memory.hpp"
#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/model/gpt_params.hpp"

namespace ted::model {

void check_token_ids(const std::int32_t* tokens, const std::int32_t* targets, int count,
                     int vocab) {
  for (int i = 0; i < count; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab || targets[i] < 0 || targets[i] >= vocab)
      throw Error("forward: token id outside the vocabulary of " + std::to_string(vocab));
}

void check_layout(const ModelConfig& config, int tensor, int expert,
                  const ExchangeSwitches& exchange, bool cac, bool cac_all_reduce) {
  const int f = config.ffn(), E = config.gate.experts;
  if (E % expert != 0)
    throw ConfigError("model.experts (" + std::to_string(E) + ") must be divisible by Ep (" +
                      std::to_string(expert) + ")");
  if (config.heads % tensor != 0)
    throw ConfigError("model.heads (" + std::to_string(config.heads) +
                      ") must be divisible by T (" + std::to_string(tensor) + ")");
  if (f % tensor != 0)
    throw ConfigError("the FFN width model.ffn_mult * model.hidden (" + std::to_string(f) +
                      ") must be divisible by T (" + std::to_string(tensor) + ")");
  check_exchange_switches(exchange);
  if (cac_all_reduce && !cac)
    throw ConfigError("cac_all_reduce extends cac: turn cac (and checkpointing) on with it");
  if (cac && !config.checkpoint)
    throw ConfigError("cac (communication-aware checkpointing) needs model.checkpoint=true");
}

template <typename T>
GptModel<T>::GptModel(const ModelConfig& config, Device& device, const ModelParallel& parallel)
    : config_(config), device_(device), ops_(make_ops<T>(device)), parallel_(parallel) {
  config_.validate();
  dropout_ = config_.dropout;
  ExchangeSetup& x = parallel_.exchange;
  if (x.tensor) T_ = x.tensor->size(), t_ = x.tensor->rank();
  if (x.expert) Ep_ = x.expert->size(), e_ = x.expert->rank();
  if (T_ == 1) x.tensor = nullptr;  // a group of one: nothing to communicate
  if (Ep_ == 1) x.expert = x.expert_control = nullptr;
  check_layout(config_, T_, Ep_, x.switches, parallel_.cac, parallel_.cac_all_reduce);
  // 16-bit gradients are the weights' own type (the kernels round once into it).
  gradient_type(dtype_of<T>::value, config_.grad_dtype);  // ConfigError unless it can be
  resolve_attention();

  // Every tensor's spec for this rank (gpt_params.hpp), in id order; the ids by name.
  const GptParamSpecs specs = gpt_param_specs(config_, {T_, t_, Ep_, e_, x.switches.split_experts});
  for (const ParamSpec& spec : specs.specs) params_.add(spec);
  tok_emb_ = specs.id("tok_emb");
  pos_emb_ = specs.id("pos_emb");
  // Tied embeddings: this rank's slice of the vocabulary (gpt_params.cpp), the LM head's columns.
  tied_ = config_.tie_embeddings;
  vocab_rows_ = config_.vocab_rows(T_);
  first_word_ = tied_ ? t_ * vocab_rows_ : 0;
  words_ = std::clamp(config_.vocab - first_word_, 0, vocab_rows_);
  for (int l = 0; l < config_.layers; ++l) {
    auto id = [&](const std::string& name) {
      return specs.id("block" + std::to_string(l) + "." + name);
    };
    BlockIds ids{};
    ids.ln1_g = id("ln1.g");
    ids.ln1_b = id("ln1.b");
    ids.qkv_w = id("attn.qkv.w");
    ids.qkv_b = id("attn.qkv.b");
    ids.proj_w = id("attn.proj.w");
    ids.proj_b = id("attn.proj.b");
    ids.ln2_g = id("ln2.g");
    ids.ln2_b = id("ln2.b");
    ids.moe = config_.is_moe(l);
    if (ids.moe) {
      ids.gate_w = id("moe.gate.w");
      ids.e_w1 = id("moe.w1");
      ids.e_b1 = id("moe.b1");
      ids.e_w2 = id("moe.w2");
      ids.e_b2 = id("moe.b2");
    } else {
      ids.fc1_w = id("ffn.fc1.w");
      ids.fc1_b = id("ffn.fc1.b");
      ids.fc2_w = id("ffn.fc2.w");
      ids.fc2_b = id("ffn.fc2.b");
    }
    blocks_.push_back(ids);
  }
  lnf_g_ = specs.id("lnf.g");
  lnf_b_ = specs.id("lnf.b");
  if (!tied_) lm_head_ = specs.id("lm_head.w");
  params_.allocate(*ops_, config_.seed, config_.init_std, parallel_.dense_pad, parallel_.expert_pad,
                   config_.grad_dtype);
}

// model.attention on this backend: fused or materialized as asked; auto takes the backend's
// fastest for this rank's heads, or the fused one where the [seq, seq] scores of a micro-batch of
// one sequence would not fit one tensor.
template <typename T>
void GptModel<T>::resolve_attention() {
  const int heads = config_.heads / T_, hl = config_.hidden / T_, S = config_.seq_len;
  const auto fused = ops_->fused_attention(S, heads, hl, config_.dropout > 0);
  fused_attention_ = config_.attention == AttentionKind::fused ||
                     (config_.attention == AttentionKind::automatic &&
                      (fused.fastest || double(heads) * S * S > kMaxTensorElements));
  attention_ = fused_attention_ ? fused.kernel : "materialized";
}

template <typename T>
kernels::DropoutKey GptModel<T>::dropout_key(int layer, std::int64_t site) const {
  kernels::DropoutKey key;
  key.p = dropout_;
  key.seed = config_.seed;
  key.step = batch_.step;
  key.site = layer * kernels::kDropoutSites + site;
  key.first_token = batch_.first_sample * config_.seq_len;
  key.first_head = t_ * (config_.heads / T_);  // heads are global: every T draws the same
  return key;
}

template <typename T>
MoeParams<T> GptModel<T>::moe_params(const BlockIds& ids) const {
  return {params_.value(ids.gate_w), params_.value(ids.e_w1), params_.value(ids.e_b1),
          params_.value(ids.e_w2), params_.value(ids.e_b2)};
}

template <typename T>
ExchangeSetup GptModel<T>::exchange_setup(bool recompute) const {
  ExchangeSetup x = parallel_.exchange;
  x.keep_stash = parallel_.cac && !recompute;
  x.reuse_stash = parallel_.cac && recompute;
  x.stash_reduction = parallel_.cac_all_reduce && T_ > 1;  // nothing to reduce on one rank
  return x;
}

template <typename T>
void GptModel<T>::tensor_all_reduce(T* data, std::size_t count) {
  if (T_ > 1) parallel_.exchange.tensor->all_reduce(data, data, count, dtype_of<T>::value);
}

template <typename T>
template <typename Partial>
void GptModel<T>::reduced_output(T* out, std::size_t count, Tensor<T>& stash, bool recompute,
                                 Partial&& partial) {
  const bool stashing = parallel_.cac_all_reduce && T_ > 1;
  if (stashing && recompute) {
    TED_CHECK(stash.size() == count, "CAC recompute without the all-reduce stash");
    device_.copy(out, stash.data(), count * sizeof(T));
    return;
  }
  partial(out);
  tensor_all_reduce(out, count);
  if (stashing) {
    MemoryScope scope(device_, MemoryCategory::cac_stash);
    stash = Tensor<T>(device_, count);
    device_.copy(stash.data(), out, count * sizeof(T));
  }
}

template <typename T>
typename GptModel<T>::Dims GptModel<T>::dims() const {
  Dims d;
  d.N = tokens_;
  d.h = config_.hidden;
  d.S = config_.seq_len;
  d.B = batch_.sequences;
  d.hl = d.h / T_;
  d.Hl = config_.heads / T_;
  d.fl = config_.ffn() / T_;
  d.Nh = static_cast<std::size_t>(d.N) * d.h;
  return d;
}

template <typename T>
MoeShape GptModel<T>::moe_shape() const {
  return {group_sequences_ * config_.seq_len, config_.hidden, config_.ffn(), config_.gate.experts};
}

// A row-parallel layer's output (proj, fc2): out = residual + dropout(in W + b), in [N, k], the
// partial products summed over the tensor group before the (replicated) bias. One fused op (the
// GEMM, its bias and the skip) where nothing comes between them.
template <typename T>
void GptModel<T>::row_parallel_output(const T* in, int w, int b, const T* residual, T* out, int k,
                                      Tensor<T>& stash, bool recompute,
                                      const kernels::DropoutKey& key) {
  const Dims d = dims();
  Ops<T>& ops = *ops_;
  if (T_ == 1 && !key.active()) {
    ops.linear_residual_forward(in, params_.value(w), params_.value(b), residual, out, d.N, k, d.h);
    return;
  }
  reduced_output(out, d.Nh, stash, recompute, [&](T* partial) {
    ops.linear_forward(in, params_.value(w), nullptr, partial, d.N, k, d.h);
  });
  if (key.active())
    ops.bias_dropout_residual(out, params_.value(b), residual, d.N, d.h, key);
  else
    ops.add_bias_residual(out, params_.value(b), residual, d.N, d.h);
}

// Megatron tensor parallelism: qkv and fc1 column-parallel (this rank's heads, its f/T), proj
// and fc2 row-parallel; their partial outputs are all-reduced in the tensor group before the
// (replicated) bias is added. Dropout redraws its masks from their keys, so the recompute of a
// checkpointed block drops what its forward dropped.
template <typename T>
void GptModel<T>::block_forward(int layer, const T* x, T* out, BlockActs& a, bool recompute) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  double flops = attention_forward(layer, x, a, recompute);  // a.mid = x + attention
  a.ln2 = Tensor<T>(device_, d.Nh);
  a.ln2_mean = Tensor<M>(device_, d.N);
  a.ln2_rstd = Tensor<M>(device_, d.N);
  ops_->layernorm_forward(a.mid.data(), params_.value(ids.ln2_g), params_.value(ids.ln2_b),
                          a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), d.N, d.h);
  if (ids.moe)
    moe_block_forward(layer, out, a, recompute, flops);
  else
    flops += dense_ffn_forward(layer, out, a, recompute);
  last_forward_flops_ += flops;
}

// LayerNorm, qkv, attention, proj with its dropout and the skip: a.mid. Returns the GEMM FLOPs;
// attention counts the whole S x S square with either variant (the projection's convention),
// though the fused one skips the masked tiles.
template <typename T>
double GptModel<T>::attention_forward(int layer, const T* x, BlockActs& a, bool recompute) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  auto& P = params_;
  Ops<T>& ops = *ops_;
  a.ln1 = Tensor<T>(device_, d.Nh);
  a.ln1_mean = Tensor<M>(device_, d.N);
  a.ln1_rstd = Tensor<M>(device_, d.N);
  ops.layernorm_forward(x, P.value(ids.ln1_g), P.value(ids.ln1_b), a.ln1.data(), a.ln1_mean.data(),
                        a.ln1_rstd.data(), d.N, d.h);
  a.qkv = Tensor<T>(device_, static_cast<std::size_t>(d.N) * 3 * d.hl);
  ops.linear_forward(a.ln1.data(), P.value(ids.qkv_w), P.value(ids.qkv_b), a.qkv.data(), d.N, d.h,
                     3 * d.hl);
  const kernels::DropoutKey probs_key = dropout_key(layer, kernels::kAttentionProbsDropout);
  if (fused_attention_) {
    a.lse = Tensor<M>(device_, static_cast<std::size_t>(d.B) * d.Hl * d.S);
    a.att = Tensor<T>(device_, static_cast<std::size_t>(d.N) * d.hl);
    ops.flash_attention_forward(a.qkv.data(), a.att.data(), a.lse.data(), d.B, d.S, d.Hl, d.hl,
                                probs_key);
  } else {
    a.probs = Tensor<T>(device_, static_cast<std::size_t>(d.B) * d.Hl * d.S * d.S);
    a.att = Tensor<T>(device_, static_cast<std::size_t>(d.N) * d.hl);
    ops.attention_forward(a.qkv.data(), a.att.data(), a.probs.data(), d.B, d.S, d.Hl, d.hl,
                          probs_key);
  }
  a.mid = Tensor<T>(device_, d.Nh);
  row_parallel_output(a.att.data(), ids.proj_w, ids.proj_b, x, a.mid.data(), d.hl, a.proj_stash,
                      recompute, dropout_key(layer, kernels::kAttentionOutputDropout));
  return 2.0 * d.N * d.h * 3 * d.hl + 2.0 * d.N * d.hl * d.h +
         4.0 * d.B * d.Hl * d.S * d.S * (d.hl / d.Hl);
}

// fc1 with GeLU, fc2 with its dropout and the skip from a.mid. Returns the GEMM FLOPs.
template <typename T>
double GptModel<T>::dense_ffn_forward(int layer, T* out, BlockActs& a, bool recompute) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  a.fc1 = Tensor<T>(device_, static_cast<std::size_t>(d.N) * d.fl);
  a.act = Tensor<T>(device_, static_cast<std::size_t>(d.N) * d.fl);
  ops_->linear_gelu_forward(a.ln2.data(), params_.value(ids.fc1_w), params_.value(ids.fc1_b),
                            a.fc1.data(), a.act.data(), d.N, d.h, d.fl);
  row_parallel_output(a.act.data(), ids.fc2_w, ids.fc2_b, a.mid.data(), out, d.fl, a.ffn_stash,
                      recompute, dropout_key(layer, kernels::kFfnOutputDropout));
  return 4.0 * d.N * d.h * d.fl;
}

// The MoE layer on each gating group of a.ln2 (its routing, statistics and exchange: moe.hpp),
// then its dropout and the skip from a.mid; adds its GEMM FLOPs to `flops` (unsplit experts
// compute on their tensor rank's capacity slice only).
template <typename T>
void GptModel<T>::moe_block_forward(int layer, T* out, BlockActs& a, bool recompute,
                                    double& flops) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  const MoeShape shape = moe_shape();
  const int groups = d.B / group_sequences_;
  const ExchangeSetup exchange = exchange_setup(recompute);
  a.moe.resize(groups);
  a.aux = 0;
  a.dropped = 0;
  if (!recompute) a.load.assign(static_cast<std::size_t>(config_.gate.experts), 0);
  for (int g = 0; g < groups; ++g) {
    routing::RoutingKey key{
        config_.seed, batch_.step, layer,
        (batch_.first_sample + static_cast<std::int64_t>(g) * group_sequences_) * d.S};
    const std::size_t offset = static_cast<std::size_t>(g) * shape.tokens * d.h;
    const routing::RoutingStats stats =
        moe_forward<T>(*ops_, a.ln2.data() + offset, out + offset, shape, config_.gate, key,
                       moe_params(ids), exchange, a.moe[g], !recompute);
    a.aux += static_cast<M>(stats.aux);
    a.dropped += stats.dropped;
    for (std::size_t e = 0; e < stats.load.size(); ++e) a.load[e] += stats.load[e];
    flops += moe_forward_flops(shape, a.moe[g].plan);
  }
  a.aux /= groups;
  const kernels::DropoutKey key = dropout_key(layer, kernels::kFfnOutputDropout);
  if (key.active())  // the MoE layer added its bias: dropout, then the residual
    ops_->bias_dropout_residual(out, nullptr, a.mid.data(), d.N, d.h, key);
  else
    ops_->add(a.mid.data(), out, d.Nh);
}

// Checkpointing drops a block's internals after its forward. What stays: the input (the
// checkpoint) and, under CAC, the all-to-all outputs the recompute will reuse.
template <typename T>
void GptModel<T>::release_internals(BlockActs& a) {
  BlockActs kept;
  kept.input = std::move(a.input);
  kept.aux = a.aux;
  kept.dropped = a.dropped;
  kept.load = std::move(a.load);
  if (parallel_.cac) {
    kept.moe.resize(a.moe.size());
    for (std::size_t g = 0; g < a.moe.size(); ++g) {
      kept.moe[g].dispatch_stash = std::move(a.moe[g].dispatch_stash);
      kept.moe[g].return_stash = std::move(a.moe[g].return_stash);
      kept.moe[g].reduction_stash = std::move(a.moe[g].reduction_stash);
      kept.moe[g].block_kept = std::move(a.moe[g].block_kept);
    }
    kept.proj_stash = std::move(a.proj_stash);
    kept.ffn_stash = std::move(a.ffn_stash);
  }
  a = std::move(kept);
}

namespace {
template <typename X>
std::size_t bytes_of(const Tensor<X>& t) {
  return t.size() * sizeof(X);
}
}  // namespace

template <typename T>
std::size_t GptModel<T>::saved_bytes() const {
  std::size_t n = bytes_of(token_ids_) + bytes_of(target_ids_) + bytes_of(final_input_) +
                  bytes_of(lnf_) + bytes_of(logits_) + bytes_of(lnf_mean_) + bytes_of(lnf_rstd_) +
                  bytes_of(log_sum_);
  for (const BlockActs& a : acts_) {
    for (const Tensor<T>* t :
         {&a.input, &a.ln1, &a.qkv, &a.probs, &a.att, &a.mid, &a.ln2, &a.fc1, &a.act})
      n += bytes_of(*t);
    for (const Tensor<M>* t : {&a.ln1_mean, &a.ln1_rstd, &a.ln2_mean, &a.ln2_rstd, &a.lse})
      n += bytes_of(*t);
    for (const MoeActivations<T>& m : a.moe) {  // not the CAC stashes: a category of their own
      const auto& r = m.routing;
      n += bytes_of(r.probs) + bytes_of(r.expert) + bytes_of(r.slot) + bytes_of(r.gate_value) +
           bytes_of(r.weight) + bytes_of(r.first_count) + bytes_of(r.aux) + r.workspace.bytes();
      n +=
          bytes_of(m.expert_in) + bytes_of(m.hidden) + bytes_of(m.activated) + bytes_of(m.returned);
    }
  }
  return n;
}

template <typename T>
void GptModel<T>::block_backward(int layer, const T* d_out, T* d_in, BlockActs& a) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  Tensor<T> d_ln2 = ffn_backward(layer, d_out, a);
  Tensor<T> d_mid(device_, d.Nh);
  device_.copy(d_mid.data(), d_out, d.Nh * sizeof(T));  // residual
  ops_->layernorm_backward(a.mid.data(), params_.value(ids.ln2_g), a.ln2_mean.data(),
                           a.ln2_rstd.data(), d_ln2.data(), d_mid.data(),
                           params_.gradient(ids.ln2_g), params_.gradient(ids.ln2_b), d.N, d.h);
  attention_backward(layer, d_mid.data(), d_in, a);
}

// The FFN's (MoE layer's) input gradient d ln2 from the block's output gradient d_out through
// its dropout mask (the residual takes d_out as it is).
template <typename T>
Tensor<T> GptModel<T>::ffn_backward(int layer, const T* d_out, BlockActs& a) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  auto& P = params_;
  Ops<T>& ops = *ops_;
  const kernels::DropoutKey key = dropout_key(layer, kernels::kFfnOutputDropout);
  Tensor<T> d_ffn_dropped;
  if (key.active()) {
    d_ffn_dropped = Tensor<T>(device_, d.Nh);
    ops.dropout(d_out, d_ffn_dropped.data(), d.N, d.h, key);
  }
  const T* d_ffn = key.active() ? d_ffn_dropped.data() : d_out;
  Tensor<T> d_ln2 = zeros<T>(device_, d.Nh);
  if (ids.moe) {
    moe_block_backward(layer, d_ffn, d_ln2.data(), a);
  } else {
    Tensor<T> d_hidden(device_, static_cast<std::size_t>(d.N) * d.fl);
    ops.linear_backward(a.act.data(), P.value(ids.fc2_w), d_ffn, nullptr, P.gradient(ids.fc2_w),
                        P.gradient(ids.fc2_b), d.N, d.fl, d.h);
    ops.linear_dgelu_backward(d_ffn, P.value(ids.fc2_w), a.fc1.data(), d_hidden.data(),
                              P.gradient(ids.fc1_b), d.N, d.fl, d.h);
    ops.linear_backward(a.ln2.data(), P.value(ids.fc1_w), d_hidden.data(), d_ln2.data(),
                        P.gradient(ids.fc1_w), nullptr, d.N, d.h, d.fl);
    tensor_all_reduce(d_ln2.data(), d.Nh);  // column-parallel input gradient
  }
  return d_ln2;
}

// Each gating group's MoE backward into d_ln2: its input gradient comes out whole (the layer
// reduces it internally).
template <typename T>
void GptModel<T>::moe_block_backward(int layer, const T* d_ffn, T* d_ln2, BlockActs& a) {
  const BlockIds& ids = blocks_[layer];
  auto& P = params_;
  const MoeShape shape = moe_shape();
  const int groups = static_cast<int>(a.moe.size());
  const MoeGrads<T> grads{P.gradient(ids.gate_w), P.gradient(ids.e_w1), P.gradient(ids.e_b1),
                          P.gradient(ids.e_w2), P.gradient(ids.e_b2)};
  const M aux_scale = loss_scale_ * M(config_.gate.aux_coeff) / M(groups);
  const ExchangeSetup exchange = exchange_setup(false);
  for (int g = 0; g < groups; ++g) {
    const std::size_t offset = static_cast<std::size_t>(g) * shape.tokens * shape.hidden;
    moe_backward<T>(*ops_, a.ln2.data() + offset, d_ffn + offset, d_ln2 + offset, shape,
                    moe_params(ids), exchange, a.moe[g], aux_scale, grads);
  }
}

// proj (through its dropout mask), attention, qkv, LayerNorm: d_in = d_mid + the attention
// half's input gradient.
template <typename T>
void GptModel<T>::attention_backward(int layer, const T* d_mid, T* d_in, BlockActs& a) {
  const BlockIds& ids = blocks_[layer];
  const Dims d = dims();
  auto& P = params_;
  Ops<T>& ops = *ops_;
  Tensor<T> d_att = zeros<T>(device_, static_cast<std::size_t>(d.N) * d.hl);
  {  // the attention block's output gradient, through its dropout mask
    const kernels::DropoutKey key = dropout_key(layer, kernels::kAttentionOutputDropout);
    Tensor<T> d_proj_dropped;
    if (key.active()) {
      d_proj_dropped = Tensor<T>(device_, d.Nh);
      ops.dropout(d_mid, d_proj_dropped.data(), d.N, d.h, key);
    }
    ops.linear_backward(a.att.data(), P.value(ids.proj_w),
                        key.active() ? d_proj_dropped.data() : d_mid, d_att.data(),
                        P.gradient(ids.proj_w), P.gradient(ids.proj_b), d.N, d.hl, d.h);
  }
  Tensor<T> d_qkv(device_, static_cast<std::size_t>(d.N) * 3 * d.hl);
  const kernels::DropoutKey probs_key = dropout_key(layer, kernels::kAttentionProbsDropout);
  if (fused_attention_)
    ops.flash_attention_backward(a.qkv.data(), a.att.data(), a.lse.data(), d_att.data(),
                                 d_qkv.data(), d.B, d.S, d.Hl, d.hl, probs_key);
  else
    ops.attention_backward(a.qkv.data(), a.probs.data(), d_att.data(), d_qkv.data(), d.B, d.S, d.Hl,
                           d.hl, probs_key);
  Tensor<T> d_ln1 = zeros<T>(device_, d.Nh);
  ops.linear_backward(a.ln1.data(), P.value(ids.qkv_w), d_qkv.data(), d_ln1.data(),
                      P.gradient(ids.qkv_w), P.gradient(ids.qkv_b), d.N, d.h, 3 * d.hl);
  tensor_all_reduce(d_ln1.data(), d.Nh);        // column-parallel input gradient
  device_.copy(d_in, d_mid, d.Nh * sizeof(T));  // residual
  ops.layernorm_backward(a.input.data(), P.value(ids.ln1_g), a.ln1_mean.data(), a.ln1_rstd.data(),
                         d_ln1.data(), d_in, P.gradient(ids.ln1_g), P.gradient(ids.ln1_b), d.N,
                         d.h);
}

template <typename T>
Losses GptModel<T>::forward(const Batch& batch) {
  const int S = config_.seq_len, h = config_.hidden, V = config_.vocab;
  batch_ = batch;
  tokens_ = batch.sequences * S;
  group_sequences_ = batch.gate_group_sequences > 0 ? batch.gate_group_sequences : batch.sequences;
  if (batch.sequences <= 0 || batch.sequences % group_sequences_ != 0)
    throw Error("forward: " + std::to_string(batch.sequences) +
                " sequences do not split into gating groups of " +
                std::to_string(group_sequences_));
  check_token_ids(batch.tokens, batch.targets, tokens_, V);
  last_forward_flops_ = 0;
  const std::size_t Nh = static_cast<std::size_t>(tokens_) * h;
  Ops<T>& ops = *ops_;

  token_ids_ = Tensor<std::int32_t>(device_, tokens_);
  target_ids_ = Tensor<std::int32_t>(device_, tokens_);
  device_.copy_from_host(token_ids_.data(), batch.tokens, tokens_ * sizeof(std::int32_t));
  device_.copy_from_host(target_ids_.data(), batch.targets, tokens_ * sizeof(std::int32_t));
  acts_.clear();
  acts_.resize(static_cast<std::size_t>(config_.layers));
  acts_[0].input = Tensor<T>(device_, Nh);
  if (tied_) {
    // Vocabulary-parallel: each tensor rank's rows for the tokens it holds (0 for the others),
    // the position on rank 0 only, summed by the tensor group's all-reduce: every element is
    // tok + pos plus zeros, rounded once, as on one rank.
    ops.embedding_forward(token_ids_.data(), params_.value(tok_emb_),
                          t_ == 0 ? params_.value(pos_emb_) : nullptr, acts_[0].input.data(),
                          tokens_, S, h, first_word_, words_);
    tensor_all_reduce(acts_[0].input.data(), Nh);
  } else {
    ops.embedding_forward(token_ids_.data(), params_.value(tok_emb_), params_.value(pos_emb_),
                          acts_[0].input.data(), tokens_, S, h, 0, V);
  }
  Losses losses;
  M aux = 0;
  for (int l = 0; l < config_.layers; ++l) {
    Tensor<T>& next = l + 1 < config_.layers ? acts_[l + 1].input : final_input_;
    next = Tensor<T>(device_, Nh);
    block_forward(l, acts_[l].input.data(), next.data(), acts_[l], false);
    if (blocks_[l].moe) {
      aux += acts_[l].aux;
      losses.dropped += acts_[l].dropped;
      losses.expert_load.push_back(acts_[l].load);
    }
    if (config_.checkpoint) release_internals(acts_[l]);
  }
  losses.aux = static_cast<double>(aux);
  lnf_ = Tensor<T>(device_, Nh);
  lnf_mean_ = Tensor<M>(device_, tokens_);
  lnf_rstd_ = Tensor<M>(device_, tokens_);
  ops.layernorm_forward(final_input_.data(), params_.value(lnf_g_), params_.value(lnf_b_),
                        lnf_.data(), lnf_mean_.data(), lnf_rstd_.data(), tokens_, h);
  logits_ = Tensor<T>(device_, static_cast<std::size_t>(tokens_) * vocab_rows_);
  log_sum_ = Tensor<M>(device_, tokens_);
  if (tied_) {
    losses.lm = tied_head_forward();
  } else {
    ops.linear_forward(lnf_.data(), params_.value(lm_head_), nullptr, logits_.data(), tokens_, h,
                       V);
    losses.lm =
        ops.cross_entropy_loss(logits_.data(), target_ids_.data(), log_sum_.data(), tokens_, V);
  }
  last_forward_flops_ += 2.0 * tokens_ * h * vocab_rows_;
  note_saved();
  return losses;
}

// Megatron's vocabulary-parallel cross-entropy: this rank's logits for its slice of the
// vocabulary; each row's max all-reduced (max), then its sum of exp(logit - max) and its target's
// logit (from the rank that holds the target, 0 elsewhere) all-reduced (sum), in the master type.
template <typename T>
double GptModel<T>::tied_head_forward() {
  const int N = tokens_, h = config_.hidden;
  Ops<T>& ops = *ops_;
  ops.lm_head_forward(lnf_.data(), params_.value(tok_emb_), logits_.data(), N, h, vocab_rows_);
  Tensor<M> stats(device_, 3 * static_cast<std::size_t>(N));  // max, then sums, target logits
  M* row_max = stats.data();
  M* partials = row_max + N;
  ops.cross_entropy_max(logits_.data(), row_max, N, vocab_rows_, words_);
  if (T_ > 1)
    parallel_.exchange.tensor->all_reduce(row_max, row_max, N, dtype_of<M>::value, ReduceOp::max);
  ops.cross_entropy_partials(logits_.data(), target_ids_.data(), row_max, partials, N, vocab_rows_,
                             first_word_, words_);
  if (T_ > 1) parallel_.exchange.tensor->all_reduce(partials, partials, 2 * N, dtype_of<M>::value);
  return ops.cross_entropy_finish(row_max, partials, log_sum_.data(), N);
}

template <typename T>
void GptModel<T>::backward(M loss_scale) {
  TED_CHECK(!acts_.empty(), "backward without forward");
  loss_scale_ = loss_scale;
  const int S = config_.seq_len, h = config_.hidden, V = config_.vocab;
  const std::size_t Nh = static_cast<std::size_t>(tokens_) * h;
  Ops<T>& ops = *ops_;
  // The logits' gradient replaces them, with the loss scale inside (fp16 holds it scaled).
  T* d_logits = logits_.data();
  ops.cross_entropy_backward(logits_.data(), target_ids_.data(), log_sum_.data(), d_logits, tokens_,
                             vocab_rows_, loss_scale, first_word_, words_);
  Tensor<T> d_lnf = zeros<T>(device_, Nh);
  if (tied_) {  // the head's input gradient is the sum of the vocabulary slices'
    ops.lm_head_backward(lnf_.data(), params_.value(tok_emb_), d_logits, d_lnf.data(),
                         params_.gradient(tok_emb_), tokens_, h, vocab_rows_);
    tensor_all_reduce(d_lnf.data(), Nh);
  } else {
    ops.linear_backward(lnf_.data(), params_.value(lm_head_), d_logits, d_lnf.data(),
                        params_.gradient(lm_head_), nullptr, tokens_, h, V);
  }
  // What the head kept is spent once its backward is done (as autograd frees the cross-entropy's
  // and the head's saved tensors after their backward), the final LayerNorm's after its own.
  logits_ = Tensor<T>();
  log_sum_ = Tensor<M>();
  lnf_ = Tensor<T>();
  Tensor<T> d_x = zeros<T>(device_, Nh);
  ops.layernorm_backward(final_input_.data(), params_.value(lnf_g_), lnf_mean_.data(),
                         lnf_rstd_.data(), d_lnf.data(), d_x.data(), params_.gradient(lnf_g_),
                         params_.gradient(lnf_b_), tokens_, h);
  d_lnf = Tensor<T>();
  final_input_ = Tensor<T>();
  lnf_mean_ = Tensor<M>();
  lnf_rstd_ = Tensor<M>();
  Tensor<T> d_prev(device_, Nh);
  for (int l = config_.layers - 1; l >= 0; --l) {
    if (config_.checkpoint) {  // recompute the block's internals from its input
      Tensor<T> scratch(device_, Nh);
      double flops = last_forward_flops_;
      block_forward(l, acts_[l].input.data(), scratch.data(), acts_[l], true);
      last_forward_flops_ = flops;
      note_saved();
    }
    block_backward(l, d_x.data(), d_prev.data(), acts_[l]);
    acts_[l] = BlockActs{};
    std::swap(d_x, d_prev);
  }
  ops.embedding_backward(token_ids_.data(), d_x.data(), params_.gradient(tok_emb_),
                         params_.gradient(pos_emb_), tokens_, S, h, first_word_, words_);
  acts_.clear();
  token_ids_ = Tensor<std::int32_t>();
  target_ids_ = Tensor<std::int32_t>();
}

template class GptModel<float>;
template class GptModel<double>;
template class GptModel<Half>;
template class GptModel<BFloat16>;

}  // namespace ted::model
