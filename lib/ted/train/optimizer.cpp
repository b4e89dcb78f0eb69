#include "ted/train/optimizer.hpp"

#include <cmath>
#include <string>

#include "ted/core/error.hpp"

namespace ted::train {

void OptimizerConfig::validate() const {
  if (!(lr > 0)) throw ConfigError("optimizer.lr must be positive");
  if (min_lr < 0 || min_lr > lr)
    throw ConfigError("optimizer.min_lr must be between 0 and optimizer.lr");
  if (warmup_steps < 0) throw ConfigError("optimizer.warmup_steps must not be negative");
  if (weight_decay < 0) throw ConfigError("optimizer.weight_decay must not be negative");
  if (!(beta1 >= 0 && beta1 < 1)) throw ConfigError("optimizer.beta1 must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) throw ConfigError("optimizer.beta2 must be in [0, 1)");
  if (!(eps > 0)) throw ConfigError("optimizer.eps must be positive");
  if (grad_clip < 0) throw ConfigError("optimizer.grad_clip must not be negative");
}

double learning_rate(const OptimizerConfig& c, int step, int total_steps) {
  if (step < c.warmup_steps) return c.lr * (step + 1) / c.warmup_steps;
  int decay_steps = total_steps - c.warmup_steps - 1;
  if (decay_steps <= 0) return c.lr;
  double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / decay_steps);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

template <typename T>
AdamW<T>::AdamW(model::ParamSet<T>& params, const OptimizerConfig& config, Device& device)
    : params_(params), config_(config) {
  config_.validate();
  m_ = zeros<T>(device, params.total());
  v_ = zeros<T>(device, params.total());
}

template <typename T>
double AdamW<T>::step(int step, int total_steps) {
  T* grads = params_.grads().data();
  double sum = 0;
  for (std::size_t i = 0; i < params_.total(); ++i) sum += static_cast<double>(grads[i]) * grads[i];
  double norm = std::sqrt(sum);
  double clip = config_.grad_clip > 0 && norm > config_.grad_clip ? config_.grad_clip / norm : 1.0;

  last_lr_ = learning_rate(config_, step, total_steps);
  const int t = step + 1;
  const T lr = static_cast<T>(last_lr_);
  const T b1 = static_cast<T>(config_.beta1), b2 = static_cast<T>(config_.beta2);
  const T correction1 = static_cast<T>(1.0 - std::pow(config_.beta1, t));
  const T correction2 = static_cast<T>(1.0 - std::pow(config_.beta2, t));
  const T eps = static_cast<T>(config_.eps), scale = static_cast<T>(clip);
  T* values = params_.values().data();
  for (const auto& spec : params_.specs()) {
    const T decay = spec.decay ? static_cast<T>(config_.weight_decay) : T(0);
    for (std::size_t i = spec.offset; i < spec.offset + spec.size(); ++i) {
      T g = grads[i] * scale;
      m_[i] = b1 * m_[i] + (T(1) - b1) * g;
      v_[i] = b2 * v_[i] + (T(1) - b2) * g * g;
      T update = (m_[i] / correction1) / (std::sqrt(v_[i] / correction2) + eps);
      values[i] -= lr * (update + decay * values[i]);
    }
  }
  return norm;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace ted::train
