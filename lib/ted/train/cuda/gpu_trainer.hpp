// The training loop of train/trainer.hpp on one GPU: the same data order, micro-batching,
// learning-rate schedule, clipping and AdamW (the fused kernel on fp32 masters), in fp32,
// bf16 or fp16; fp16 adds dynamic loss scaling (a step whose gradients overflow is skipped).
#pragma once

#include <memory>
#include <vector>

#include "ted/model/cuda/gpu_gpt.hpp"
#include "ted/train/data.hpp"
#include "ted/train/loss_scaler.hpp"
#include "ted/train/trainer.hpp"

namespace ted::train::cuda {

template <typename T>
class GpuTrainer {
 public:
  GpuTrainer(const TrainConfig& config, kernels::cuda::Context& ctx,
             const LossScalerConfig& scaler = {});
  // StepRecord as the CPU Trainer's; an fp16 step skipped for overflow reports grad_norm inf.
  StepRecord step(int step);
  model::cuda::GpuGpt<T>& model() { return model_; }
  const LossScaler& scaler() const { return scaler_; }

 private:
  TrainConfig config_;
  kernels::cuda::Context& ctx_;
  std::unique_ptr<TokenSource> source_;
  model::cuda::GpuGpt<T> model_;
  LossScaler scaler_;
  bool scaling_;
  Tensor<float> m_, v_;
  std::vector<std::int32_t> tokens_, targets_;
  int adam_steps_ = 0;
};

}  // namespace ted::train::cuda
