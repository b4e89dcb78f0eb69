// The training loop: per optimizer step, micro_batches micro-batches of micro_batch sequences on
// each data-parallel rank (the DP = Ep x D ranks of a non-expert-data group each feed their
// own), gradients accumulated with scale 1 / (micro_batches x DP) so the loss is the mean over
// the global batch of micro_batch x micro_batches x DP sequences, then AdamW (ZeRO-1 on a grid).
// Micro-batch m of data-parallel rank r is global micro-batch g = m x DP + r, and sequence s of
// it is global sample (step x micro_batches x DP + g) x micro_batch + s: a single process with
// micro_batches x DP micro-batches sees exactly the same data.
#pragma once

#include <memory>

#include "ted/grid/ted_groups.hpp"
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
  // `groups`: the rank's TED groups (null: one process, the reference). Validates the config.
  Trainer(const TrainConfig& config, Device& device, TedGroups* groups = nullptr);
  StepRecord step(int step);
  model::GptModel<float>& model() { return model_; }
  // Sum of squares of every parameter of the model, each distinct element counted once over
  // the whole layout (the same number on every rank, and for the reference).
  double fingerprint();
  const TokenSource& source() const { return *source_; }

 private:
  TrainConfig config_;
  TedGroups* groups_;
  int dp_size_ = 1, dp_rank_ = 0;
  std::unique_ptr<TokenSource> source_;
  model::GptModel<float> model_;
  AdamW<float> optimizer_;
  std::vector<std::int32_t> tokens_, targets_;
};

}  // namespace ted::train
