// The experiments' YAML config and the systems they compare (the harness: harness.hpp).
//
// YAML (every section optional except what an experiment needs):
//   experiment: ablation | weak_scaling | strong_scaling | memory | convergence   (must match the
//               program)
//   model, gating, optimizer, data: as the training driver (lib/ted/train/train_config.hpp)
//   run:     warmup iters csv; rounds (the points timed in interleaved rounds, each round
//            running every point once with its warm-up and iters, the order rotated by one
//            each round: a disturbance of the machine lasting seconds lands on every system
//            alike; every round is a row); wait (blocking | sleep: how a rank waits in a
//            collective, comm/mpi_communicator.hpp MpiWait); and as the training driver: backend
//            (cpu | cuda), dtype (fp32 | bf16 | fp16), comm (mpi | nccl), loss_scale,
//            loss_scale_window
//   layout:  tp ep dp                    the layout of ablation and memory
//   systems: [ted-baseline, ted+dtd, ...] (see parse_system)
//   data:    global_batch  sequences per optimizer step of the whole job (0: data.micro_batches
//            per data-parallel rank); each point's micro-batches = global_batch / (micro_batch
//            x Ep x D), which must divide
//   sweep:   ranks tp ep hidden heads layers experts global_batch tile   (lists, one entry per
//            point; tile: parallel.tile_elems, 0 = untiled)
//            workloads dropless   (lists, crossed with every point of the plan, not one entry
//            per point: each point runs once per routing.workload in workloads and per
//            gating.dropless in dropless; default: the YAML's routing.workload and
//            gating.dropless alone, one run per point)
//   family:  hidden heads layers                 (lists) the memory experiment's base models
//   memory:  budget_bytes
//   largest: gpus max_tp max_experts   the memory experiment's largest trainable model: for each
//            GPU count and system, the family model x power-of-two experts (Ep = experts) x
//            tensor degree with the most parameters whose projected peak fits budget_bytes
//   projection: dispatch   the MoE dispatch and combine `ted_project` counts: gather (ours,
//            what the suite's model runs; the default) or einsum (DeepSpeed's MOELayer without
//            Tutel, as the paper ran it: one-hot matmuls over [tokens, experts x capacity],
//            projection::StepShape::einsum_dispatch). Measured runs run ours whatever it says.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/comm/mpi_communicator.hpp"
#include "ted/train/train_config.hpp"

namespace ted::experiments {

struct ExperimentConfig {
  std::string experiment;
  train::TrainConfig train;  // model, gating, optimizer, data, run (train.steps is unused)
  int warmup = 1;
  int iters = 5;
  int rounds = 1;
  MpiWait wait = MpiWait::blocking;  // run.wait: blocking | sleep
  std::string backend;  // the rows' backend column: run.backend, plus what runs it (emulated)
  std::string csv;
  int tp = 1, ep = 1, dp = 0;
  std::vector<std::string> systems;
  std::vector<int> sweep_ranks, sweep_tp, sweep_ep, sweep_hidden, sweep_heads, sweep_layers;
  std::vector<int> sweep_experts, sweep_global_batch, sweep_tile;
  std::vector<std::string> sweep_workloads;                     // routing.workload names
  std::vector<std::string> sweep_dropless;                      // "false" / "true"
  std::vector<int> family_hidden, family_heads, family_layers;  // memory: growing base models
  std::int64_t budget_bytes = 0;
  int global_batch = 0;  // data.global_batch
  std::vector<int> largest_gpus;
  int largest_max_tp = 8, largest_max_experts = 128;
  enum class Dispatch { gather, einsum } dispatch = Dispatch::gather;  // projection.dispatch

  ConfigSchema schema();
};

// Loads the YAML and the --set overrides, and checks everything every experiment needs: the
// experiment name, run.backend/dtype/comm, the systems' names, and that the sweep lists have
// one entry per point. Errors name the file and the key (ConfigError). Whether this machine can
// run the backend is checked by the program (backend/registry.hpp), not here, so a CUDA
// config loads anywhere (the projection runs nothing). `experiment` empty: any.
ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             const std::string& experiment);

// A system of the paper (docs/algorithm.md section 3): which layout family and which switches.
//   deepspeed-moe   T = 1 (expert + data parallelism only)
//   ted-baseline    TED without the optimisations
//   ted             TED with DTD and CAC
//   ted+dtd, ted+cac, ted+dtd+cac, ted+dtd+cac+rs   the ablation's steps (rs: reduce-scatter)
//   ...+tile, ...+bf16, ...+fp16   also the tiled optimizer step (parallel.tile_elems, or 64 Ki
//                                  elements where it is 0) and mixed precision (run.dtype), as
//                                  the convergence experiment runs "every switch on"
struct System {
  std::string name;
  bool tensor_parallel = true;  // false: T forced to 1
  bool dtd = false, cac = false, reduce_scatter = false;
  // The MoE exchange in chunks (parallel.overlap): 1 off; 0 asks for parallel.overlap's value
  // (at least 2).
  int overlap = 1;
  bool tile = false;  // the tiled optimizer step (make_point)
  std::string dtype;  // "bf16" or "fp16": run.dtype for this system; "": the YAML's
};
System parse_system(const std::string& name, const std::string& where);

}  // namespace ted::experiments
