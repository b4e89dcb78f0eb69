// What one optimizer step sends, from first principles: for every collective kind and TED
// group, the calls and the bytes a rank sends and receives (the ledger's convention,
// ledger.hpp), derived from the model shape, the layout and the switches alone. The tests hold
// it to the ledger of real runs, exactly; the projection turns it into time on any cluster.
//
// Assumes a gating capacity computed from the formula (not dropless: there it depends on the
// data), one gating group per micro-batch (the trainer's rule), and fp32 elements unless
// element_bytes says otherwise (mixed precision: gradients fp32, or 16-bit with
// model.grad_dtype = the storage type).
#pragma once

#include <array>
#include <cstdint>

#include "ted/comm/ledger.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/model/config.hpp"
#include "ted/train/train_config.hpp"

namespace ted::projection {

struct StepShape {
  model::ModelConfig model;
  int micro_batch = 1;    // sequences per micro-batch
  int micro_batches = 1;  // per data-parallel rank per step
  Layout layout;
  train::ParallelConfig parallel;
  // Activations and the weight copies the kernels read: 4 (fp32) or 2 (bf16, fp16: mixed
  // precision, whose master weights and Adam state stay fp32).
  std::size_t element_bytes = 4;
  std::size_t master_bytes() const { return element_bytes < 4 ? 4 : element_bytes; }
  // Parameter gradients: the master type, or the storage type when model.grad_dtype names it
  // (16-bit gradients, reduced in 16-bit).
  bool storage_gradients() const { return model.grad_dtype != "fp32" && element_bytes < 4; }
  std::size_t grad_bytes() const { return storage_gradients() ? element_bytes : master_bytes(); }
};

// Elements of the flat parameter buffers on one rank: the dense part and the expert part, each
// padded to a multiple of its data group (as ParamSet lays them out).
struct ParameterParts {
  std::uint64_t dense = 0;
  std::uint64_t expert = 0;
};
ParameterParts parameter_parts(const model::ModelConfig& model, const Layout& layout,
                               bool split_experts);
// The elements of one block's tensors on one rank (unpadded): what a 16-bit gradient run stages
// in fp32 during that block's backward.
ParameterParts block_parameters(const model::ModelConfig& model, const Layout& layout,
                                bool split_experts, int layer);

struct Traffic {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_recv = 0;
};
using StepTraffic = std::array<std::array<Traffic, kGroupKindCount>, kCollectiveOpCount>;

// Per rank, one optimizer step, the four TED groups (tensor, expert, expert-data,
// non-expert-data). A group of one rank still counts its calls, as the ledger does.
StepTraffic step_traffic(const StepShape& shape);

const Traffic& at(const StepTraffic& traffic, CollectiveOp op, GroupKind group);

}  // namespace ted::projection
