// The points an experiment measures: one configuration (system, layout, model) and the
// planners that lay out an experiment's points for the ranks at hand.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ted/experiments/config.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/train/train_config.hpp"

namespace ted::experiments {

// One configuration to measure.
struct Point {
  System system;
  Layout layout;
  train::TrainConfig train;      // with parallel.* and model.checkpoint set for the system
  std::string model_name;        // e.g. "h64-L4-E8"
  std::int64_t budget = -1;      // memory experiment: the per-rank budget this point is judged by
  bool einsum_dispatch = false;  // projection.dispatch: einsum (the projection only)
};
// global_batch > 0: the point's data.micro_batches from the whole step's sequences (a
// ConfigError naming `where` when they do not divide over its data-parallel ranks).
Point make_point(const ExperimentConfig& config, const System& system, Layout layout,
                 const train::TrainConfig& train, int global_batch = 0,
                 const std::string& where = "");

// What an experiment program plugs in: the points to measure for the ranks at hand (and a line
// for each point that needs more ranks than launched), and what to say at the end.
struct Plan {
  std::vector<Point> points;
  std::vector<std::string> skipped;
};
using Planner =
    std::function<Plan(const ExperimentConfig& config, const std::string& where, int world_size)>;

// The layout of layout.tp/ep/dp (dp 0: all launched ranks). Returns false, with a line in
// `skipped`, when it needs more ranks than launched; a layout that does not fit is a
// ConfigError naming the keys.
bool fixed_layout(const ExperimentConfig& config, const std::string& where, int world_size,
                  Layout* layout, std::vector<std::string>* skipped);

// The planner of an experiment (a YAML's `experiment:`, a program's name) from the one table of
// {name, planner} in plans.cpp; ConfigError naming the known ones for another name.
Planner plan_for(const std::string& experiment);

// The routing sweep, crossed with a plan's points: every point once per entry of
// sweep.workloads (routing.workload) and of sweep.dropless (gating.dropless), workload by
// workload, capacity before dropless as listed; an empty list keeps the YAML's own value, so a
// config without these keys keeps its plan as it is. A workload that cannot run a point's
// experts and top_k is a ConfigError naming the key. The measured runs apply it
// (experiment_main); the projection does not model the workloads and plans without it.
Plan routing_sweep(Plan plan, const ExperimentConfig& config, const std::string& where);

}  // namespace ted::experiments
