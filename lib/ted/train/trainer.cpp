#include "ted/train/trainer.hpp"

#include <chrono>

namespace ted::train {

std::unique_ptr<TokenSource> make_source(const TrainConfig& config) {
  if (config.data.source == "file")
    return std::make_unique<TokenFileSource>(config.data.path, config.data.token_bytes,
                                             config.model.vocab, config.model.seq_len);
  return std::make_unique<SyntheticSource>(config.model.vocab, config.model.seed,
                                           config.data.noise);
}

namespace {
const TrainConfig& validated(const TrainConfig& config) {
  config.validate();
  return config;
}

model::ModelParallel model_parallel(const ParallelConfig& p, TedGroups* groups) {
  model::ModelParallel m;
  m.dtd = p.dtd;
  m.reduce_scatter = p.reduce_scatter;
  m.cac = p.cac;
  m.cac_all_reduce = p.cac_all_reduce;
  m.split_experts = p.split_experts;
  if (groups) {
    m.tensor = &groups->tensor();
    m.expert = &groups->expert();
    m.dense_pad = static_cast<std::size_t>(groups->nonexpert_data().size());
    m.expert_pad = static_cast<std::size_t>(groups->expert_data().size());
  }
  return m;
}

OptimizerParallel optimizer_parallel(const ParallelConfig& p, TedGroups* groups) {
  OptimizerParallel o;
  o.zero1 = p.zero1;
  o.tile_elems = static_cast<std::size_t>(p.tile_elems);
  if (groups) {
    o.dense_group = &groups->nonexpert_data();
    o.expert_group = &groups->expert_data();
    o.world = &groups->world();
    o.tensor_rank0 = groups->tensor().rank() == 0;
    if (!p.split_experts && groups->tensor().size() > 1) o.expert_tensor_group = &groups->tensor();
  }
  return o;
}
}  // namespace

Trainer::Trainer(const TrainConfig& config, Device& device, TedGroups* groups)
    : config_(validated(config)),
      groups_(groups),
      source_(make_source(config_)),
      model_(config_.model, device, model_parallel(config_.parallel, groups)),
      optimizer_(model_.params(), config_.optimizer, device,
                 optimizer_parallel(config_.parallel, groups)) {
  if (groups_) {
    dp_size_ = groups_->nonexpert_data().size();
    dp_rank_ = groups_->nonexpert_data().rank();
  }
  std::size_t tokens = static_cast<std::size_t>(config_.data.micro_batch) * config_.model.seq_len;
  tokens_.resize(tokens);
  targets_.resize(tokens);
}

StepRecord Trainer::step(int step) {
  auto start = std::chrono::steady_clock::now();
  const int B = config_.data.micro_batch, M = config_.data.micro_batches, S = config_.model.seq_len;
  StepRecord record;
  record.step = step;
  model_.params().zero_grads();
  const int global_micro = M * dp_size_;
  for (int m = 0; m < M; ++m) {
    const std::int64_t g = static_cast<std::int64_t>(m) * dp_size_ + dp_rank_;
    std::int64_t first = (static_cast<std::int64_t>(step) * global_micro + g) * B;
    for (int s = 0; s < B; ++s)
      source_->sample(first + s, S, tokens_.data() + static_cast<std::size_t>(s) * S,
                      targets_.data() + static_cast<std::size_t>(s) * S);
    model::Batch batch{tokens_.data(), targets_.data(), B, first, step, B};
    auto losses = model_.forward(batch);
    double forward_flops = model_.last_forward_flops();
    model_.backward(1.0f / static_cast<float>(global_micro));
    record.flops += forward_flops * (config_.model.checkpoint ? 4.0 : 3.0);
    record.lm_loss += losses.lm;
    record.aux_loss += losses.aux;
    record.dropped += losses.dropped;
  }
  if (groups_) {  // mean over the global batch: sum over the data-parallel ranks
    double sums[3] = {record.lm_loss, record.aux_loss, static_cast<double>(record.dropped)};
    groups_->nonexpert_data().all_reduce(sums, sums, 3, DataType::f64);
    record.lm_loss = sums[0], record.aux_loss = sums[1];
    record.dropped = static_cast<int>(sums[2]);
  }
  record.lm_loss /= global_micro;
  record.aux_loss /= global_micro;
  record.loss = record.lm_loss + config_.model.gate.aux_coeff * record.aux_loss;
  record.grad_norm = optimizer_.step(step, config_.steps);
  record.lr = optimizer_.last_lr();
  record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record.tokens_per_second = static_cast<double>(B) * global_micro * S / record.seconds;
  return record;
}

double Trainer::fingerprint() {
  const auto& params = model_.params();
  const float* values = params.values().data();
  bool tensor_first = !groups_ || groups_->tensor().rank() == 0;
  bool dense_first = !groups_ || groups_->nonexpert_data().rank() == 0;
  bool expert_first = !groups_ || groups_->expert_data().rank() == 0;
  double sum = 0;
  for (const auto& spec : params.specs()) {
    bool owner = spec.kind == model::ParamKind::dense ? dense_first : expert_first;
    if (!owner || (spec.tensor_replicated && !tensor_first)) continue;
    for (std::size_t i = spec.offset; i < spec.offset + spec.size(); ++i)
      sum += static_cast<double>(values[i]) * values[i];
  }
  if (groups_) groups_->world().all_reduce(&sum, &sum, 1, DataType::f64);
  return sum;
}

}  // namespace ted::train
