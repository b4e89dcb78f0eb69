// Peak memory per rank by category, from first principles (docs/algorithm.md sections 3-5):
// parameters, gradients and Adam state with ZeRO-1 sharding per data group, activations with or
// without checkpointing, the CAC stash, the communication buffers of the MoE exchange and the
// optimizer, and the optimizer's temporary spike with or without tiles. The tests hold it to
// the tracking allocator's peaks of real runs on the CPU backend (within 5%). With 16-bit
// elements (element_bytes 2) it is mixed precision as the trainer runs it: 16-bit weights,
// activations and messages; fp32 gradients, or 16-bit ones (model.grad_dtype, as DeepSpeed's
// 16-bit ZeRO-1), the kernels rounding each contribution into them; the fp32 master of this rank's
// shard with Adam's m and v (12 bytes an element); an fp32 gradient tile in the optimizer step.
#pragma once

#include <array>
#include <cstdint>

#include "ted/backend/memory.hpp"
#include "ted/projection/step.hpp"

namespace ted::projection {

struct MemoryEstimate {
  std::array<std::uint64_t, kMemoryCategoryCount> peak{};  // bytes per category
  // The projected peak of the step, what fit verdicts use: the persistent state (parameters,
  // gradients, Adam state) plus the larger of its two phases. Forward and backward hold the
  // activations, the CAC stash and the MoE exchange's buffers; the optimizer step holds its
  // temporary tile and its own communication buffers. Neither phase's memory outlives it.
  std::uint64_t total = 0;
  std::uint64_t upper_bound = 0;  // the categories' peaks added, as if every phase met at once
  // Of the activations, what the model keeps for backward at its largest (the batch's ids, the
  // checkpoints, a block's internals, the head's), without the gradients of activations and the
  // temporaries: GptModel::saved_peak_bytes, what DeepSpeed's count of saved tensors compares to.
  std::uint64_t activations_saved = 0;
  std::uint64_t of(MemoryCategory category) const {
    return peak[static_cast<std::size_t>(category)];
  }
};

MemoryEstimate step_memory(const StepShape& shape);

}  // namespace ted::projection
