// AdamW over a ParamSet's flat buffers, with global gradient-norm clipping and a learning-rate
// schedule of linear warm-up then cosine decay to min_lr. Weight decay applies to the tensors
// marked `decay` (matrices), not to biases, norms and embeddings.
#pragma once

#include "ted/backend/tensor.hpp"
#include "ted/model/params.hpp"

namespace ted::train {

struct OptimizerConfig {
  double lr = 1e-3;
  double min_lr = 1e-4;
  int warmup_steps = 10;
  double weight_decay = 0.01;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // max global gradient norm; 0 = no clipping
  void validate() const;   // ConfigError naming the optimizer.* key
};

// Learning rate at 0-based `step` of `total_steps`: warm-up to lr over warmup_steps, then
// cosine from lr to min_lr at the last step.
double learning_rate(const OptimizerConfig& config, int step, int total_steps);

template <typename T>
class AdamW {
 public:
  AdamW(model::ParamSet<T>& params, const OptimizerConfig& config, Device& device);
  // Clips, updates every parameter, returns the gradient norm before clipping.
  double step(int step, int total_steps);
  double last_lr() const { return last_lr_; }

 private:
  model::ParamSet<T>& params_;
  OptimizerConfig config_;
  Tensor<T> m_, v_;
  double last_lr_ = 0;
};

}  // namespace ted::train
