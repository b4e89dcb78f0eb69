// The single-process training loop: per optimizer step, micro_batches micro-batches of
// micro_batch sequences each (global batch = their product), gradients accumulated with
// scale 1/micro_batches (so the loss is the mean over the global batch), then AdamW.
// Sample s of step t, micro-batch m is global sample (t * micro_batches + m) * micro_batch + s.
#pragma once

#include <memory>

#include "ted/model/gpt.hpp"
#include "ted/train/data.hpp"
#include "ted/train/optimizer.hpp"
#include "ted/train/train_config.hpp"

namespace ted::train {

struct StepRecord {
  int step = 0;
  double loss = 0;  // lm + aux_coeff * aux, mean over micro-batches
  double lm_loss = 0;
  double aux_loss = 0;
  double lr = 0;
  double grad_norm = 0;
  int dropped = 0;  // token choices dropped by capacity in this step
  double seconds = 0;
  double tokens_per_second = 0;
  double flops = 0;  // GEMM FLOPs of forward, backward and recompute
};

std::unique_ptr<TokenSource> make_source(const TrainConfig& config);

class Trainer {
 public:
  Trainer(const TrainConfig& config, Device& device);  // validates the config
  StepRecord step(int step);
  model::GptModel<float>& model() { return model_; }
  const TokenSource& source() const { return *source_; }

 private:
  TrainConfig config_;
  std::unique_ptr<TokenSource> source_;
  model::GptModel<float> model_;
  AdamW<float> optimizer_;
  std::vector<std::int32_t> tokens_, targets_;
};

}  // namespace ted::train
