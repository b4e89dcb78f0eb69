// ted_convergence: the paper's validation by training (docs/algorithm.md section 6): each system
// (DeepSpeed-MoE's layout at T = 1, TED's, TED with every switch on) trains the same model on the
// same data from the same initial weights for training.steps optimizer steps, on one layout
// (layout.*), with the held-out loss every training.eval_every steps; one CSV row per step and
// system (ted_train's columns and the system), appended when the system is done. --iters 0 is
// the correctness-only mode of every experiment: here two steps a system. The DeepSpeed
// baseline trains the same YAML (baselines/deepspeed); plots/plot_convergence.py draws the curves.
//
//   mpirun -np 4 --oversubscribe build/apps/ted_convergence -c experiments/convergence/cpu.yaml
//   ./scripts/convergence.sh      # the real-text run on 8 ranks, with DeepSpeed's, and its figure
#include <cstdio>

#include "ted/core/csv.hpp"
#include "ted/experiments/harness.hpp"
#include "ted/run/run.hpp"
#include "ted/run/train_csv.hpp"
#include "ted/run/train_step.hpp"

namespace {

using ted::experiments::ExperimentConfig;
using ted::experiments::Point;

std::vector<std::string> header() {
  auto names = ted::train_csv_columns().names();
  names.push_back("system");
  return names;
}

std::size_t train_point(const Point& point, const ExperimentConfig& config,
                        const std::string& command) {
  ted::train::TrainConfig train = point.train;
  train.steps = config.iters == 0 ? 2 : config.train.steps;
  ted::TrainingRun run(train, point.layout);
  const bool rank0 = run.control().rank() == 0;
  ted::CsvTable table(header());
  auto keep = [&] {
    if (rank0) ted::append_csv(table, config.csv);
  };
  const std::string system = point.system.name;
  if (rank0)
    std::printf("# %s on %s, %s: %d steps, %s\n", system.c_str(), point.layout.to_string().c_str(),
                std::string(ted::precision_name(train.run.dtype)).c_str(), train.steps,
                run.trainer().source().describe().c_str());
  double seconds = 0;
  for (int step = 0; step < train.steps; ++step) {
    const auto logged =
        ted::step_and_log(run, train, point.layout, step, table, command, keep, {system});
    const auto& r = logged.record;
    seconds += r.seconds;
    if (rank0 && (logged.evaluated || (step + 1) % train.log_every == 0 || step == 0)) {
      std::printf("%-28s step %5d/%d loss %.4f", system.c_str(), step + 1, train.steps, r.loss);
      if (logged.evaluated) std::printf(" valid %.4f", r.valid_loss);
      std::printf(" |g| %.3f %.0f tok/s\n", r.grad_norm, r.tokens_per_second);
      std::fflush(stdout);
    }
  }
  if (rank0) {
    std::printf("# %s: %d steps in %.1f s\n", system.c_str(), train.steps, seconds);
    keep();
  }
  return table.rows();
}

}  // namespace

int main(int argc, char** argv) {
  const ted::experiments::TrainedPoints trained{header(), train_point};
  return ted::experiments::experiment_main(
      argc, argv, "convergence",
      "The paper's validation by training: each system (DeepSpeed-MoE's layout, TED's, TED with "
      "every switch on) trains the same model on the same data from the same weights on one "
      "layout; per step and system the loss, the held-out loss, the gradient norm and the time",
      {}, &trained);
}
