// The plan of one optimizer step on one rank, from the model shape, the layout and the switches
// alone: every collective with its group and bytes, every GEMM with its shape, and the MoE
// exchange's geometry that sizes the buffers. The MoE layers' part comes from the plan the model
// executes (model/exchange_plan.hpp). The projection's traffic, compute and memory models read
// this plan; the tests hold its collectives to the ledger of real runs, call by call.
//
// With the learned gate (model.gate.workload = learned) it assumes even routing: a gating
// capacity computed from the formula (not dropless: there it depends on the data) and every
// capacity slot computed. Under a forced workload (routing/workload.hpp) it reads the assignment
// the runs make (step_load): the loaded expert group's capacity (dropless: its largest load) and
// the rows its straggler's experts compute. One gating group per micro-batch (the trainer's
// rule), and fp32 elements unless dtype says otherwise (mixed precision: gradients fp32, or
// 16-bit with 16-bit gradients, training.grad_dtype = the storage type).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/comm/ledger.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/model/config.hpp"
#include "ted/model/exchange_plan.hpp"
#include "ted/model/gpt_params.hpp"
#include "ted/train/train_config.hpp"

namespace ted::projection {

struct StepShape {
  model::ModelConfig model;
  int micro_batch = 1;    // sequences per micro-batch
  int micro_batches = 1;  // per data-parallel rank per step
  Layout layout;
  train::ParallelConfig parallel;
  // Activations and the weight copies the kernels read (run.dtype): fp32, or bf16, fp16 (mixed
  // precision, whose master weights and Adam state stay fp32).
  DataType dtype = DataType::f32;
  std::size_t element_bytes() const { return dtype_size(dtype); }
  std::size_t master_bytes() const { return element_bytes() < 4 ? 4 : element_bytes(); }
  // Parameter gradients: the master type, or the storage type when the model keeps 16-bit
  // gradients (reduced in 16-bit), as model::gradient_type decides.
  DataType gradient_type() const { return model::gradient_type(dtype, model.grad_dtype); }
  bool storage_gradients() const { return gradient_type() == dtype && element_bytes() < 4; }
  std::size_t grad_bytes() const { return dtype_size(gradient_type()); }
  // Under a forced routing workload: the optimizer step whose assignment the plan counts, and
  // whether the backend leaves the empty capacity slots out of the experts' GEMMs (the CPU
  // backend, through Routing::kept) or computes every slot (the CUDA backend, DeepSpeed-MoE).
  std::int64_t routing_step = 0;
  bool skip_empty_slots = false;
  // The MoE dispatch and combine as DeepSpeed's MOELayer runs them without Tutel (the paper's
  // runs, docs/projection.md): dense matmuls with the one-hot masks [N, E x C] instead of our
  // gather (time only, compute_time.cpp; the model runs the gather either way).
  bool einsum_dispatch = false;
};

// The shape the models read, from a training config under `layout`.
StepShape shape_of(const train::TrainConfig& train, const Layout& layout);

// The exchange of one MoE layer of a micro-batch, as tensor rank 0 runs it (the sizes are the
// same on every rank), at the formula's capacity, or at `capacity`.
model::ExchangePlan exchange_of(const StepShape& shape);
model::ExchangePlan exchange_of(const StepShape& shape, int capacity);

// One MoE layer of one micro-batch on the loaded expert group under a forced workload.
struct MoeLayerLoad {
  int capacity = 0;  // the exchange's C: the formula's, or dropless the group's largest load
  // [El] the rows each local expert of the group's straggler (the expert rank with the most
  // rows) computes, its Ep sources together: min(load, C) per source where the backend leaves
  // the empty slots out (ExchangePlan::used_rows), else every slot (Ep x expert_rows()).
  std::vector<int> expert_rows;
  std::int64_t dropped = 0;  // the group's choices past the capacity
};

// What a forced workload's assignment (routing::assign_experts on the step's global tokens,
// each token enumerated: the exact assignment the runs make) does to one optimizer step.
// Expert group d (its data coordinate) holds global micro-batches m Ep D + e + Ep d of its
// expert ranks e, as the trainer numbers them; every expert group waits at each all-to-all for
// its straggler, and the step for the slowest group: the one whose stragglers' rows add up to
// the most. Not forced (the learned gate): empty, and the plan assumes even routing.
struct StepLoad {
  bool forced = false;
  int data_index = 0;                            // the loaded expert group
  std::vector<std::vector<MoeLayerLoad>> micro;  // [micro-batch][layer], empty for dense layers
  // [layer][E] choices routed to each expert over the step's global batch, before drops
  // (StepRecord::expert_load); empty for dense layers.
  std::vector<std::vector<std::int64_t>> expert_load;
  std::int64_t dropped = 0;  // choices dropped over the global batch (every group)
  bool dropless = false;
  // The largest exchange capacity of the step (what the buffers hold at their peak).
  int largest_capacity() const;
};
StepLoad step_load(const StepShape& shape);
// The choices each expert draws in one gating group, [E]: micro-batch `micro` of expert rank
// `expert_rank` in expert group `data_index` at MoE layer `layer` (forced workloads only).
std::vector<int> group_load(const StepShape& shape, int layer, int data_index, int expert_rank,
                            int micro);
// The exchange at the step's largest capacity: what the buffers hold (memory.hpp).
model::ExchangePlan largest_exchange(const StepShape& shape);

// The model's parameter specs on one rank of `layout` (model/gpt_params.hpp: the list the model
// allocates), as tensor rank 0 and expert rank 0 hold them: every rank's shards are the same size.
model::GptParamSpecs param_specs(const model::ModelConfig& model, const Layout& layout,
                                 bool split_experts);
// The ranks that hold the same experts and reduce their gradients (the expert-data group of the
// ledger): D, or with experts whole on every tensor rank (split_experts false) T x D.
int expert_data_ranks(const Layout& layout, bool split_experts);
// Elements of the flat parameter buffers on one rank: the dense part and the expert part, each
// padded to a multiple of its data group (as ParamSet lays them out).
struct ParameterParts {
  std::uint64_t dense = 0;
  std::uint64_t expert = 0;
};
ParameterParts parameter_parts(const model::ModelConfig& model, const Layout& layout,
                               bool split_experts);

// `calls` collectives of one kind in one group, each with these bytes per rank (the ledger's
// convention, ledger.hpp). A group of one rank still counts its calls, as the ledger does.
struct PlannedCollective {
  CollectiveOp op;
  GroupKind group;
  std::uint64_t bytes_sent = 0;  // per call
  std::uint64_t bytes_recv = 0;
  std::uint64_t calls = 1;
};

// One GEMM shape: C[m, n] = A[m, k] B[k, n], `count` of them (a batched GEMM).
struct GemmShape {
  double m = 0, n = 0, k = 0, count = 1;
  double flops() const { return 2 * m * n * k * count; }
};

// Every collective of one optimizer step on one rank, on the four TED groups (tensor, expert,
// expert-data, non-expert-data), layer by layer, then the gradients' and weights'.
std::vector<PlannedCollective> step_collectives(const StepShape& shape);
// The GEMMs of one micro-batch's forward on one rank, every capacity slot computed; under a
// forced workload, micro-batch `micro`'s on the loaded rank: the experts' GEMMs at each
// local expert's rows (experts of equal rows batched together).
std::vector<GemmShape> forward_gemms(const StepShape& shape);
std::vector<GemmShape> forward_gemms(const StepShape& shape, const StepLoad& load, int micro);

}  // namespace ted::projection
