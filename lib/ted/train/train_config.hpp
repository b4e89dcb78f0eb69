// Everything a training run reads: model, gating, optimizer, data, run length, output.
// YAML layout (every key optional; defaults below):
//   model:     vocab seq_len hidden heads layers ffn_mult experts expert_interval checkpoint
//              attention tie_embeddings dropout init_std
//   gating:    top_k capacity_factor min_capacity random_token_selection second_choice_noise
//              dropless aux_coeff
//   routing:   workload (learned | balanced | hot_experts | hot_rank | zipf | zero_load |
//              rotating: routing/workload.hpp) hot_experts hot_share zipf_s zero_experts
//   optimizer: lr min_lr warmup_steps weight_decay beta1 beta2 eps grad_clip
//   data:      source (synthetic | file | megatron) path (megatron: the dataset's prefix)
//              token_bytes (2 | 4) noise micro_batch micro_batches valid_fraction valid_path
//              (megatron's validation split: train/megatron_data.hpp)
//   training:  steps seed log_every csv grad_dtype (fp32 | run.dtype: 16-bit gradients, reduced
//              in 16-bit, as DeepSpeed's fp16 ZeRO-1) eval_every eval_batches save_dir
//              save_every save_keep resume load (checkpoints: run/checkpoint.hpp)
//   parallel:  tp ep dp (0: ranks / (tp * ep)) dtd cac reduce_scatter zero1 tile_elems
//              split_experts cac_all_reduce
//   run:       backend (cpu | cuda) dtype (fp32 | bf16 | fp16) comm (mpi | nccl) loss_scale
//              loss_scale_window cluster (the cluster file --check projects memory on)
#pragma once

#include <string>

#include "ted/comm/communicator.hpp"
#include "ted/core/config_schema.hpp"
#include "ted/device/device.hpp"
#include "ted/model/config.hpp"
#include "ted/model/exchange_plan.hpp"
#include "ted/train/optimizer.hpp"

namespace ted::train {

struct DataConfig {
  std::string source = "synthetic";
  std::string path;
  int token_bytes = 2;
  double noise = 0.1;     // synthetic only
  int micro_batch = 4;    // sequences per micro-batch (one gating group)
  int micro_batches = 1;  // accumulated per optimizer step
  // megatron only: the last documents of data.path held out as the validation split, a fraction
  // in [0, 0.5] (0: none); or valid_path, the prefix of a second dataset that is the split.
  double valid_fraction = 0;
  std::string valid_path;
};

// The TED layout and switches (docs/algorithm.md sections 3-5).
struct ParallelConfig {
  int tp = 1;
  int ep = 1;
  int dp = 0;
  bool dtd = false;
  bool cac = false;
  bool reduce_scatter = false;
  bool zero1 = true;
  std::int64_t tile_elems = 0;  // tiled optimizer step; 0 = the whole shard
  bool split_experts = true;    // experts tensor-parallel; false: each tensor rank 1/T of tokens
  bool cac_all_reduce = false;  // CAC also keeps the tensor all-reduce outputs (needs cac)
  // The MoE exchange in this many chunks along the capacity, each chunk's experts running while
  // the next chunk's all-to-all is in flight (model/moe.hpp); 1: no overlap.
  int overlap = 1;

  // The switches that shape the MoE exchange, as the model and the projection take them.
  model::ExchangeSwitches exchange() const { return {dtd, reduce_scatter, split_experts, overlap}; }
};

// Where and in what precision a run computes (backend/registry.hpp), parsed once, when the
// YAML and the overrides are read (TrainConfig::schema).
struct RunConfig {
  DeviceKind backend = DeviceKind::cpu;  // cpu | cuda
  DataType dtype = DataType::f32;        // fp32 | bf16 | fp16: activations and weight copies (mixed
                                         // precision keeps fp32 masters and Adam state)
  CommBackend comm = CommBackend::mpi;   // mpi (host memory, or GPU memory staged through it) |
                                         // nccl
  double loss_scale = 65536.0;           // fp16: the initial dynamic loss scale
  int loss_scale_window = 1000;          // fp16: clean steps before the scale doubles
  std::string cluster;  // a cluster file (experiments/clusters/): --check's memory fit
};

// Checkpoints (run/checkpoint.hpp): where, how often, how many, and where a run continues from.
struct CheckpointConfig {
  std::string save_dir;  // empty: no checkpoints
  int save_every = 0;    // a checkpoint every this many steps (0: only when stopped by a signal)
  int save_keep = 2;     // the newest this many complete checkpoints are kept
  bool resume = false;   // continue from save_dir's newest complete checkpoint, if it has one
  std::string load;      // continue from this checkpoint folder
};

struct TrainConfig {
  model::ModelConfig model;
  ParallelConfig parallel;
  RunConfig run;
  OptimizerConfig optimizer;
  DataConfig data;
  int steps = 100;
  int log_every = 1;
  std::string csv;  // empty: results/train/<config name>.csv
  // The held-out loss every eval_every steps (0: never) and after the last, over eval_batches
  // global batches of the held-out split (Trainer::evaluate).
  int eval_every = 0;
  int eval_batches = 1;
  CheckpointConfig checkpoint;

  // The keys above, bound to this object's fields.
  ConfigSchema schema();
  // Checks every rule (model, gating, optimizer, data, run), ConfigError naming the key.
  void validate() const;
  // ConfigError when the model does not split over `tensor` x `expert` ranks with these
  // switches (model::check_layout).
  void check_layout(int tensor, int expert) const;
};

}  // namespace ted::train
