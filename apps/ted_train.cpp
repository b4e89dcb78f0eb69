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
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "ted/app/app_main.hpp"
#include "ted/app/key_options.hpp"
#include "ted/core/cpu_features.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/parallel.hpp"
#include "ted/core/units.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/model/gpt.hpp"
#include "ted/projection/fit.hpp"
#include "ted/projection/traffic.hpp"
#include "ted/run/check.hpp"
#include "ted/run/checkpoint.hpp"
#include "ted/run/run.hpp"
#include "ted/run/train_csv.hpp"
#include "ted/run/train_step.hpp"

namespace {

const char* on_off(bool value) {
  return value ? "on" : "off";
}

std::string progress_bar(int done, int total, int width = 20) {
  int filled = total > 0 ? done * width / total : width;
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

// The command line: the config, --set's assignments, the options that each set one key (the
// table app/key_options.hpp shares with the experiments), and --check.
struct Options {
  std::string config_path;
  std::vector<std::string> overrides;
  ted::CheckMode check;
};

void add_options(CLI::App& app, Options& o) {
  app.add_option("-c,--config", o.config_path, "YAML config (see experiments/train/)")->required();
  app.add_option("--set", o.overrides, "override a key: section.key=value (repeatable)");
}

// --set's assignments followed by those of the options given, in the table's order.
std::vector<std::string> assignments(const Options& o, const ted::KeyOptions& keys) {
  std::vector<std::string> all = o.overrides;
  for (auto& assignment : keys.assignments()) all.push_back(std::move(assignment));
  return all;
}

// The config with its overrides, validated, laid out on `ranks` ranks; every error names where
// the offending value came from.
struct Setup {
  ted::train::TrainConfig config;
  ted::Layout layout;
  std::string where;
};

Setup load(const std::string& path, const std::vector<std::string>& overrides, int ranks) {
  Setup s;
  ted::ConfigSchema schema = s.config.schema();
  schema.load_yaml(path);
  schema.set_all(overrides);
  s.where = ted::config_origin(path, overrides);
  auto& config = s.config;
  try {
    config.validate();
  } catch (const ted::ConfigError& e) {
    throw ted::ConfigError(s.where + ": " + e.what());
  }
  if (config.csv.empty())
    config.csv = "results/local/train/" + std::filesystem::path(path).stem().string() + ".csv";
  try {
    ted::check_output_path(config.csv);
  } catch (const ted::ConfigError& e) {
    throw ted::ConfigError(s.where + ": key 'training.csv': " + e.what());
  }
  auto& parallel = config.parallel;
  try {
    s.layout = ted::resolve_layout(ranks, parallel.tp, parallel.ep, parallel.dp);
  } catch (const ted::ConfigError& e) {
    throw ted::ConfigError(s.where + ": keys 'parallel.tp/ep/dp': " + e.what());
  }
  parallel.dp = s.layout.data;
  try {
    config.check_layout(s.layout.tensor, s.layout.expert);
  } catch (const ted::ConfigError& e) {
    throw ted::ConfigError(s.where + " on " + s.layout.to_string() + ": " + e.what());
  }
  return s;
}

// Rank 0's lines before the first step: what runs, on what, laid out how.
void print_header(const Setup& s, const std::string& path, ted::TrainingRun& run) {
  const auto& config = s.config;
  const auto& m = config.model;
  const auto& parallel = config.parallel;
  const auto& layout = s.layout;
  auto& trainer = run.trainer();
  std::printf("# ted_train %s: %s\n", std::string(ted::git_revision()).c_str(), path.c_str());
  // The whole model's parameters (one rank's parts when nothing is split), and what rank 0
  // holds of them under this layout.
  const auto whole = ted::projection::parameter_parts(m, ted::Layout{1, 1, 1}, true);
  std::printf(
      "# model: vocab %d, seq %d, hidden %d, heads %d, layers %d, %d experts every %d "
      "blocks, top-%d, cf %.2f; %llu parameters (%zu on rank 0)\n",
      m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.gate.experts, m.expert_interval,
      m.gate.top_k, m.gate.capacity_factor,
      static_cast<unsigned long long>(whole.dense + whole.expert), trainer.params().total());
  std::printf("# data: %s; global batch %d x %d x %d sequences; checkpointing %s\n",
              trainer.source().describe().c_str(), config.data.micro_batch,
              config.data.micro_batches, layout.expert * layout.data, on_off(m.checkpoint));
  std::printf(
      "# layout %s on %d ranks; dtd %s (capacity padded to a multiple of T), cac %s, "
      "reduce-scatter %s, zero-1 %s, optimizer tile %lld, overlap %d\n",
      layout.to_string().c_str(), run.ranks(), on_off(parallel.dtd), on_off(parallel.cac),
      on_off(parallel.reduce_scatter), on_off(parallel.zero1),
      static_cast<long long>(parallel.tile_elems), parallel.overlap);
  std::printf(
      "# backend %s on %s, %s%s, device buffers over %s, attention %s\n",
      std::string(ted::to_string(config.run.backend)).c_str(), run.base_device().name().c_str(),
      std::string(ted::precision_name(config.run.dtype)).c_str(),
      config.run.dtype == ted::DataType::f32 ? "" : " (fp32 masters, gradients and Adam state)",
      run.world().name().c_str(), trainer.attention().c_str());
  std::printf(
      "# cpu threads per rank: %d (the CPUs of its affinity mask, shared among the ranks "
      "started unbound on this machine; TED_NUM_THREADS sets it)\n",
      ted::parallel_threads());
  // The CPU GEMMs' library and kernels (a CUDA run's host side uses them too, for the reference
  // pieces), next to what this CPU supports: a BLAS that picked old kernels shows here.
  std::printf("# blas: %s; cpu %s\n", ted::kernels::cpu::blas_description().c_str(),
              ted::describe(ted::cpu_features()).c_str());
}

void print_step(const ted::train::StepRecord& r, int steps) {
  char valid[32] = "";
  if (!std::isnan(r.valid_loss)) std::snprintf(valid, sizeof valid, " valid %.4f", r.valid_loss);
  std::printf(
      "step %5d/%d %s loss %.4f lm %.4f aux %.4f%s lr %.2e |g| %.3f dropped %d tok/s %.0f%s\n",
      r.step + 1, steps, progress_bar(r.step + 1, steps).c_str(), r.loss, r.lm_loss, r.aux_loss,
      valid, r.lr, r.grad_norm, r.dropped, r.tokens_per_second,
      r.skipped ? " (skipped: gradient overflow, loss scale halved)" : "");
  std::fflush(stdout);
}

void print_footer(ted::TrainingRun& run, double first_loss, double last_loss,
                  const std::string& fingerprint, const std::string& csv, std::uint64_t projected) {
  // The whole: the tracking allocator's peak of everything at once (not the sum of the
  // categories' peaks, which fall at different moments), beside the projection's memory model
  // for this run (what --check judges), so a GPU run compares them with the driver's count.
  std::printf("# peak memory on rank 0, total: %zu bytes tracked, %llu bytes projected\n",
              run.tracked().total().peak, static_cast<unsigned long long>(projected));
  std::printf("# peak memory on rank 0:");
  for (std::size_t c = 0; c < ted::kMemoryCategoryCount; ++c) {
    auto category = static_cast<ted::MemoryCategory>(c);
    std::printf(" %s %s%s", std::string(ted::to_string(category)).c_str(),
                ted::format_bytes(run.tracked().usage(category).peak).c_str(),
                c + 1 < ted::kMemoryCategoryCount ? "," : "\n");
  }
  std::printf("# loss %.4f -> %.4f (ratio %.3f)\n# fingerprint %s\n# CSV: %s\n", first_loss,
              last_loss, last_loss / first_loss, fingerprint.c_str(), csv.c_str());
}

// The resolved config as key=value lines: what a checkpoint records and a resume compares.
std::vector<std::string> resolved_config(const ted::train::TrainConfig& config) {
  ted::train::TrainConfig copy = config;
  return copy.schema().dump();
}

// Exit code of a run stopped by SIGTERM or SIGUSR1 after saving (sysexits.h's EX_TEMPFAIL:
// try again), so a Slurm script requeues it; 0 is a finished run.
constexpr int kStoppedBySignal = 75;

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void note_stop_signal(int signal) {
  g_stop_signal = signal;
}

// SIGTERM (Slurm's time limit, scancel, mpirun passing one on) and SIGUSR1 (sbatch --signal)
// end the run after the step in progress, agreed by every rank, with a checkpoint when
// training.save_dir is set.
class StopSignals {
 public:
  StopSignals() {
    struct sigaction action {};
    action.sa_handler = note_stop_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGUSR1, &action, nullptr);
    // A test stops a run at a known step: TED_TEST_SIGNAL_AFTER=<step>[:<rank>] raises SIGTERM
    // in that rank (default 0) once the step is done.
    if (const char* hook = std::getenv("TED_TEST_SIGNAL_AFTER")) {
      hook_step_ = std::atoi(hook);
      if (const char* colon = std::strchr(hook, ':')) hook_rank_ = std::atoi(colon + 1);
    }
  }
  void test_hook(int steps_done, int rank) const {
    if (steps_done == hook_step_ && rank == hook_rank_) std::raise(SIGTERM);
  }
  // The signal some rank received (the largest number), or 0: the same on every rank.
  int agreed(ted::Communicator& control) const {
    std::int32_t signal = g_stop_signal;
    control.all_reduce(&signal, &signal, 1, ted::DataType::i32, ted::ReduceOp::max);
    return signal;
  }
  static const char* name(int signal) { return signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM"; }

 private:
  int hook_step_ = -1, hook_rank_ = 0;
};

// Where the run continues from: training.load, or with training.resume the newest complete
// checkpoint of training.save_dir (none yet: the run starts at step 0, so a job's first start
// and its requeues run the same command). Judged before anything runs or prints: every rank
// reads the same manifest, so a refusal is every rank's.
struct Resume {
  std::filesystem::path folder;
  ted::CheckpointManifest manifest;
};

std::optional<Resume> find_resume(const ted::train::TrainConfig& config, const ted::Layout& layout,
                                  int ranks, const std::vector<std::string>& resolved) {
  std::optional<std::filesystem::path> folder;
  if (!config.checkpoint.load.empty())
    folder = config.checkpoint.load;
  else if (config.checkpoint.resume)
    folder = ted::latest_checkpoint(config.checkpoint.save_dir);
  if (!folder) return std::nullopt;
  Resume resume{*folder, ted::read_manifest(*folder)};
  ted::check_resumable(*folder, resume.manifest, ranks, layout, resolved);
  if (resume.manifest.steps_done > config.steps)
    throw ted::ConfigError("checkpoint " + folder->string() + ": " +
                           std::to_string(resume.manifest.steps_done) +
                           " steps done, beyond training.steps " + std::to_string(config.steps));
  return resume;
}

// Takes the checkpoint's state into the trainer (a rank's own file may fail alone: then every
// rank leaves with its line) and its CSV rows into `table`.
struct Resumed {
  int first_step = 0;
  double first_loss = 0, last_loss = 0;
};

Resumed restore(const std::optional<Resume>& resume, ted::TrainingRun& run, ted::CsvTable& table) {
  if (!resume) return {};
  ted::agree_on_failure(run.control(), [&] {
    run.trainer().restore(ted::load_rank_state(resume->folder, run.control().rank()));
  });
  Resumed resumed{resume->manifest.steps_done, 0, 0};
  const auto rows = ted::read_csv(resume->folder / "train.csv");
  for (const auto& row : rows) {
    table.row();
    for (const auto& column : table.header()) {
      const auto it = row.find(column);
      table.add(it == row.end() ? std::string_view() : std::string_view(it->second));
    }
  }
  if (!rows.empty()) {
    resumed.first_loss = std::atof(rows.front().at("loss").c_str());
    resumed.last_loss = std::atof(rows.back().at("loss").c_str());
  }
  return resumed;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "TED training of the MoE GPT from a YAML config, on CPU or GPU ranks: measures per step "
      "the loss, gradient norm, time and the bytes each collective moved (CSV), and ends "
      "with the parameter fingerprint",
      "ted_train"};
  Options options;
  add_options(app, options);
  const ted::KeyOptions keys(app, ted::kTrainOption);  // --steps, --tp, --dtd, --dtype, ...
  ted::add_check_options(app, options.check);
  const auto& check = options.check;
  return ted::run_app(
      argc, argv, app,
      [&](ted::MpiSession& mpi) {
        const std::string& path = options.config_path;
        const int ranks = check.enabled ? check.ranks_for(mpi.world_size()) : mpi.world_size();
        Setup setup = load(path, assignments(options, keys), ranks);
        const auto& config = setup.config;
        const std::uint64_t need = ted::projection::projected_peak(config, setup.layout);
        const bool rank0 = mpi.world_rank() == 0;
        if (check.enabled)
          return ted::report_check("ted_train", setup.where, config.run, ranks, setup.layout, need,
                                   rank0);
        try {
          ted::require_backend(config.run.backend, config.run.comm, MPI_COMM_WORLD);
        } catch (const ted::ConfigError& e) {
          throw ted::ConfigError(path + ": " + e.what());
        }
        // Does the projected peak fit, before anything is allocated (RunSpec::need)?
        ted::RunSpec spec;
        spec.need = need;
        spec.refuse = [&](const std::string& text) {
          return setup.where + ": does not fit: " + text;
        };
        const std::vector<std::string> resolved = resolved_config(config);
        const std::optional<Resume> resume = find_resume(config, setup.layout, ranks, resolved);
        ted::TrainingRun run(config, setup.layout, spec);
        const auto& columns = ted::train_csv_columns();
        ted::CsvTable table = columns.table();
        const std::string command = ted::command_line(argc, argv);
        const Resumed resumed = restore(resume, run, table);
        if (rank0) print_header(setup, path, run);
        if (rank0 && resume)
          std::printf("# resumed from %s: %d steps done (revision %s)\n", resume->folder.c_str(),
                      resumed.first_step, resume->manifest.revision.c_str());
        const int first_step = resumed.first_step;
        double first_loss = resumed.first_loss, last_loss = resumed.last_loss;
        StopSignals stop_signals;
        const std::string save_dir = config.checkpoint.save_dir;
        auto save = [&](int steps_done) {
          ted::CheckpointManifest manifest{steps_done, run.ranks(), setup.layout,
                                           std::string(ted::git_revision()), resolved};
          const auto folder =
              ted::save_checkpoint(run.control(), save_dir, config.checkpoint.save_keep, manifest,
                                   run.trainer().state(), rank0 ? table.to_string() : "");
          if (rank0) std::printf("# checkpoint after step %d: %s\n", steps_done, folder.c_str());
        };
        for (int step = first_step; step < config.steps; ++step) {
          const auto logged =
              ted::step_and_log(run, config, setup.layout, step, table, command, [&] {
                if (rank0) table.write_atomic(config.csv);  // keep what was measured
              });
          const auto& r = logged.record;
          const bool evaluate = logged.evaluated;
          if (step == 0) first_loss = r.loss;
          last_loss = r.loss;
          const int done = step + 1;
          if (rank0 && (step % config.log_every == 0 || done == config.steps || evaluate))
            print_step(r, config.steps);
          stop_signals.test_hook(done, run.control().rank());
          const int signal = stop_signals.agreed(run.control());
          const bool stopping = signal != 0 && done < config.steps;
          if (!save_dir.empty() &&
              (stopping || done == config.steps ||
               (config.checkpoint.save_every > 0 && done % config.checkpoint.save_every == 0)))
            save(done);
          if (stopping) {
            if (rank0) {
              if (table.rows() > 0) table.write_atomic(config.csv);
              std::printf("# stopped by %s after step %d of %d: %s\n", stop_signals.name(signal),
                          done, config.steps,
                          save_dir.empty() ? "no checkpoint (training.save_dir is not set)"
                                           : ("continue with --resume from " + save_dir).c_str());
              std::fflush(stdout);
            }
            return kStoppedBySignal;
          }
        }
        const double fingerprint = run.trainer().fingerprint();
        if (rank0) {
          char text[32];
          std::snprintf(text, sizeof text, "%.9e", fingerprint);
          if (table.rows() > 0) table.set_last(columns.index("fingerprint"), text);
          table.write_atomic(config.csv);
          print_footer(run, first_loss, last_loss, text, config.csv, need);
        }
        return 0;
      },
      &options.check);
}
