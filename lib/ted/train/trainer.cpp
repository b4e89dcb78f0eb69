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
}  // namespace

Trainer::Trainer(const TrainConfig& config, Device& device)
    : config_(validated(config)),
      source_(make_source(config_)),
      model_(config_.model, device),
      optimizer_(model_.params(), config_.optimizer, device) {
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
  for (int m = 0; m < M; ++m) {
    std::int64_t first = (static_cast<std::int64_t>(step) * M + m) * B;
    for (int s = 0; s < B; ++s)
      source_->sample(first + s, S, tokens_.data() + static_cast<std::size_t>(s) * S,
                      targets_.data() + static_cast<std::size_t>(s) * S);
    model::Batch batch{tokens_.data(), targets_.data(), B, first, step, B};
    auto losses = model_.forward(batch);
    double forward_flops = model_.last_forward_flops();
    model_.backward(1.0f / static_cast<float>(M));
    record.flops += forward_flops * (config_.model.checkpoint ? 4.0 : 3.0);
    record.lm_loss += losses.lm / M;
    record.aux_loss += losses.aux / M;
    record.dropped += losses.dropped;
  }
  record.loss = record.lm_loss + config_.model.gate.aux_coeff * record.aux_loss;
  record.grad_norm = optimizer_.step(step, config_.steps);
  record.lr = optimizer_.last_lr();
  record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record.tokens_per_second = static_cast<double>(B) * M * S / record.seconds;
  return record;
}

}  // namespace ted::train
