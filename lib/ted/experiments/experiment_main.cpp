#include "ted/experiments/harness.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include <mpi.h>

#include "ted/app/app_main.hpp"
#include "ted/app/key_options.hpp"
#include "ted/backend/registry.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/cpu_features.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/system.hpp"
#include "ted/core/units.hpp"
#include "ted/experiments/rounds.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/model/gpt.hpp"
#include "ted/projection/fit.hpp"
#include "ted/run/check.hpp"

namespace ted::experiments {

namespace {

// --point K (0: all) of the plan for `ranks` ranks, and the plan against them: no point at all
// (every one needs more ranks), or ranks that no point uses, is bad input; else a job would end
// COMPLETED having measured nothing, or leave ranks idle without a word.
Plan select_point(Plan plan, int point, int ranks, const std::string& where) {
  const std::string launched = std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s");
  if (plan.points.empty()) {
    std::string why;
    for (const auto& line : plan.skipped) why += (why.empty() ? "" : "; ") + line;
    throw ConfigError(where + ": no point to run on " + launched + ": " +
                      (why.empty() ? "the plan is empty" : why));
  }
  if (point > static_cast<int>(plan.points.size()))
    throw ConfigError(where + ": --point " + std::to_string(point) + ": the plan has " +
                      std::to_string(plan.points.size()) + " points on " + launched);
  if (point > 0) plan.points = {plan.points[point - 1]};
  int largest = 0;
  for (const auto& p : plan.points) largest = std::max(largest, p.layout.world_size());
  if (largest < ranks)
    throw ConfigError(where + ": the largest point " +
                      (point > 0 ? "(--point " + std::to_string(point) + ") " : "") + "uses " +
                      std::to_string(largest) + " of the " + launched + ": " +
                      std::to_string(ranks - largest) + " would be idle (launch " +
                      std::to_string(largest) + ")");
  return plan;
}

// Every point's model against its layout and switches, before any point runs (a point that
// failed in the middle of a sweep would have spent the points before it).
void check_layouts(const Plan& plan, const std::string& where) {
  for (const auto& point : plan.points) {
    try {
      point.train.check_layout(point.layout.tensor, point.layout.expert);
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": " + point.system.name + " " + point.layout.to_string() + " " +
                        point.model_name + ": " + e.what());
    }
  }
}

// The memory check of every point before the first is measured, identically on every rank:
// the points' projected peaks against the free memory of the device each active rank will use.
// Returns, per point, "" when it fits, else why not.
std::vector<std::string> memory_verdicts(const Plan& plan, const ExperimentConfig& config,
                                         const MpiSession& mpi) {
  const auto& run = config.train.run;
  auto device = make_device(run.backend);
  const std::uint64_t free_bytes = device->free_bytes();
  std::vector<std::string> verdicts;
  for (const auto& point : plan.points) {
    const bool active = mpi.world_rank() < point.layout.world_size();
    const std::uint64_t need = active ? projection::projected_peak(point.train, point.layout) : 0;
    auto fit = projection::agree_memory_fit(need, device->name(), free_bytes, MPI_COMM_WORLD);
    verdicts.push_back(fit.fits ? "" : fit.text);
  }
  return verdicts;
}

// --check: the plan against `ranks` ranks and every point's projected peak against run.cluster
// (or this host). A point that does not fit will be a row saying so; a plan of which no point
// fits would spend an allocation on nothing, and is refused. Returns the lines to print.
std::string check_plan(const Plan& plan, const ExperimentConfig& config,
                       const std::string& experiment, const std::string& where, int ranks) {
  std::uint64_t largest = 0;
  std::size_t over = 0;
  std::string against = "nothing";
  std::vector<std::string> lines;  // printed only when the check passes: one line on failure
  for (const auto& point : plan.points) {
    const std::uint64_t need = projection::projected_peak(point.train, point.layout);
    const CheckedFit checked = check_fit(config.train.run, point.layout.world_size(), need);
    against = checked.against;
    largest = std::max(largest, need);
    if (checked.fit.fits) continue;
    ++over;
    lines.push_back(point.system.name + " " + point.layout.to_string() + " " + point.model_name +
                    ": does not fit: " + checked.fit.text + " (will be a row saying so)");
  }
  if (!plan.points.empty() && over == plan.points.size())
    throw ConfigError(where + ": no point fits in memory on " + std::to_string(ranks) +
                      " ranks (judged against " + against + ")");
  std::string text;
  for (const auto& line : lines) text += "# " + line + "\n";
  for (const auto& line : plan.skipped) text += "# " + line + "\n";
  char summary[512];
  std::snprintf(summary, sizeof summary,
                "ted_%s: check passed: %s on %d ranks: %zu points (%zu over memory), largest "
                "projected peak %s per rank, judged against %s\n",
                experiment.c_str(), where.c_str(), ranks, plan.points.size(), over,
                format_bytes(largest).c_str(), against.c_str());
  return text + summary;
}

}  // namespace

int experiment_main(int argc, char** argv, const std::string& experiment,
                    const std::string& description, const Planner& planner, const Summary& summary,
                    const TrainedPoints* trained) {
  CLI::App app{description, "ted_" + experiment};
  std::string config_path;
  std::vector<std::string> overrides;
  int point = 0;
  CheckMode check;
  app.add_option("-c,--config", config_path, "experiment YAML (experiments/" + experiment + "/)")
      ->required();
  app.add_option("--set", overrides, "override a key: section.key=value (repeatable)");
  const KeyOptions keys(app, kExperimentOption);  // --iters, --csv, --backend, --dtype, --comm
  app.add_option("--point", point,
                 "run only the K-th point of the plan for these ranks, as the progress line "
                 "numbers them (a Slurm array task's index)")
      ->check(CLI::Range(1, 1 << 24));
  add_check_options(app, check);
  return run_app(
      argc, argv, app,
      [&](MpiSession& mpi) {
        // The options are --set overrides like any other, so the config's rules judge them.
        for (auto& assignment : keys.assignments()) overrides.push_back(std::move(assignment));
        ExperimentConfig config = load_config(config_path, overrides, experiment);
        if (config.csv.empty())
          config.csv = "results/local/" + experiment + "/" +
                       std::filesystem::path(config_path).stem().string() + ".csv";
        const std::string where = config_origin(config_path, overrides);
        if (trained && config.rounds > 1)
          throw ConfigError(config_origin(config_path, overrides, "run.rounds") +
                            ": key 'run.rounds' must be 1 for ted_" + experiment +
                            ": its points train rather than being timed");
        const bool rank0 = mpi.world_rank() == 0;
        auto check_output = [&] {  // after the inputs: their errors come first
          try {
            check_csv_appendable(trained ? CsvTable(trained->header) : result_table(), config.csv);
          } catch (const ConfigError& e) {
            throw ConfigError(config_origin(config_path, overrides, "run.csv") +
                              ": key 'run.csv': " + e.what());
          }
        };
        if (check.enabled) {
          const int ranks = check.ranks_for(mpi.world_size());
          Plan plan = routing_sweep(planner(config, where, ranks), config, where);
          check_layouts(plan, where);
          check_plan(plan, config, experiment, where, ranks);  // the inputs' errors first
          check_output();
          plan = select_point(std::move(plan), point, ranks, where);
          const std::string verdict = check_plan(plan, config, experiment, where, ranks);
          const auto& run = config.train.run;
          const std::string needs =
              check_needs(run.backend, run.comm, ranks, config_path + ": keys 'run.backend/comm'");
          if (rank0) std::fputs((verdict + needs).c_str(), stdout);
          return 0;
        }
        // Before anything is measured, identically on every rank: can this machine run it?
        const auto& run = config.train.run;
        try {
          require_backend(run.backend, run.comm, MPI_COMM_WORLD);
        } catch (const ConfigError& e) {
          throw ConfigError(config_path + ": keys 'run.backend/comm': " + e.what());
        }
        // Launched by scripts/emulated_cluster.sh: the rows record the emulated topology.
        if (const char* topology = std::getenv("TED_TOPOLOGY"))
          config.backend += std::string(" (") + topology + ")";
        Plan plan = routing_sweep(planner(config, where, mpi.world_size()), config, where);
        check_layouts(plan, where);
        check_output();
        plan = select_point(std::move(plan), point, mpi.world_size(), where);
        const std::vector<std::string> verdicts = memory_verdicts(plan, config, mpi);
        if (!verdicts.empty() && std::all_of(verdicts.begin(), verdicts.end(),
                                             [](const std::string& v) { return !v.empty(); }))
          throw ConfigError(where + ": no point fits in memory here: " + verdicts.front());
        if (rank0) {
          std::printf("# ted_%s %s: %s, %zu points on %d ranks, warm-up %d, timed %d\n",
                      experiment.c_str(), std::string(git_revision()).c_str(), config_path.c_str(),
                      plan.points.size(), mpi.world_size(), config.warmup, config.iters);
          std::printf("# blas: %s; cpu %s\n", kernels::cpu::blas_description().c_str(),
                      describe(cpu_features()).c_str());
          for (const auto& line : plan.skipped) std::printf("# %s\n", line.c_str());
        }
        auto world = MpiCommunicator::world(nullptr);
        const std::string command = command_line(argc, argv);
        std::vector<Result> results;
        std::size_t written = 0;
        if (trained) {
          for (std::size_t i = 0; i < plan.points.size(); ++i) {  // each run appends its rows
            const Point& point = plan.points[i];
            if (verdicts[i].empty())
              written += trained->run(point, config, command);
            else if (rank0)
              std::printf("# %s %s: not run: does not fit: %s\n", point.system.name.c_str(),
                          point.layout.to_string().c_str(), verdicts[i].c_str());
          }
        } else {
          set_mpi_wait(config.wait);
          results = measure_rounds(plan, verdicts, config, *world, command, &written);
        }
        if (rank0 && written == 0) std::printf("# nothing measured: no CSV written\n");
        if (rank0 && written > 0) {
          if (summary && !trained) summary(plan.points, results);
          std::printf("# CSV: %s (%zu rows appended)\n", config.csv.c_str(), written);
        }
        return 0;
      },
      &check);
}

}  // namespace ted::experiments
