// ted_train: trains the MoE GPT on one process (the reference) or on G MPI ranks under a TED
// layout, on the CPU or a GPU (--backend), in fp32 or mixed precision (--dtype bf16|fp16), with
// device buffers carried by MPI or NCCL (--comm), configured by a YAML file with command-line
// overrides (every option is a key of the config, judged by its rules; --check only validates).
// Rank 0 prints one line per step and writes a CSV of the steps (atomically, at the end, or at
// a failed step with the steps before it) with the bytes each collective kind moved in each group
// (from the ledger), the backend, communicator and device, the git revision and the command line;
// the run ends with the parameter fingerprint (sum of squares of all parameters over the whole
// layout), which equals the single-process run's.
//
//   build/apps/ted_train -c experiments/train/tiny-cpu.yaml
//   mpirun -np 8 --oversubscribe build/apps/ted_train -c experiments/train/tiny-cpu.yaml \
//       --tp 2 --ep 2 --dp 2 --dtd --checkpoint --cac
//   build/apps/ted_train -c experiments/train/tiny-cpu.yaml --backend cuda --dtype bf16
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ted/app/app_main.hpp"
#include "ted/app/check.hpp"
#include "ted/backend/memory.hpp"
#include "ted/backend/registry.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/parallel.hpp"
#include "ted/core/units.hpp"
#include "ted/device/device.hpp"
#include "ted/grid/ted_groups.hpp"
#include "ted/model/gpt.hpp"
#include "ted/projection/fit.hpp"
#include "ted/projection/traffic.hpp"
#include "ted/train/trainer.hpp"

namespace {

constexpr ted::CollectiveOp kLedgerOps[] = {
    ted::CollectiveOp::all_reduce, ted::CollectiveOp::all_gather, ted::CollectiveOp::reduce_scatter,
    ted::CollectiveOp::all_to_all};
constexpr ted::GroupKind kLedgerGroups[] = {ted::GroupKind::tensor, ted::GroupKind::expert,
                                            ted::GroupKind::expert_data,
                                            ted::GroupKind::nonexpert_data};

const char* on_off(bool value) {
  return value ? "on" : "off";
}

std::string progress_bar(int done, int total, int width = 20) {
  int filled = total > 0 ? done * width / total : width;
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "TED training of the MoE GPT from a YAML config, on CPU or GPU ranks: measures per step "
      "the loss, gradient norm, time and the bytes each collective moved (CSV), and ends "
      "with the parameter fingerprint",
      "ted_train"};
  std::string config_path;
  std::vector<std::string> overrides;
  int steps = 0, tensor = 0, expert = 0, data = 0;
  std::int64_t tile = 0;
  int overlap = 1;
  std::string csv_path, backend, dtype, comm;
  ted::CheckMode check;
  // Every option is a --set of one key, so the config's rules judge it (a negative --steps is
  // refused like a negative training.steps, never ignored).
  struct Flag {
    const char* name;
    const char* assignment;
    const char* help;
    bool value = false;
  };
  Flag flags[] = {
      {"--checkpoint", "model.checkpoint=true", "activation checkpointing (model.checkpoint)"},
      {"--dtd", "parallel.dtd=true", "Duplicate Token Dropping (parallel.dtd)"},
      {"--cac", "parallel.cac=true", "communication-aware checkpointing (parallel.cac)"},
      {"--cac-all-reduce", "parallel.cac_all_reduce=true",
       "CAC also reuses the tensor all-reduce outputs (parallel.cac_all_reduce)"},
      {"--reduce-scatter", "parallel.reduce_scatter=true",
       "reduce-scatter instead of all-reduce + slice in the expert block (with --dtd)"},
      {"--no-split-experts", "parallel.split_experts=false",
       "experts not tensor-parallel: each tensor rank takes 1/T of the tokens"},
      {"--no-zero1", "parallel.zero1=false", "replicate the optimizer state (parallel.zero1)"},
  };
  app.add_option("-c,--config", config_path, "YAML config (see experiments/train/)")->required();
  app.add_option("--set", overrides, "override a key: section.key=value (repeatable)");
  app.add_option("--steps", steps, "optimizer steps (training.steps)");
  app.add_option("--csv", csv_path,
                 "CSV path (training.csv; default results/local/train/<config>.csv)");
  app.add_option("--tp", tensor, "tensor-parallel size T (parallel.tp)");
  app.add_option("--ep", expert, "expert-parallel size Ep (parallel.ep)");
  app.add_option("--dp", data, "data-parallel size D (parallel.dp; 0: ranks / (T * Ep))");
  app.add_option("--tile", tile, "tiled optimizer step: elements per tile (parallel.tile_elems)");
  app.add_option("--overlap", overlap,
                 "the MoE exchange in N chunks, overlapping all-to-alls and experts "
                 "(parallel.overlap; 1: off)");
  for (auto& flag : flags) app.add_flag(flag.name, flag.value, flag.help);
  app.add_option("--backend", backend, "cpu or cuda (run.backend)");
  app.add_option("--dtype", dtype, "fp32, bf16 or fp16 (run.dtype; 16-bit: fp32 masters)");
  app.add_option("--comm", comm, "mpi or nccl: what carries device buffers (run.comm)");
  ted::add_check_options(app, check);

  return ted::run_app(
      argc, argv, app,
      [&](ted::MpiSession& mpi) {
        auto given = [&](const char* name) { return app.count(name) > 0; };
        if (given("--steps")) overrides.push_back("training.steps=" + std::to_string(steps));
        if (given("--csv")) overrides.push_back("training.csv=" + csv_path);
        if (given("--tp")) overrides.push_back("parallel.tp=" + std::to_string(tensor));
        if (given("--ep")) overrides.push_back("parallel.ep=" + std::to_string(expert));
        if (given("--dp")) overrides.push_back("parallel.dp=" + std::to_string(data));
        if (given("--tile")) overrides.push_back("parallel.tile_elems=" + std::to_string(tile));
        if (given("--overlap")) overrides.push_back("parallel.overlap=" + std::to_string(overlap));
        for (const auto& flag : flags)
          if (flag.value) overrides.push_back(flag.assignment);
        if (given("--backend")) overrides.push_back("run.backend=" + backend);
        if (given("--dtype")) overrides.push_back("run.dtype=" + dtype);
        if (given("--comm")) overrides.push_back("run.comm=" + comm);

        ted::train::TrainConfig config;
        ted::ConfigSchema schema = config.schema();
        schema.load_yaml(config_path);
        for (const auto& assignment : overrides) schema.set(assignment);
        const std::string where = ted::config_origin(config_path, overrides);
        try {
          config.validate();
        } catch (const ted::ConfigError& e) {
          throw ted::ConfigError(where + ": " + e.what());
        }
        if (config.csv.empty())
          config.csv =
              "results/local/train/" + std::filesystem::path(config_path).stem().string() + ".csv";
        try {
          ted::check_output_path(config.csv);
        } catch (const ted::ConfigError& e) {
          throw ted::ConfigError(where + ": key 'training.csv': " + e.what());
        }
        auto& parallel = config.parallel;
        const int ranks = check.enabled ? check.ranks_for(mpi.world_size()) : mpi.world_size();
        ted::Layout layout;
        try {
          layout = ted::resolve_layout(ranks, parallel.tp, parallel.ep, parallel.dp);
        } catch (const ted::ConfigError& e) {
          throw ted::ConfigError(where + ": keys 'parallel.tp/ep/dp': " + e.what());
        }
        parallel.dp = layout.data;
        try {
          ted::model::check_layout(config.model, layout.tensor, layout.expert, parallel.dtd,
                                   parallel.reduce_scatter, parallel.cac, parallel.cac_all_reduce);
        } catch (const ted::ConfigError& e) {
          throw ted::ConfigError(where + " on " + layout.to_string() + ": " + e.what());
        }
        const std::uint64_t need = ted::projection::projected_peak(config, layout);
        if (check.enabled)
          return ted::report_check("ted_train", where, config.run, ranks, layout, need,
                                   mpi.world_rank() == 0);
        const bool rank0 = mpi.world_rank() == 0;
        const auto device_kind = ted::parse_device_kind(config.run.backend);
        const auto comm_kind = ted::parse_comm_backend(config.run.comm);
        try {
          ted::require_backend(device_kind, comm_kind, MPI_COMM_WORLD);
        } catch (const ted::ConfigError& e) {
          throw ted::ConfigError(config_path + ": " + e.what());
        }

        auto base = ted::make_device(device_kind);
        // Before anything is allocated, identically on every rank: does the projected peak fit?
        const auto fit = ted::projection::agree_memory_fit(need, base->name(), base->free_bytes(),
                                                           MPI_COMM_WORLD);
        if (!fit.fits) throw ted::ConfigError(where + ": does not fit: " + fit.text);
        ted::TrackingDevice tracked(*base);  // peak bytes per category, for the CSV
        ted::Device* device = &tracked;
        auto control = ted::MpiCommunicator::world(nullptr);
        auto world = ted::make_device_communicator(comm_kind, tracked, MPI_COMM_WORLD, nullptr);
        ted::ProcessGrid grid(mpi.world_size(), layout);
        ted::TedGroups groups(*control, *world, grid);
        ted::Ledger ledger;
        for (auto kind : kLedgerGroups) groups.group(kind).set_ledger(&ledger);
        // One process: the reference path, no communicators at all.
        ted::train::Trainer trainer(config, *device, mpi.world_size() > 1 ? &groups : nullptr);
        const auto& m = config.model;
        if (rank0) {
          std::printf("# ted_train %s: %s\n", std::string(ted::git_revision()).c_str(),
                      config_path.c_str());
          // The whole model's parameters (one rank's parts when nothing is split), and what
          // rank 0 holds of them under this layout.
          const auto whole = ted::projection::parameter_parts(m, ted::Layout{1, 1, 1}, true);
          std::printf(
              "# model: vocab %d, seq %d, hidden %d, heads %d, layers %d, %d experts every %d "
              "blocks, top-%d, cf %.2f; %llu parameters (%zu on rank 0)\n",
              m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.gate.experts, m.expert_interval,
              m.gate.top_k, m.gate.capacity_factor,
              static_cast<unsigned long long>(whole.dense + whole.expert),
              trainer.params().total());
          std::printf("# data: %s; global batch %d x %d x %d sequences; checkpointing %s\n",
                      trainer.source().describe().c_str(), config.data.micro_batch,
                      config.data.micro_batches, layout.expert * layout.data,
                      m.checkpoint ? "on" : "off");
          std::printf(
              "# layout %s on %d ranks; dtd %s (capacity padded to a multiple of T), cac %s, "
              "reduce-scatter %s, zero-1 %s, optimizer tile %lld, overlap %d\n",
              layout.to_string().c_str(), mpi.world_size(), on_off(parallel.dtd),
              on_off(parallel.cac), on_off(parallel.reduce_scatter), on_off(parallel.zero1),
              static_cast<long long>(parallel.tile_elems), parallel.overlap);
          std::printf("# backend %s on %s, %s%s, device buffers over %s, attention %s\n",
                      config.run.backend.c_str(), base->name().c_str(), config.run.dtype.c_str(),
                      config.run.dtype == "fp32" ? "" : " (fp32 masters, gradients and Adam state)",
                      world->name().c_str(), trainer.attention().c_str());
          std::printf(
              "# cpu threads per rank: %d (the CPUs of its affinity mask, shared among the "
              "ranks started unbound on this machine; TED_NUM_THREADS sets it)\n",
              ted::parallel_threads());
        }

        std::vector<std::string> columns = {"step",
                                            "loss",
                                            "lm_loss",
                                            "aux_loss",
                                            "lr",
                                            "grad_norm",
                                            "dropped",
                                            "seconds",
                                            "tokens_per_s",
                                            "gflops_per_s",
                                            "G",
                                            "T",
                                            "Ep",
                                            "D",
                                            "dtd",
                                            "cac",
                                            "reduce_scatter",
                                            "zero1",
                                            "tile_elems",
                                            "backend",
                                            "dtype",
                                            "grad_dtype",
                                            "comm",
                                            "device",
                                            "loss_scale",
                                            "skipped"};
        for (auto op : kLedgerOps)
          for (auto kind : kLedgerGroups)
            columns.push_back(std::string(ted::to_string(op)) + "_" +
                              std::string(ted::to_string(kind)) + "_bytes");
        for (std::size_t c = 0; c < ted::kMemoryCategoryCount; ++c)
          columns.push_back("peak_" +
                            std::string(ted::to_string(static_cast<ted::MemoryCategory>(c))) +
                            "_bytes");
        for (const char* name : {"fingerprint", "git_revision", "command", "attention"})
          columns.push_back(name);
        ted::CsvTable table(columns);
        const std::string command = ted::command_line(argc, argv);
        double first_loss = 0, last_loss = 0;
        for (int step = 0; step < config.steps; ++step) {
          ledger.clear();
          auto r = trainer.step(step);
          if (!std::isfinite(r.loss)) {  // the same on every rank: the loss is reduced over all
            if (rank0 && table.rows() > 0)
              table.write_atomic(config.csv);  // keep what was measured
            throw ted::Error("loss is " + std::to_string(r.loss) + " at step " +
                             std::to_string(step + 1) +
                             (table.rows() ? "; the steps before it are in " + config.csv : ""));
          }
          if (step == 0) first_loss = r.loss;
          last_loss = r.loss;
          table.row()
              .add(r.step + 1)  // optimizer steps count from 1, as the terminal's lines do
              .add(r.loss)
              .add(r.lm_loss)
              .add(r.aux_loss)
              .add(r.lr)
              .add(r.grad_norm)
              .add(r.dropped)
              .add(r.seconds)
              .add(r.tokens_per_second)
              .add(r.flops / r.seconds / 1e9)
              .add(mpi.world_size())
              .add(layout.tensor)
              .add(layout.expert)
              .add(layout.data)
              .add(int(parallel.dtd))
              .add(int(parallel.cac))
              .add(int(parallel.reduce_scatter))
              .add(int(parallel.zero1))
              .add(static_cast<long long>(parallel.tile_elems))
              .add(config.run.backend)
              .add(config.run.dtype)
              .add(std::string(ted::precision_name(config.model.grad_dtype)))
              .add(world->name())
              .add(base->name())
              .add(r.loss_scale)
              .add(int(r.skipped));
          for (auto op : kLedgerOps)
            for (auto kind : kLedgerGroups)
              table.add(static_cast<unsigned long long>(ledger.total(op, kind).bytes_sent));
          for (std::size_t c = 0; c < ted::kMemoryCategoryCount; ++c)
            table.add(static_cast<unsigned long long>(
                tracked.usage(static_cast<ted::MemoryCategory>(c)).peak));
          table.add("").add(ted::git_revision()).add(command);  // fingerprint: last row only
          table.add(trainer.attention());
          if (rank0 && (step % config.log_every == 0 || step + 1 == config.steps)) {
            std::printf(
                "step %5d/%d %s loss %.4f lm %.4f aux %.4f lr %.2e |g| %.3f dropped %d "
                "tok/s %.0f%s\n",
                step + 1, config.steps, progress_bar(step + 1, config.steps).c_str(), r.loss,
                r.lm_loss, r.aux_loss, r.lr, r.grad_norm, r.dropped, r.tokens_per_second,
                r.skipped ? " (skipped: gradient overflow, loss scale halved)" : "");
            std::fflush(stdout);
          }
        }
        const double fingerprint = trainer.fingerprint();
        if (rank0) {
          char text[32];
          std::snprintf(text, sizeof text, "%.9e", fingerprint);
          table.set_last(columns.size() - 4, text);
          table.write_atomic(config.csv);
          std::printf("# peak memory on rank 0:");
          for (std::size_t c = 0; c < ted::kMemoryCategoryCount; ++c) {
            auto category = static_cast<ted::MemoryCategory>(c);
            std::printf(" %s %s%s", std::string(ted::to_string(category)).c_str(),
                        ted::format_bytes(tracked.usage(category).peak).c_str(),
                        c + 1 < ted::kMemoryCategoryCount ? "," : "\n");
          }
          std::printf("# loss %.4f -> %.4f (ratio %.3f)\n# fingerprint %s\n# CSV: %s\n", first_loss,
                      last_loss, last_loss / first_loss, text, config.csv.c_str());
        }
        return 0;
      },
      &check);
}
