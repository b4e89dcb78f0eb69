// The one harness behind every experiment executable: its YAML config and the systems it
// compares (config.hpp), the points and their planners (plans.hpp), measuring one point
// (measure.hpp: warm-up, timed iterations, median/p10/p90, ledger bytes, allocator peaks, final
// loss), the CSV row and the progress line (rows.hpp), and main() of a program (here).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ted/experiments/config.hpp"
#include "ted/experiments/measure.hpp"
#include "ted/experiments/plans.hpp"
#include "ted/experiments/rows.hpp"

namespace ted::experiments {

using Summary = std::function<void(const std::vector<Point>&, const std::vector<Result>&)>;

// An experiment whose points train rather than being timed (convergence): run(point) trains it
// and appends its rows, any number, under `header` to the CSV (rank 0), returning how many.
struct TrainedPoints {
  std::vector<std::string> header;
  std::function<std::size_t(const Point& point, const ExperimentConfig& config,
                            const std::string& command)>
      run;
};

// main() of an experiment program: options (-c config, --set, --iters, --csv, --backend,
// --dtype, --comm, --check, --ranks, --point), the config, the plan (--point K: only its K-th
// point; a plan with no point, or whose largest point leaves launched ranks idle, is bad
// input), the memory check of every point
// before the first is measured (a point whose projected peak does not fit its device is never
// run: its row says so, and the sweep goes on), every point measured with its row appended
// to the CSV at once (default results/<experiment>/<config name>.csv) and a progress line on
// rank 0, and the summary. --check validates all of it without running (and without MPI),
// ending with check_needs' line. Exit codes as run_app. With `trained`, each point is handed
// to trained->run instead of measure() and the CSV has its header.
int experiment_main(int argc, char** argv, const std::string& experiment,
                    const std::string& description, const Planner& planner,
                    const Summary& summary = {}, const TrainedPoints* trained = nullptr);
// The same with the experiment's planner from plans.cpp's table (plan_for).
inline int experiment_main(int argc, char** argv, const std::string& experiment,
                           const std::string& description, const Summary& summary = {},
                           const TrainedPoints* trained = nullptr) {
  return experiment_main(argc, argv, experiment, description, plan_for(experiment), summary,
                         trained);
}

}  // namespace ted::experiments
