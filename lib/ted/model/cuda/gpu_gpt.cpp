#include "ted/model/cuda/gpu_gpt.hpp"

#include <string>

#include "ted/core/error.hpp"
#include "ted/model/gpt.hpp"

namespace ted::model::cuda {

template <typename T>
GpuBlock<T>::GpuBlock(kc::Context& ctx, const BlockShape& shape)
    : ctx_(ctx), shape_(shape), tokens_(shape.sequences * shape.seq) {
  const std::size_t N = tokens_, h = shape.hidden, f = shape.ffn, S = shape.seq;
  const std::size_t heads = shape.heads;
  ln1_ = make<T>(N * h), qkv_ = make<T>(N * 3 * h), att_ = make<T>(N * h);
  probs_ = make<T>(shape.sequences * heads * S * S);
  mid_ = make<T>(N * h), ln2_ = make<T>(N * h);
  mean1_ = make<float>(N), rstd1_ = make<float>(N), mean2_ = make<float>(N),
  rstd2_ = make<float>(N);
  d_mid_ = make<T>(N * h), d_ln2_ = make<T>(N * h), d_att_ = make<T>(N * h);
  d_qkv_ = make<T>(N * 3 * h), d_ln1_ = make<T>(N * h), scratch_ = make<T>(heads * S * S);
  if (!shape.moe) {
    fc1_ = make<T>(N * f), act_ = make<T>(N * f), d_act_ = make<T>(N * f);
  } else {
    const std::size_t E = shape.gate.experts;
    logits_ = make<float>(N * E), d_logits_ = make<T>(N * E);
    d_weight_ = make<float>(N * shape.gate.top_k);
  }
}

template <typename T>
void GpuBlock<T>::forward(const T* x, T* out, const BlockWeights<T>& w, const RoutingKey& key) {
  const int N = tokens_, h = shape_.hidden, f = shape_.ffn;
  const std::size_t Nh = static_cast<std::size_t>(N) * h;
  kc::layernorm_forward<T>(ctx_, x, w.ln1_g, w.ln1_b, ln1_.data(), mean1_.data(), rstd1_.data(), N,
                           h);
  kc::linear_forward<T>(ctx_, ln1_.data(), w.qkv_w, w.qkv_b, qkv_.data(), N, h, 3 * h);
  kc::attention_forward<T>(ctx_, qkv_.data(), att_.data(), probs_.data(), shape_.sequences,
                           shape_.seq, shape_.heads, h);
  kc::linear_forward<T>(ctx_, att_.data(), w.proj_w, w.proj_b, mid_.data(), N, h, h);
  kc::add<T>(ctx_, x, mid_.data(), Nh);  // residual
  kc::layernorm_forward<T>(ctx_, mid_.data(), w.ln2_g, w.ln2_b, ln2_.data(), mean2_.data(),
                           rstd2_.data(), N, h);
  if (!shape_.moe) {
    kc::linear_forward<T>(ctx_, ln2_.data(), w.fc1_w, w.fc1_b, fc1_.data(), N, h, f);
    kc::gelu_forward<T>(ctx_, fc1_.data(), act_.data(), static_cast<std::size_t>(N) * f);
    kc::linear_forward<T>(ctx_, act_.data(), w.fc2_w, w.fc2_b, out, N, f, h);
  } else {
    const int E = shape_.gate.experts;
    kc::gemm_f32_out<T>(ctx_, false, false, N, E, h, 1.0f, ln2_.data(), h, w.gate_w, E, 0.0f,
                        logits_.data(), E);
    kc::route(ctx_, logits_.data(), N, shape_.gate, key, routing_);
    const std::size_t C = routing_.capacity;
    const std::size_t rows = E * C;
    if (dispatched_.size() != rows * h) {  // the capacity is fixed unless dropless
      dispatched_ = make<T>(rows * h), expert_out_ = make<T>(rows * h);
      hidden_ = make<T>(rows * f), d_act_ = make<T>(rows * f);
      d_expert_out_ = make<T>(rows * h), d_dispatched_ = make<T>(rows * h);
      act_ = make<T>(rows * f);
    }
    kc::dispatch<T>(ctx_, ln2_.data(), routing_, dispatched_.data(), h);
    kc::expert_ffn_forward<T>(ctx_, dispatched_.data(), w.w1, w.b1, w.w2, w.b2, hidden_.data(),
                              act_.data(), expert_out_.data(), E, static_cast<int>(C), h, f);
    kc::combine<T>(ctx_, expert_out_.data(), routing_, out, h);
  }
  kc::add<T>(ctx_, mid_.data(), out, Nh);  // residual
}

template <typename T>
void GpuBlock<T>::backward(const T* x, const T* d_out, T* d_in, const BlockWeights<T>& w,
                           const BlockGrads& g, float aux_scale) {
  const int N = tokens_, h = shape_.hidden, f = shape_.ffn;
  const std::size_t Nh = static_cast<std::size_t>(N) * h;
  kc::zero<T>(ctx_, d_ln2_.data(), Nh);
  if (!shape_.moe) {
    kc::zero<T>(ctx_, d_act_.data(), static_cast<std::size_t>(N) * f);
    kc::linear_backward<T>(ctx_, act_.data(), w.fc2_w, d_out, d_act_.data(), g.fc2_w, g.fc2_b, N, f,
                           h);
    kc::gelu_backward<T>(ctx_, fc1_.data(), d_act_.data(), d_act_.data(),
                         static_cast<std::size_t>(N) * f);
    kc::linear_backward<T>(ctx_, ln2_.data(), w.fc1_w, d_act_.data(), d_ln2_.data(), g.fc1_w,
                           g.fc1_b, N, h, f);
  } else {
    const int E = shape_.gate.experts, C = routing_.capacity;
    kc::combine_backward<T>(ctx_, expert_out_.data(), d_out, routing_, d_expert_out_.data(),
                            d_weight_.data(), h);
    kc::expert_ffn_backward<T>(ctx_, dispatched_.data(), w.w1, w.w2, hidden_.data(), act_.data(),
                               d_expert_out_.data(), d_dispatched_.data(), d_act_.data(), g.w1,
                               g.b1, g.w2, g.b2, E, C, h, f);
    kc::dispatch_backward<T>(ctx_, d_dispatched_.data(), routing_, d_ln2_.data(), h);
    kc::route_backward<T>(ctx_, routing_, d_weight_.data(), aux_scale, d_logits_.data());
    kc::linear_backward<T>(ctx_, ln2_.data(), w.gate_w, d_logits_.data(), d_ln2_.data(), g.gate_w,
                           nullptr, N, h, E);
  }
  kc::copy<T>(ctx_, d_out, d_mid_.data(), Nh);  // residual
  kc::layernorm_backward<T>(ctx_, mid_.data(), w.ln2_g, mean2_.data(), rstd2_.data(), d_ln2_.data(),
                            d_mid_.data(), g.ln2_g, g.ln2_b, N, h);
  kc::zero<T>(ctx_, d_att_.data(), Nh);
  kc::linear_backward<T>(ctx_, att_.data(), w.proj_w, d_mid_.data(), d_att_.data(), g.proj_w,
                         g.proj_b, N, h, h);
  kc::attention_backward<T>(ctx_, qkv_.data(), probs_.data(), d_att_.data(), d_qkv_.data(),
                            scratch_.data(), shape_.sequences, shape_.seq, shape_.heads, h);
  kc::zero<T>(ctx_, d_ln1_.data(), Nh);
  kc::linear_backward<T>(ctx_, ln1_.data(), w.qkv_w, d_qkv_.data(), d_ln1_.data(), g.qkv_w, g.qkv_b,
                         N, h, 3 * h);
  kc::copy<T>(ctx_, d_mid_.data(), d_in, Nh);  // residual
  kc::layernorm_backward<T>(ctx_, x, w.ln1_g, mean1_.data(), rstd1_.data(), d_ln1_.data(), d_in,
                            g.ln1_g, g.ln1_b, N, h);
}

template <typename T>
double GpuBlock<T>::forward_flops() const {
  const double N = tokens_, h = shape_.hidden, S = shape_.seq;
  double flops = 2 * N * h * 3 * h + 2 * N * h * h + 4 * N * S * h;  // qkv, proj, attention
  if (!shape_.moe) return flops + 4 * N * h * shape_.ffn;
  const double E = shape_.gate.experts;
  return flops + 2 * N * h * E + 4 * E * routing_.capacity * h * shape_.ffn;  // gate, experts
}

template <typename T>
GpuGpt<T>::GpuGpt(kc::Context& ctx, const ModelConfig& config) : ctx_(ctx), config_(config) {
  config_.validate();
  if (config_.checkpoint)
    throw ConfigError("model.checkpoint: the GPU model has no activation checkpointing yet");
  // The reference model made on the host gives the names, layout and initial values.
  auto host = make_cpu_device();
  GptModel<float> reference(config_, *host);
  const auto& params = reference.params();
  total_ = params.total();
  for (const auto& spec : params.specs())
    tensors_.push_back({spec.name, spec.offset, spec.size(), spec.decay});
  Device& device = ctx_.device();
  master_ = Tensor<float>(device, total_);
  device.copy_from_host(master_.data(), params.values().data(), total_ * sizeof(float));
  copy_ = Tensor<T>(device, total_);
  kc::from_float<T>(ctx_, master_.data(), copy_.data(), total_);
  grads_ = zeros<float>(device, total_);
  for (int l = 0; l < config_.layers; ++l) {  // the buffers never move: resolve names once
    block_weights_.push_back(weights(l));
    block_grads_.push_back(grads_of(l));
  }
}

template <typename T>
GpuGpt<T>::~GpuGpt() = default;

template <typename T>
std::size_t GpuGpt<T>::offset_of(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t.offset;
  throw Error("GpuGpt: no parameter named " + name);
}

template <typename T>
BlockWeights<T> GpuGpt<T>::weights(int l) const {
  const std::string p = "block" + std::to_string(l) + ".";
  auto f = [&](const char* name) { return master_.data() + offset_of(p + name); };
  auto t = [&](const char* name) { return copy_.data() + offset_of(p + name); };
  BlockWeights<T> w{f("ln1.g"), f("ln1.b"), f("attn.qkv.b"), f("attn.proj.b"),
                    f("ln2.g"), f("ln2.b"), t("attn.qkv.w"), t("attn.proj.w")};
  if (config_.is_moe(l)) {
    w.gate_w = t("moe.gate.w"), w.w1 = t("moe.w1"), w.w2 = t("moe.w2");
    w.b1 = f("moe.b1"), w.b2 = f("moe.b2");
  } else {
    w.fc1_w = t("ffn.fc1.w"), w.fc2_w = t("ffn.fc2.w");
    w.fc1_b = f("ffn.fc1.b"), w.fc2_b = f("ffn.fc2.b");
  }
  return w;
}

template <typename T>
BlockGrads GpuGpt<T>::grads_of(int l) {
  const std::string p = "block" + std::to_string(l) + ".";
  auto g = [&](const char* name) { return grads_.data() + offset_of(p + name); };
  BlockGrads out{g("ln1.g"),       g("ln1.b"),       g("attn.qkv.w"), g("attn.qkv.b"),
                 g("attn.proj.w"), g("attn.proj.b"), g("ln2.g"),      g("ln2.b")};
  if (config_.is_moe(l)) {
    out.gate_w = g("moe.gate.w"), out.w1 = g("moe.w1"), out.b1 = g("moe.b1");
    out.w2 = g("moe.w2"), out.b2 = g("moe.b2");
  } else {
    out.fc1_w = g("ffn.fc1.w"), out.fc1_b = g("ffn.fc1.b");
    out.fc2_w = g("ffn.fc2.w"), out.fc2_b = g("ffn.fc2.b");
  }
  return out;
}

template <typename T>
GpuLosses<T> GpuGpt<T>::forward(const std::int32_t* tokens, const std::int32_t* targets,
                                int sequences, std::int64_t first_sample, std::int64_t step) {
  const int S = config_.seq_len, h = config_.hidden, V = config_.vocab;
  Device& device = ctx_.device();
  if (sequences != sequences_) {  // (re)build the blocks and buffers for this micro-batch size
    sequences_ = sequences;
    tokens_ = sequences * S;
    const std::size_t N = tokens_, Nh = N * h;
    blocks_.clear();
    for (int l = 0; l < config_.layers; ++l)
      blocks_.push_back(std::make_unique<GpuBlock<T>>(
          ctx_, BlockShape{sequences, S, h, config_.heads, config_.ffn(), config_.is_moe(l),
                           config_.gate}));
    xs_.clear();
    for (int l = 0; l <= config_.layers; ++l) xs_.emplace_back(device, Nh);
    tokens_dev_ = Tensor<std::int32_t>(device, N), targets_dev_ = Tensor<std::int32_t>(device, N);
    lnf_ = Tensor<T>(device, Nh), d_a_ = Tensor<T>(device, Nh), d_b_ = Tensor<T>(device, Nh);
    d_lnf_ = Tensor<T>(device, Nh);
    logits_ = Tensor<T>(device, N * V), d_logits_ = Tensor<T>(device, N * V);
    lnf_mean_ = Tensor<float>(device, N), lnf_rstd_ = Tensor<float>(device, N);
    row_loss_ = Tensor<float>(device, N);
  }
  check_token_ids(tokens, targets, tokens_, V);
  device.copy_from_host(tokens_dev_.data(), tokens, tokens_ * sizeof(std::int32_t));
  device.copy_from_host(targets_dev_.data(), targets, tokens_ * sizeof(std::int32_t));

  kc::embedding_forward<T>(ctx_, tokens_dev_.data(), master_.data() + offset_of("tok_emb"),
                           master_.data() + offset_of("pos_emb"), xs_[0].data(), tokens_, S, h);
  GpuLosses<T> losses;
  flops_ = 0;
  for (int l = 0; l < config_.layers; ++l) {
    RoutingKey key{config_.seed, step, l, first_sample * S};
    blocks_[l]->forward(xs_[l].data(), xs_[l + 1].data(), block_weights_[l], key);
    flops_ += blocks_[l]->forward_flops();
    if (config_.is_moe(l)) {
      losses.aux += kc::aux(ctx_, blocks_[l]->routing());
      losses.dropped += kc::dropped(ctx_, blocks_[l]->routing());
    }
  }
  const T* final_in = xs_[config_.layers].data();
  kc::layernorm_forward<T>(ctx_, final_in, master_.data() + offset_of("lnf.g"),
                           master_.data() + offset_of("lnf.b"), lnf_.data(), lnf_mean_.data(),
                           lnf_rstd_.data(), tokens_, h);
  kc::linear_forward<T>(ctx_, lnf_.data(), copy_.data() + offset_of("lm_head.w"), nullptr,
                        logits_.data(), tokens_, h, V);
  flops_ += 2.0 * tokens_ * h * V;
  // The loss only; backward recomputes the gradient with the loss scale inside, so fp16 never
  // holds an unscaled (underflowing) logit gradient.
  kc::cross_entropy<T>(ctx_, logits_.data(), targets_dev_.data(), d_logits_.data(),
                       row_loss_.data(), tokens_, V, 1.0f);
  losses.lm = kc::sum(ctx_, row_loss_.data(), tokens_) / tokens_;
  return losses;
}

template <typename T>
void GpuGpt<T>::backward(float loss_scale) {
  TED_CHECK(tokens_ > 0, "backward without forward");
  const int S = config_.seq_len, h = config_.hidden, V = config_.vocab;
  const std::size_t Nh = static_cast<std::size_t>(tokens_) * h;
  T* d_logits = d_logits_.data();
  kc::cross_entropy<T>(ctx_, logits_.data(), targets_dev_.data(), d_logits, row_loss_.data(),
                       tokens_, V, loss_scale);
  float* g = grads_.data();
  kc::zero<T>(ctx_, d_lnf_.data(), Nh);
  kc::linear_backward<T>(ctx_, lnf_.data(), copy_.data() + offset_of("lm_head.w"), d_logits,
                         d_lnf_.data(), g + offset_of("lm_head.w"), nullptr, tokens_, h, V);
  kc::zero<T>(ctx_, d_a_.data(), Nh);
  kc::layernorm_backward<T>(ctx_, xs_[config_.layers].data(), master_.data() + offset_of("lnf.g"),
                            lnf_mean_.data(), lnf_rstd_.data(), d_lnf_.data(), d_a_.data(),
                            g + offset_of("lnf.g"), g + offset_of("lnf.b"), tokens_, h);
  const float aux_scale = loss_scale * static_cast<float>(config_.gate.aux_coeff);
  for (int l = config_.layers - 1; l >= 0; --l) {
    blocks_[l]->backward(xs_[l].data(), d_a_.data(), d_b_.data(), block_weights_[l],
                         block_grads_[l], aux_scale);
    std::swap(d_a_, d_b_);
  }
  kc::embedding_backward<T>(ctx_, tokens_dev_.data(), d_a_.data(), g + offset_of("tok_emb"),
                            g + offset_of("pos_emb"), tokens_, S, h);
}

template <typename T>
void GpuGpt<T>::zero_grads() {
  kc::zero<float>(ctx_, grads_.data(), total_);
}

template <typename T>
double GpuGpt<T>::fingerprint() {
  return kc::squared_norm(ctx_, master_.data(), total_);
}

template class GpuBlock<float>;
template class GpuBlock<Half>;
template class GpuBlock<BFloat16>;
template class GpuGpt<float>;
template class GpuGpt<Half>;
template class GpuGpt<BFloat16>;

}  // namespace ted::model::cuda
