// AdamW over a ParamSet's flat buffers, with global gradient-norm clipping and a learning-rate
// schedule of linear warm-up then cosine decay to min_lr. Weight decay applies to the tensors
// marked `decay` (matrices), not to biases, norms and embeddings.
//
// On a TED grid (OptimizerParallel) each part of the flat buffers is reduced over its own data
// group: dense tensors over the non-expert-data group (Ep x D), expert tensors over the
// expert-data group (D), or, when the experts are whole on every tensor rank, over the T x D
// ranks that hold them (as DeepSpeed's expert data-parallel group). With ZeRO stage 1 the gradients
// are reduce-scattered, each rank keeps Adam state for and updates its 1/n shard only, and the
// updated shards are all-gathered. The step walks its elements in tiles of at most tile_elems (0:
// one tile), so the temporary gradient copy (the unscaled and clipped fp32 gradient) is bounded by
// a tile. The clipping norm counts every distinct element of the model once.
//
// Mixed precision (T = bf16 or fp16): the optimizer keeps the fp32 master of the elements it
// updates (its ZeRO-1 shard) next to Adam's m and v, updates it and writes the 16-bit copy the
// kernels read, which is what the all-gather then moves. In fp32 the values are the master.
// Gradients are fp32, or with 16-bit gradients (ParamSet::storage_gradients, DeepSpeed's fp16
// ZeRO-1) T: reduced (reduce-scattered) in T, and widened to fp32 only in the step's tile, so
// fp32 exists only for this rank's shard (master, m, v) and one tile of gradient. Every element
// is touched through the backend's kernels.
#pragma once

#include <functional>
#include <vector>

#include "ted/backend/ops.hpp"
#include "ted/comm/communicator.hpp"
#include "ted/device/tensor.hpp"
#include "ted/model/params.hpp"
#include "ted/train/state.hpp"

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

struct OptimizerParallel {
  // Device communicators (they carry gradients and parameters).
  Communicator* dense_group = nullptr;  // non-expert-data group; null: one process
  // The ranks that hold the same experts: the expert-data group (D ranks), or with experts whole
  // on every tensor rank (not split over T) their T x D replicas (TedGroups::expert_replicas).
  Communicator* expert_group = nullptr;
  // expert_group holds the tensor group's ranks (whole experts): the tensor ranks' gradients of
  // the experts, from their own token slices, are summed in it, and every rank counts its own
  // shard of them in the norm.
  // The host control world: the global gradient norm and the overflow flag.
  Communicator* control = nullptr;
  bool expert_group_spans_tensor = false;
  bool tensor_rank0 = true;  // this rank counts the tensor-replicated tensors in the norm
  bool zero1 = true;
  std::size_t tile_elems = 0;  // 0: the whole shard at once
};

struct OptimizerStep {
  double grad_norm = 0;  // of the unscaled gradients, before clipping (inf when skipped)
  bool applied = true;   // false: a gradient overflowed on some rank and no rank stepped
};

// This rank's reduced gradients of one part of the flat buffers, before the update: flat
// elements [first, first + values.size()), still multiplied by the loss scale.
struct GradientShard {
  model::ParamKind kind = model::ParamKind::dense;
  std::size_t first = 0;
  std::vector<double> values;
};

template <typename T>
class AdamW {
 public:
  using M = master_t<T>;
  AdamW(model::ParamSet<T>& params, const OptimizerConfig& config, Ops<T>& ops,
        const OptimizerParallel& parallel = {});
  // Reduces the gradients over the data groups, then clips and updates every parameter.
  // The gradients are of loss_scale x the loss. With check_overflow (fp16) a step whose
  // gradients hold an inf or NaN on any rank is skipped on every rank (the flag is agreed over
  // the control world first).
  OptimizerStep step(int step, int total_steps, double loss_scale = 1.0,
                     bool check_overflow = false);
  double last_lr() const { return last_lr_; }
  // The state a continued run needs, as this rank holds it: Adam's m and v of its elements, the
  // fp32 master of 16-bit weights, the count of applied steps (Adam's bias correction).
  void save(TrainState& into) const;
  // Takes back what save() gave; ConfigError when a blob is missing or of another size.
  void load(const TrainState& from);
  // Called with host copies of the reduced gradient shards before each update (tests).
  void set_gradient_probe(std::function<void(const std::vector<GradientShard>&)> probe) {
    probe_ = std::move(probe);
  }

 private:
  template <typename G>
  OptimizerStep step_with(G* grads, int step, int total_steps, double loss_scale,
                          bool check_overflow);

  struct Run {  // elements [begin, end) of a part's shard, relative to its first
    std::size_t begin, end;
    bool decay;
  };
  struct Part {  // the dense or the expert part of the flat buffers, as this rank updates it
    model::ParamKind kind;
    Communicator* group;
    std::size_t begin, size;  // the whole part in the flat buffers
    std::size_t mine, count;  // the elements this rank updates (its shard, or all)
    bool counts_norm;         // this rank adds its elements to the norm
    Tensor<M> m, v;
    Tensor<M> master;                     // 16-bit: the fp32 master of my elements
    std::vector<IndexRange> norm_ranges;  // my elements the norm counts (relative to mine)
    std::vector<Run> runs;                // my elements by weight decay (relative to mine)
  };

  model::ParamSet<T>& params_;
  OptimizerConfig config_;
  OptimizerParallel parallel_;
  Ops<T>& ops_;
  Device& device_;
  std::vector<Part> parts_;
  std::function<void(const std::vector<GradientShard>&)> probe_;
  double last_lr_ = 0;
  int applied_steps_ = 0;
};

}  // namespace ted::train
