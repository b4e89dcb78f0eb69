// The experiments' points and any layout, carried to a cluster by the projection's traffic,
// memory and time models (projection/). Rows come out in the experiments' CSV columns (backend
// "projected:<cluster>"), so the same plot scripts draw measured and projected runs.
#pragma once

#include <string>
#include <vector>

#include "ted/core/csv.hpp"
#include "ted/experiments/measure.hpp"
#include "ted/experiments/plans.hpp"
#include "ted/projection/cluster.hpp"
#include "ted/projection/memory.hpp"
#include "ted/projection/time.hpp"

namespace ted::experiments {

// The shape the projection reads of a point (in its run.dtype).
projection::StepShape shape_of(const Point& point);
// ... on `cluster`, whose backend decides what the
// experts compute under a forced routing workload: the CPU backend (a "cpu-*" device) leaves the
// empty capacity slots out (Routing::kept), a GPU (the CUDA backend, DeepSpeed-MoE) computes
// every slot.
projection::StepShape shape_of(const Point& point, const projection::Cluster& cluster);

// One point's projected result (time = median = p10 = p90; peaks from the memory model).
Result project(const Point& point, const projection::Cluster& cluster);

// The layout search: every layout T x Ep x D of `gpus` the model splits over and every
// system (ted-baseline, +dtd, +cac, +dtd+cac, +dtd+cac+rs; T = 1 layouts are DeepSpeed-MoE),
// each at the same `global_batch` sequences per step (its micro-batches = global_batch /
// (data.micro_batch x Ep x D), as the experiments lay a point out), ranked by fitting in the
// device memory first, then by projected time. Layouts whose data-parallel ranks do not divide
// the global batch are left out and counted in `left_out`.
struct Candidate {
  Point point;
  projection::StepTime time;
  std::uint64_t peak = 0;  // the projected peak (MemoryEstimate::total)
  bool fits = false;
  Result result;  // project(point): the experiment's CSV row
};
// A layout (and system) the search refuses, and why: T does not divide the heads or the FFN,
// Ep the experts, the data ranks the global batch; or (fits false among the candidates) its
// projected peak exceeds the device's memory.
struct Refused {
  Layout layout;
  std::string system;  // empty: every system of the layout
  std::string reason;
};
std::vector<Candidate> search(const ExperimentConfig& config, int gpus,
                              const projection::Cluster& cluster, int global_batch,
                              int* left_out = nullptr, std::vector<Refused>* refused = nullptr);
// The reasons of the refused layouts and of the candidates that do not fit, one line each
// ("T x Ep x D system: reason"), at most `top` of the latter.
void print_refused(const std::vector<Refused>& refused, const std::vector<Candidate>& candidates,
                   const projection::Cluster& cluster, int top);
// Orders candidates: fitting before not fitting, then faster first (stable).
void rank(std::vector<Candidate>& candidates);

// ted_project experiment: every point of the config's plan projected on `cluster` (each judged
// against the cluster's memory, the memory experiment's against its budget), a progress line
// and a memory line printed per point. Returns the rows (backend "projected:<cluster>"); the
// points in `points`.
CsvTable project_plan(const ExperimentConfig& config, const projection::Cluster& cluster,
                      const std::string& where, const std::string& command,
                      std::vector<Point>* points);

// ted_project search: the sequences per step every layout is compared at: `given` (nonzero),
// else data.global_batch, else the YAML layout's micro_batches x micro_batch x ep x dp;
// ConfigError when there is none (every layout must process the same sequences per step, or
// their times do not compare).
int search_global_batch(const ExperimentConfig& config, int given, const std::string& where);

// The search's first `top` candidates printed as a table, and returned as the experiments' CSV
// rows in rank order.
CsvTable print_search(const ExperimentConfig& config, const std::vector<Candidate>& candidates,
                      int top, const projection::Cluster& cluster, const std::string& command);

}  // namespace ted::experiments
