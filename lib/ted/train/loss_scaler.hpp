// Dynamic loss scaling for fp16 training (the rule of mixed-precision training with a scaled
// loss): backward runs on loss x scale so small gradients survive in fp16; if any gradient
// came out inf or NaN the step is skipped and the scale backs off; after growth_interval
// clean steps in a row it grows again. Host logic only, so the CPU tests cover it; the GPU
// supplies the overflow flag (kernels::cuda::has_non_finite).
#pragma once

#include <algorithm>

namespace ted::train {

struct LossScalerConfig {
  double initial = 65536.0;
  double growth = 2.0;
  double backoff = 0.5;
  int growth_interval = 1000;
  double min_scale = 1.0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config = {})
      : config_(config), scale_(config.initial) {}

  double scale() const { return scale_; }
  int skipped() const { return skipped_; }

  // What moves between steps, for checkpoints: a restored scaler continues as this one would.
  struct State {
    double scale;
    int clean_steps, skipped;
  };
  State state() const { return {scale_, clean_steps_, skipped_}; }
  void restore(const State& state) {
    scale_ = state.scale, clean_steps_ = state.clean_steps, skipped_ = state.skipped;
  }

  // After backward: returns true when the step may be applied (no overflow), and moves the
  // scale.
  bool update(bool overflow) {
    if (overflow) {
      scale_ = std::max(scale_ * config_.backoff, config_.min_scale);
      clean_steps_ = 0;
      ++skipped_;
      return false;
    }
    if (++clean_steps_ >= config_.growth_interval) {
      scale_ *= config_.growth;
      clean_steps_ = 0;
    }
    return true;
  }

 private:
  LossScalerConfig config_;
  double scale_;
  int clean_steps_ = 0;
  int skipped_ = 0;
};

}  // namespace ted::train
