// The tiny MoE GPT the training tests run: trains in about a second on one CPU core, and its
// loss falls from ln(32) towards the synthetic data's entropy.
#pragma once

#include "ted/train/train_config.hpp"

namespace ted::test {

inline train::TrainConfig tiny_run(int steps = 200) {
  train::TrainConfig c;
  c.model.vocab = 32;
  c.model.seq_len = 16;
  c.model.hidden = 32;
  c.model.heads = 4;
  c.model.layers = 2;
  c.model.gate.experts = 4;
  c.optimizer.lr = 3e-3;
  c.optimizer.min_lr = 3e-4;
  c.data.micro_batch = 8;
  c.data.micro_batches = 2;
  c.steps = steps;
  return c;
}

}  // namespace ted::test
