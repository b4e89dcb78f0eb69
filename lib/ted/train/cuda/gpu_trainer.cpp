#include "ted/train/cuda/gpu_trainer.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>

#include "ted/train/optimizer.hpp"

namespace ted::train::cuda {

namespace kc = ted::kernels::cuda;

template <typename T>
GpuTrainer<T>::GpuTrainer(const TrainConfig& config, kc::Context& ctx,
                          const LossScalerConfig& scaler)
    : config_(config),
      ctx_(ctx),
      source_(make_source(config_)),
      model_(ctx, config_.model),
      scaler_(scaler),
      scaling_(std::is_same_v<T, Half>) {
  config_.optimizer.validate();
  m_ = zeros<float>(ctx.device(), model_.parameter_count());
  v_ = zeros<float>(ctx.device(), model_.parameter_count());
  std::size_t tokens = static_cast<std::size_t>(config_.data.micro_batch) * config_.model.seq_len;
  tokens_.resize(tokens);
  targets_.resize(tokens);
}

template <typename T>
StepRecord GpuTrainer<T>::step(int step) {
  auto start = std::chrono::steady_clock::now();
  const int B = config_.data.micro_batch, M = config_.data.micro_batches, S = config_.model.seq_len;
  StepRecord record;
  record.step = step;
  model_.zero_grads();
  const float loss_scale = scaling_ ? static_cast<float>(scaler_.scale()) : 1.0f;
  for (int m = 0; m < M; ++m) {  // the CPU Trainer's data order with one data-parallel rank
    std::int64_t first = (static_cast<std::int64_t>(step) * M + m) * B;
    for (int s = 0; s < B; ++s)
      source_->sample(first + s, S, tokens_.data() + static_cast<std::size_t>(s) * S,
                      targets_.data() + static_cast<std::size_t>(s) * S);
    auto losses = model_.forward(tokens_.data(), targets_.data(), B, first, step);
    record.flops += model_.last_forward_flops() * 3.0;
    model_.backward(loss_scale / static_cast<float>(M));
    record.lm_loss += losses.lm;
    record.aux_loss += losses.aux;
    record.dropped += losses.dropped;
  }
  record.lm_loss /= M;
  record.aux_loss /= M;
  record.loss = record.lm_loss + config_.model.gate.aux_coeff * record.aux_loss;
  const OptimizerConfig& opt = config_.optimizer;
  record.lr = learning_rate(opt, step, config_.steps);

  const std::size_t count = model_.parameter_count();
  bool apply = true;
  if (scaling_) apply = scaler_.update(kc::has_non_finite(ctx_, model_.grads(), count));
  if (!apply) {
    record.grad_norm = std::numeric_limits<double>::infinity();
  } else {
    double norm = std::sqrt(kc::squared_norm(ctx_, model_.grads(), count)) / loss_scale;
    record.grad_norm = norm;
    double clip = opt.grad_clip > 0 && norm > opt.grad_clip ? opt.grad_clip / norm : 1.0;
    // The CPU optimizer's step counter is the step index; a skipped fp16 step does not count.
    const int t = ++adam_steps_;
    kc::AdamStep adam{static_cast<float>(record.lr),
                      static_cast<float>(opt.beta1),
                      static_cast<float>(opt.beta2),
                      static_cast<float>(opt.eps),
                      static_cast<float>(opt.weight_decay),
                      static_cast<float>(1.0 - std::pow(opt.beta1, t)),
                      static_cast<float>(1.0 - std::pow(opt.beta2, t)),
                      static_cast<float>(clip / loss_scale)};
    for (const auto& tensor : model_.tensors())
      kc::adamw<T>(ctx_, model_.master() + tensor.offset, model_.grads() + tensor.offset,
                   m_.data() + tensor.offset, v_.data() + tensor.offset,
                   model_.copy() + tensor.offset, tensor.size, adam, tensor.decay);
  }
  ctx_.synchronize();
  record.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  record.tokens_per_second = static_cast<double>(B) * M * S / record.seconds;
  return record;
}

template class GpuTrainer<float>;
template class GpuTrainer<Half>;
template class GpuTrainer<BFloat16>;

}  // namespace ted::train::cuda
