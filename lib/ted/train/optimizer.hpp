// AdamW over a ParamSet's flat buffers, with global gradient-norm clipping and a learning-rate
// schedule of linear warm-up then cosine decay to min_lr. Weight decay applies to the tensors
// marked `decay` (matrices), not to biases, norms and embeddings.
//
// On a TED grid (OptimizerParallel) each part of the flat buffers is reduced over its own data
// group: dense tensors over the non-expert-data group (Ep x D), expert tensors over the
// expert-data group (D). With ZeRO stage 1 the gradients are reduce-scattered, each rank keeps
// Adam state for and updates its 1/n shard only, and the updated shards are all-gathered.
// The step walks its elements in tiles of at most tile_elems (0: one tile), so the temporary
// gradient copy (the fp32 upcast of mixed precision, here the unscaled and clipped gradient)
// is bounded by a tile. The clipping norm counts every distinct element of the model once.
#pragma once

#include <vector>

#include "ted/backend/tensor.hpp"
#include "ted/comm/communicator.hpp"
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

struct OptimizerParallel {
  Communicator* dense_group = nullptr;   // non-expert-data group; null: one process
  Communicator* expert_group = nullptr;  // expert-data group
  Communicator* world = nullptr;         // for the global gradient norm
  // Experts not split over T: their gradients are summed over the tensor group first.
  Communicator* expert_tensor_group = nullptr;
  bool tensor_rank0 = true;  // this rank counts the tensor-replicated tensors in the norm
  bool zero1 = true;
  std::size_t tile_elems = 0;  // 0: the whole shard at once
};

template <typename T>
class AdamW {
 public:
  AdamW(model::ParamSet<T>& params, const OptimizerConfig& config, Device& device,
        const OptimizerParallel& parallel = {});
  // Clips, updates every parameter, returns the gradient norm before clipping.
  double step(int step, int total_steps);
  double last_lr() const { return last_lr_; }

 private:
  struct Part {  // the dense or the expert part of the flat buffers, as this rank updates it
    Communicator* group;
    std::size_t begin, size;  // the whole part in the flat buffers
    std::size_t mine, count;  // the elements this rank updates (its shard, or all)
    bool counts_norm;         // this rank adds its elements to the norm
    Tensor<T> m, v;
  };
  struct Segment {  // a run of elements with the same weight decay and norm ownership
    std::size_t begin, end;
    bool decay, counted;
  };

  model::ParamSet<T>& params_;
  OptimizerConfig config_;
  OptimizerParallel parallel_;
  Device& device_;
  std::vector<Part> parts_;
  std::vector<Segment> segments_;
  double last_lr_ = 0;
};

}  // namespace ted::train
