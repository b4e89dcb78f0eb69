// ted_train: trains the MoE GPT on the CPU reference backend (one process), configured by a
// YAML file with command-line overrides; prints one line per step and writes a CSV of the steps
// (atomically, at the end) with the git revision and the command line.
//
//   build/apps/ted_train -c experiments/train/tiny-cpu.yaml
//   build/apps/ted_train -c experiments/train/tiny-cpu.yaml --set gating.top_k=2 --steps 50
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ted/app/app_main.hpp"
#include "ted/backend/device.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/train/trainer.hpp"

namespace {

std::string progress_bar(int done, int total, int width = 20) {
  int filled = total > 0 ? done * width / total : width;
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"TED reference training (CPU, one process): MoE GPT from a YAML config",
               "ted_train"};
  std::string config_path;
  std::vector<std::string> overrides;
  int steps = 0;
  std::string csv_path;
  bool checkpoint = false;
  app.add_option("-c,--config", config_path, "YAML config (see experiments/train/)")->required();
  app.add_option("--set", overrides, "override a key: section.key=value (repeatable)");
  app.add_option("--steps", steps, "optimizer steps (overrides training.steps)");
  app.add_option("--csv", csv_path, "CSV path (overrides training.csv)");
  app.add_flag("--checkpoint", checkpoint, "activation checkpointing (model.checkpoint=true)");

  return ted::run_app(argc, argv, app, [&](ted::MpiSession& mpi) {
    if (mpi.world_size() != 1)
      throw ted::ConfigError(
          "ted_train is the single-process reference: run it without mpirun "
          "(it was started on " +
          std::to_string(mpi.world_size()) + " ranks)");
    ted::train::TrainConfig config;
    ted::ConfigSchema schema = config.schema();
    schema.load_yaml(config_path);
    for (const auto& assignment : overrides) schema.set(assignment);
    if (steps > 0) config.steps = steps;
    if (!csv_path.empty()) config.csv = csv_path;
    if (checkpoint) config.model.checkpoint = true;
    if (config.csv.empty())
      config.csv = "results/train/" + std::filesystem::path(config_path).stem().string() + ".csv";

    try {
      config.validate();
    } catch (const ted::ConfigError& e) {
      throw ted::ConfigError(config_path + (overrides.empty() ? "" : " with --set") + ": " +
                             e.what());
    }
    auto device = ted::make_cpu_device();
    ted::train::Trainer trainer(config, *device);  // opens the data
    const auto& m = config.model;
    std::printf("# ted_train %s: %s\n", std::string(ted::git_revision()).c_str(),
                config_path.c_str());
    std::printf(
        "# model: vocab %d, seq %d, hidden %d, heads %d, layers %d, %d experts every %d "
        "blocks, top-%d, cf %.2f; %zu parameters\n",
        m.vocab, m.seq_len, m.hidden, m.heads, m.layers, m.gate.experts, m.expert_interval,
        m.gate.top_k, m.gate.capacity_factor, trainer.model().params().total());
    std::printf("# data: %s; global batch %d x %d sequences; checkpointing %s\n",
                trainer.source().describe().c_str(), config.data.micro_batch,
                config.data.micro_batches, m.checkpoint ? "on" : "off");

    ted::CsvTable table({"step", "loss", "lm_loss", "aux_loss", "lr", "grad_norm", "dropped",
                         "seconds", "tokens_per_s", "gflops_per_s", "git_revision", "command"});
    const std::string command = ted::command_line(argc, argv);
    double first_loss = 0, last_loss = 0;
    for (int step = 0; step < config.steps; ++step) {
      auto r = trainer.step(step);
      if (!std::isfinite(r.loss))
        throw ted::Error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(step));
      if (step == 0) first_loss = r.loss;
      last_loss = r.loss;
      table.row()
          .add(r.step)
          .add(r.loss)
          .add(r.lm_loss)
          .add(r.aux_loss)
          .add(r.lr)
          .add(r.grad_norm)
          .add(r.dropped)
          .add(r.seconds)
          .add(r.tokens_per_second)
          .add(r.flops / r.seconds / 1e9)
          .add(ted::git_revision())
          .add(command);
      if (step % config.log_every == 0 || step + 1 == config.steps) {
        std::printf(
            "step %5d/%d %s loss %.4f lm %.4f aux %.4f lr %.2e |g| %.3f dropped %d "
            "tok/s %.0f\n",
            step + 1, config.steps, progress_bar(step + 1, config.steps).c_str(), r.loss, r.lm_loss,
            r.aux_loss, r.lr, r.grad_norm, r.dropped, r.tokens_per_second);
        std::fflush(stdout);
      }
    }
    table.write_atomic(config.csv);
    std::printf("# loss %.4f -> %.4f (ratio %.3f)\n# CSV: %s\n", first_loss, last_loss,
                last_loss / first_loss, config.csv.c_str());
    return 0;
  });
}
