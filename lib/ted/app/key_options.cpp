#include "ted/app/key_options.hpp"

namespace ted {

const std::vector<KeyOption>& key_options() {
  constexpr unsigned T = kTrainOption, X = kExperimentOption, both = T | X;
  static const std::vector<KeyOption> table = {
      {"--steps", "training.steps", "optimizer steps (training.steps)", T, "INT"},
      {"--iters", "run.iters", "timed iterations (run.iters; 0: one untimed step)", X, "INT"},
      {"--rounds", "run.rounds",
       "interleaved rounds: every point timed once per round, the order rotated (run.rounds)", X,
       "INT"},
      {"--csv", "training.csv", "CSV path (training.csv; default results/local/train/<config>.csv)",
       T},
      {"--csv", "run.csv",
       "CSV to append to (run.csv; default results/local/<experiment>/<config>.csv)", X},
      {"--eval-every", "training.eval_every",
       "the held-out loss every N steps (training.eval_every; 0: never)", T, "INT"},
      {"--save-dir", "training.save_dir", "checkpoint folder (training.save_dir)", T, "DIR"},
      {"--save-every", "training.save_every",
       "a checkpoint every N steps (training.save_every; 0: only when stopped by a signal)", T,
       "INT"},
      {"--resume", "training.resume",
       "continue from the newest checkpoint in training.save_dir, if there is one", T, "", "true"},
      {"--load", "training.load", "continue from this checkpoint folder (training.load)", T, "DIR"},
      {"--tp", "parallel.tp", "tensor-parallel size T (parallel.tp)", T, "INT"},
      {"--ep", "parallel.ep", "expert-parallel size Ep (parallel.ep)", T, "INT"},
      {"--dp", "parallel.dp", "data-parallel size D (parallel.dp; 0: ranks / (T * Ep))", T, "INT"},
      {"--tile", "parallel.tile_elems",
       "tiled optimizer step: elements per tile (parallel.tile_elems)", T, "INT"},
      {"--overlap", "parallel.overlap",
       "the MoE exchange in N chunks, overlapping all-to-alls and experts (parallel.overlap; 1: "
       "off)",
       T, "INT"},
      {"--checkpoint", "model.checkpoint", "activation checkpointing (model.checkpoint)", T, "",
       "true"},
      {"--dtd", "parallel.dtd", "Duplicate Token Dropping (parallel.dtd)", T, "", "true"},
      {"--cac", "parallel.cac", "communication-aware checkpointing (parallel.cac)", T, "", "true"},
      {"--cac-all-reduce", "parallel.cac_all_reduce",
       "CAC also reuses the tensor all-reduce outputs (parallel.cac_all_reduce)", T, "", "true"},
      {"--reduce-scatter", "parallel.reduce_scatter",
       "reduce-scatter instead of all-reduce + slice in the expert block (with --dtd)", T, "",
       "true"},
      {"--no-split-experts", "parallel.split_experts",
       "experts not tensor-parallel: each tensor rank takes 1/T of the tokens", T, "", "false"},
      {"--no-zero1", "parallel.zero1", "replicate the optimizer state (parallel.zero1)", T, "",
       "false"},
      {"--backend", "run.backend", "cpu or cuda (run.backend)", both},
      {"--dtype", "run.dtype", "fp32, bf16 or fp16 (run.dtype; 16-bit: fp32 masters)", both},
      {"--comm", "run.comm", "mpi or nccl: what carries device buffers (run.comm)", both},
  };
  return table;
}

KeyOptions::KeyOptions(CLI::App& app, unsigned users) {
  for (const auto& option : key_options())
    if (option.users & users) {
      bound_.emplace_back();
      bound_.back().option = &option;
    }
  for (auto& b : bound_) {  // bound_ no longer grows: its elements stay where CLI11 writes
    if (b.option->flag_value)
      b.cli = app.add_flag(b.option->name, b.set, b.option->help);
    else
      b.cli = app.add_option(b.option->name, b.value, b.option->help)->type_name(b.option->type);
  }
}

std::vector<std::string> KeyOptions::assignments() const {
  std::vector<std::string> all;
  for (const auto& b : bound_) {
    if (b.cli->count() == 0) continue;
    all.push_back(std::string(b.option->key) + "=" +
                  (b.option->flag_value ? b.option->flag_value : b.value));
  }
  return all;
}

}  // namespace ted
