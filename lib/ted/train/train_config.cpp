#include "ted/train/train_config.hpp"

#include <cmath>
#include <filesystem>
#include <string>

#include "ted/core/error.hpp"
#include "ted/model/gpt.hpp"
#include "ted/train/megatron_data.hpp"

namespace ted::train {

ConfigSchema TrainConfig::schema() {
  ConfigSchema s;
  auto& m = model;
  s.add("model.vocab", &m.vocab);
  s.add("model.seq_len", &m.seq_len);
  s.add("model.hidden", &m.hidden);
  s.add("model.heads", &m.heads);
  s.add("model.layers", &m.layers);
  s.add("model.ffn_mult", &m.ffn_mult);
  s.add("model.experts", &m.gate.experts);
  s.add("model.expert_interval", &m.expert_interval);
  s.add("model.checkpoint", &m.checkpoint);
  s.add_enum("model.attention", &m.attention,
             std::vector<std::string>(std::begin(model::kAttentionNames),
                                      std::end(model::kAttentionNames)));
  s.add("model.tie_embeddings", &m.tie_embeddings);
  s.add("model.dropout", &m.dropout);
  s.add("model.init_std", &m.init_std);
  s.add("gating.top_k", &m.gate.top_k);
  s.add("gating.capacity_factor", &m.gate.capacity_factor);
  s.add("gating.min_capacity", &m.gate.min_capacity);
  s.add("gating.random_token_selection", &m.gate.random_token_selection);
  s.add("gating.second_choice_noise", &m.gate.second_choice_noise);
  s.add("gating.dropless", &m.gate.dropless);
  s.add("gating.aux_coeff", &m.gate.aux_coeff);
  s.add("optimizer.lr", &optimizer.lr);
  s.add("optimizer.min_lr", &optimizer.min_lr);
  s.add("optimizer.warmup_steps", &optimizer.warmup_steps);
  s.add("optimizer.weight_decay", &optimizer.weight_decay);
  s.add("optimizer.beta1", &optimizer.beta1);
  s.add("optimizer.beta2", &optimizer.beta2);
  s.add("optimizer.eps", &optimizer.eps);
  s.add("optimizer.grad_clip", &optimizer.grad_clip);
  s.add("data.source", &data.source);
  s.add_prefix("data.path", &data.path, ".idx");  // a file, or megatron's prefix
  s.add("data.token_bytes", &data.token_bytes);
  s.add("data.noise", &data.noise);
  s.add("data.micro_batch", &data.micro_batch);
  s.add("data.micro_batches", &data.micro_batches);
  s.add("data.valid_fraction", &data.valid_fraction);
  s.add_prefix("data.valid_path", &data.valid_path, ".idx");
  std::vector<std::string> workloads;
  for (int i = 0; i < routing::kWorkloadKindCount; ++i)
    workloads.emplace_back(routing::to_string(static_cast<routing::WorkloadKind>(i)));
  s.add_enum("routing.workload", &m.gate.workload.kind, workloads);
  s.add("routing.hot_experts", &m.gate.workload.hot_experts);
  s.add("routing.hot_share", &m.gate.workload.hot_share);
  s.add("routing.zipf_s", &m.gate.workload.zipf_s);
  s.add("routing.zero_experts", &m.gate.workload.zero_experts);
  s.add("training.steps", &steps);
  s.add("training.seed", &m.seed);
  s.add("training.log_every", &log_every);
  s.add("training.csv", &csv);
  s.add("training.eval_every", &eval_every);
  s.add("training.eval_batches", &eval_batches);
  s.add("training.save_dir", &checkpoint.save_dir);
  s.add("training.save_every", &checkpoint.save_every);
  s.add("training.save_keep", &checkpoint.save_keep);
  s.add("training.resume", &checkpoint.resume);
  s.add("training.load", &checkpoint.load);
  s.add("training.grad_dtype", &m.grad_dtype, {DataType::f32, DataType::bf16, DataType::f16});
  s.add("parallel.tp", &parallel.tp);
  s.add("parallel.ep", &parallel.ep);
  s.add("parallel.dp", &parallel.dp);
  s.add("parallel.dtd", &parallel.dtd);
  s.add("parallel.cac", &parallel.cac);
  s.add("parallel.cac_all_reduce", &parallel.cac_all_reduce);
  s.add("parallel.reduce_scatter", &parallel.reduce_scatter);
  s.add("parallel.zero1", &parallel.zero1);
  s.add("parallel.tile_elems", &parallel.tile_elems);
  s.add("parallel.split_experts", &parallel.split_experts);
  s.add("parallel.overlap", &parallel.overlap);
  s.add_enum("run.backend", &run.backend,
             {std::string(to_string(DeviceKind::cpu)), std::string(to_string(DeviceKind::cuda))});
  s.add("run.dtype", &run.dtype, {DataType::f32, DataType::bf16, DataType::f16});
  s.add_enum("run.comm", &run.comm,
             {std::string(to_string(CommBackend::mpi)), std::string(to_string(CommBackend::nccl))});
  s.add("run.loss_scale", &run.loss_scale);
  s.add("run.loss_scale_window", &run.loss_scale_window);
  s.add_path("run.cluster", &run.cluster);
  return s;
}

void TrainConfig::check_layout(int tensor, int expert) const {
  model::check_layout(model, tensor, expert, parallel.exchange(), parallel.cac,
                      parallel.cac_all_reduce);
}

void TrainConfig::validate() const {
  model.validate();
  optimizer.validate();
  const bool megatron = data.source == "megatron";
  if (data.source != "synthetic" && data.source != "file" && !megatron)
    throw ConfigError("data.source must be synthetic, file or megatron, got '" + data.source + "'");
  if (data.source == "file" && data.path.empty())
    throw ConfigError("data.path must name a token file when data.source is file");
  if (data.source == "file") check_readable_file(data.path, "data.path");
  if (megatron && data.path.empty())
    throw ConfigError(
        "data.path must name a Megatron dataset's prefix (<prefix>.bin and <prefix>.idx) when "
        "data.source is megatron");
  if (megatron) check_megatron_files(data.path, "data.path");
  if (!(data.valid_fraction >= 0 && data.valid_fraction <= 0.5))
    throw ConfigError("data.valid_fraction must be in [0, 0.5], got " +
                      std::to_string(data.valid_fraction));
  if (!megatron && (data.valid_fraction > 0 || !data.valid_path.empty()))
    throw ConfigError(
        std::string(data.valid_fraction > 0 ? "data.valid_fraction" : "data.valid_path") +
        " splits a Megatron dataset: it needs data.source megatron, got '" + data.source + "'");
  if (data.valid_fraction > 0 && !data.valid_path.empty())
    throw ConfigError(
        "data.valid_fraction and data.valid_path both name the validation split: give one "
        "(valid_fraction 0 with valid_path)");
  if (!data.valid_path.empty()) check_megatron_files(data.valid_path, "data.valid_path");
  if (data.token_bytes != 2 && data.token_bytes != 4)
    throw ConfigError("data.token_bytes must be 2 or 4, got " + std::to_string(data.token_bytes));
  at_least(data.micro_batch, 1, "data.micro_batch");
  at_least(data.micro_batches, 1, "data.micro_batches");
  if (data.micro_batch > (1 << 20) || data.micro_batches > (1 << 20))
    throw ConfigError("data.micro_batch and data.micro_batches must be at most 2^20");
  model.validate_batch(data.micro_batch);
  if (!(data.noise >= 0 && data.noise <= 1))
    throw ConfigError("data.noise must be in [0, 1], got " + std::to_string(data.noise));
  at_least(steps, 1, "training.steps");
  at_least(log_every, 1, "training.log_every");
  at_least(eval_every, 0, "training.eval_every (0: never)");
  at_least(eval_batches, 1, "training.eval_batches");
  if (eval_every > 0 && data.source == "file")
    throw ConfigError("training.eval_every needs a held-out split, and data.source file has none");
  if (eval_every > 0 && megatron && data.valid_fraction == 0 && data.valid_path.empty())
    throw ConfigError(
        "training.eval_every needs a held-out split: data.source megatron has one with "
        "data.valid_fraction or data.valid_path");
  at_least(checkpoint.save_every, 0, "training.save_every (0: only when stopped by a signal)");
  at_least(checkpoint.save_keep, 1, "training.save_keep");
  if (checkpoint.save_every > 0 && checkpoint.save_dir.empty())
    throw ConfigError("training.save_every needs training.save_dir, the folder to save into");
  if (checkpoint.resume && checkpoint.save_dir.empty())
    throw ConfigError("training.resume needs training.save_dir, the folder to resume from");
  if (checkpoint.resume && !checkpoint.load.empty())
    throw ConfigError(
        "training.resume and training.load both say where to continue from: give one");
  if (!checkpoint.load.empty() && !std::filesystem::is_directory(checkpoint.load))
    throw ConfigError("training.load: '" + checkpoint.load + "' is not a checkpoint folder");
  at_least(parallel.tp, 1, "parallel.tp");
  at_least(parallel.ep, 1, "parallel.ep");
  at_least(parallel.dp, 0, "parallel.dp (0: the ranks over tp x ep)");
  at_least(parallel.tile_elems, 0, "parallel.tile_elems (0: the whole shard)");
  at_least(parallel.overlap, 1, "parallel.overlap (1: no overlap)");
  if (run.comm == CommBackend::nccl && run.backend != DeviceKind::cuda)
    throw ConfigError("run.comm nccl carries GPU memory: it needs run.backend cuda");
  if (!(run.loss_scale > 0) || !std::isfinite(run.loss_scale))
    throw ConfigError("run.loss_scale must be a positive finite number");
  at_least(run.loss_scale_window, 1, "run.loss_scale_window");
  model::gradient_type(run.dtype, model.grad_dtype);  // ConfigError unless fp32 or run.dtype
  if (!run.cluster.empty()) check_readable_file(run.cluster, "run.cluster");
}

}  // namespace ted::train
