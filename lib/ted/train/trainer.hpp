// The training loop, one for every backend, layout and precision: per optimizer step,
// micro_batches micro-batches of micro_batch sequences on each data-parallel rank (the
// DP = Ep x D ranks of a non-expert-data group each feed their own), gradients accumulated with
// scale 1 / (micro_batches x DP) so the loss is the mean over the global batch of
// micro_batch x micro_batches x DP sequences, then AdamW (ZeRO-1 on a grid).
// Micro-batch m of data-parallel rank r is global micro-batch g = m x DP + r, and sequence s of
// it is global sample (step x micro_batches x DP + g) x micro_batch + s: a single process with
// micro_batches x DP micro-batches sees exactly the same data.
//
// The model runs on the device it is given, in run.dtype (fp32; or bf16/fp16 with fp32 masters
// and Adam state, and gradients in fp32 or, with training.grad_dtype = run.dtype, in 16-bit as
// DeepSpeed's fp16 ZeRO-1 keeps them); fp16 scales the loss dynamically (loss_scaler.hpp), and a
// step whose gradients overflow on any rank is skipped on every rank. Losses and the other scalars
// travel on the groups' host control communicators.
#pragma once

#include <functional>
#include <limits>
#include <memory>

#include "ted/grid/ted_groups.hpp"
#include "ted/model/params.hpp"
#include "ted/train/data.hpp"
#include "ted/train/optimizer.hpp"
#include "ted/train/state.hpp"
#include "ted/train/train_config.hpp"

namespace ted::train {

struct StepRecord {
  int step = 0;
  double loss = 0;  // lm + aux_coeff * aux, mean over micro-batches
  double lm_loss = 0;
  double aux_loss = 0;
  double valid_loss = std::numeric_limits<double>::quiet_NaN();  // held-out LM loss; NaN: none
  double lr = 0;
  double grad_norm = 0;  // inf when the step was skipped
  int dropped = 0;       // token choices dropped by capacity in this step
  // Per MoE layer in order, [experts]: the choices routed to each expert in this step's global
  // batch, before drops (every data-parallel rank's tokens).
  std::vector<std::vector<std::int64_t>> expert_load;
  double loss_scale = 1;  // the scale backward ran with (fp16), else 1
  bool skipped = false;   // fp16: a gradient overflowed on some rank, no rank stepped
  double seconds = 0;
  double tokens_per_second = 0;
  double flops = 0;  // GEMM FLOPs of forward, backward and recompute
};

std::unique_ptr<TokenSource> make_source(const TrainConfig& config);
// The held-out samples the validation loss is measured on, or null where the data has none:
// the synthetic chain's samples from index 2^40 on (beyond any run's); megatron's validation
// split (data.valid_fraction or data.valid_path; null without one).
std::unique_ptr<TokenSource> make_validation_source(const TrainConfig& config);

class Trainer {
 public:
  // `device`: where the model lives (its backend runs the kernels); `groups`: the rank's TED
  // groups (null: one process, the reference). Validates the config.
  Trainer(const TrainConfig& config, Device& device, TedGroups* groups = nullptr);
  ~Trainer();
  StepRecord step(int step);
  // Sum of squares of every parameter of the model (the weights the kernels read), each
  // distinct element counted once over the whole layout (the same number on every rank, and
  // for the reference).
  double fingerprint();
  const model::ParamLayout& params() const;
  const TokenSource& source() const;

  // The rank's training state (state.hpp): the weights, the optimizer's, the loss scaler's. A
  // trainer restored from the state another had after step k continues, from step k + 1, as that
  // one would, bit for bit: nothing else carries over between steps (the data, dropout and
  // routing draws are keyed by the step).
  TrainState state();
  // ConfigError when the state is of another model, layout or precision.
  void restore(const TrainState& state);

  // Whether the data has a held-out split (make_validation_source).
  bool has_validation() const;
  // The mean LM loss, with dropout off and no backward, over `batches` global batches of the
  // held-out split (batch b's samples laid out as step b's are), the same on every rank and
  // layout. Touches no parameter or optimizer state. ConfigError without a held-out split.
  double evaluate(int step, int batches);
  // The attention the model runs: cudnn, flash or materialized (GptModel::attention).
  const std::string& attention() const;
  // Of the activations, the most bytes the model has kept for backward at once on this rank
  // (GptModel::saved_peak_bytes): what DeepSpeed's count of autograd's saved tensors compares to.
  std::size_t activations_saved_peak() const;

  // Test hooks. The probe sees host copies of the reduced gradient shards before each update;
  // before_update(step, grads) runs after backward, with the rank's flat gradient buffer (on
  // the device, in the gradient type: the master type, or run.dtype with 16-bit gradients)
  // before any reduction.
  void set_gradient_probe(std::function<void(const std::vector<GradientShard>&)> probe);
  void set_before_update(std::function<void(int step, void* grads, DataType dtype)> hook);

  struct Core;  // the typed training state (trainer.cpp)

 private:
  std::unique_ptr<Core> core_;
};

}  // namespace ted::train
