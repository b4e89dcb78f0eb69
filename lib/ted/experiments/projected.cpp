#include "ted/experiments/projected.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "ted/core/error.hpp"
#include "ted/core/units.hpp"
#include "ted/experiments/rows.hpp"
#include "ted/projection/fit.hpp"

namespace ted::experiments {

using namespace projection;

StepShape shape_of(const Point& point) {
  StepShape s = projection::shape_of(point.train, point.layout);
  s.einsum_dispatch = point.einsum_dispatch;
  return s;
}

StepShape shape_of(const Point& point, const Cluster& cluster) {
  StepShape s = shape_of(point);
  s.skip_empty_slots = cluster.device.rfind("cpu", 0) == 0;
  return s;
}

Result project(const Point& point, const Cluster& cluster) {
  const StepShape s = shape_of(point, cluster);
  const StepTime t = step_time(s, cluster);
  const StepTraffic traffic = step_traffic(s);
  const MemoryEstimate memory = step_memory(s);
  Result r;
  const double ms = t.total() * 1e3;
  r.time_ms = {ms, ms, ms};
  r.compute_ms = t.compute * 1e3;
  r.comm_ms = t.communication * 1e3;
  const auto& m = s.model;
  double tokens = static_cast<double>(s.micro_batch) * s.micro_batches * s.layout.expert *
                  s.layout.data * m.seq_len;
  r.tokens_per_s = tokens / t.total();
  r.tflops_per_rank = step_flops(s) / t.total() / 1e12;
  r.op_ms[0] = t.of(CollectiveOp::all_reduce) * 1e3;
  r.op_ms[1] = (t.of(CollectiveOp::all_to_all) + t.of(CollectiveOp::all_to_all_v)) * 1e3;
  r.op_ms[2] = t.of(CollectiveOp::all_gather) * 1e3;
  r.op_ms[3] = t.of(CollectiveOp::reduce_scatter) * 1e3;
  // As measured rows: the four kinds and other_ms add up to the time (other_ms: the compute and
  // any collective of another kind).
  r.other_ms = ms - (r.op_ms[0] + r.op_ms[1] + r.op_ms[2] + r.op_ms[3]);
  r.pct_of_peak = percent_of_peak(s, cluster, t.total());
  r.final_loss = 0;
  r.status = "projected";
  const CollectiveOp ops[4] = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                               CollectiveOp::reduce_scatter, CollectiveOp::all_to_all};
  for (int i = 0; i < 4; ++i)
    for (std::size_t g = 0; g < kGroupKindCount; ++g)
      r.bytes_sent[i] += traffic[static_cast<std::size_t>(ops[i])][g].bytes_sent;
  r.all_to_all_calls = at(traffic, CollectiveOp::all_to_all, GroupKind::expert).calls;
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) r.peak[c] = memory.peak[c];
  r.activations_saved = memory.activations_saved;
  r.peak_total = memory.total;
  // The whole model's parameters: one rank's parts when nothing is split.
  const ParameterParts whole = parameter_parts(m, Layout{1, 1, 1}, true);
  r.parameters = whole.dense + whole.expert;
  r.device = cluster.device;
  r.comm = "projected";  // the cluster file's links, not a communicator that ran
  if (static_cast<double>(memory.total) > cluster.memory_bytes)
    // Still projected: the time is what the paper's figures are compared on, and the row says
    // (status, and fits = 0 against the cluster's memory) that this implementation's projected
    // peak does not fit the GPU.
    r.status = "projected: does not fit: " + cluster_fit(memory.total, cluster).text;
  return r;
}

std::vector<Candidate> search(const ExperimentConfig& config, int gpus, const Cluster& cluster,
                              int global_batch, int* left_out, std::vector<Refused>* refused) {
  TED_CHECK(global_batch > 0, "the search compares layouts at one global batch");
  if (left_out) *left_out = 0;
  const auto& m = config.train.model;
  std::vector<Candidate> out;
  const char* systems[] = {"ted-baseline", "ted+dtd", "ted+cac", "ted+dtd+cac", "ted+dtd+cac+rs"};
  for (const auto& layout : all_layouts(gpus)) {
    std::string why;
    if (m.gate.experts % layout.expert)
      why = "Ep = " + std::to_string(layout.expert) + " does not divide the " +
            std::to_string(m.gate.experts) + " experts";
    else if (m.heads % layout.tensor)
      why = "T = " + std::to_string(layout.tensor) + " does not divide the " +
            std::to_string(m.heads) + " heads";
    else if (m.ffn() % layout.tensor)
      why = "T = " + std::to_string(layout.tensor) + " does not divide the FFN width " +
            std::to_string(m.ffn());
    if (!why.empty()) {
      if (refused) refused->push_back({layout, "", why});
      continue;
    }
    for (const char* name : systems) {
      auto system = parse_system(name, "search");
      if (layout.tensor == 1 && (system.dtd || system.reduce_scatter)) continue;  // no-ops
      if (layout.tensor == 1) system.name = system.cac ? "deepspeed-moe+cac" : "deepspeed-moe";
      Candidate c;
      // The point as the experiments make it (DeepSpeed-MoE's tensor ranks become data ranks).
      const int data_ranks =
          layout.expert * layout.data * (system.tensor_parallel ? 1 : layout.tensor);
      if (global_batch % (config.train.data.micro_batch * data_ranks) != 0) {
        if (left_out) ++*left_out;
        if (refused)
          refused->push_back({layout, system.name,
                              "micro_batch " + std::to_string(config.train.data.micro_batch) +
                                  " x " + std::to_string(data_ranks) +
                                  " data ranks does not divide the global batch " +
                                  std::to_string(global_batch)});
        continue;
      }
      c.point = make_point(config, system, layout, config.train, global_batch);
      c.point.budget = static_cast<std::int64_t>(cluster.memory_bytes);
      const StepShape s = shape_of(c.point, cluster);
      c.time = step_time(s, cluster);
      c.peak = step_memory(s).total;
      c.fits = static_cast<double>(c.peak) <= cluster.memory_bytes;
      c.result = project(c.point, cluster);
      out.push_back(c);
    }
  }
  rank(out);
  return out;
}

void rank(std::vector<Candidate>& candidates) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.fits != b.fits) return a.fits;
                     return a.time.total() < b.time.total();
                   });
}

namespace {
// The rows of projected points carry backend "projected:<cluster>" and no timed iterations.
ExperimentConfig labelled_for(const ExperimentConfig& config, const Cluster& cluster) {
  ExperimentConfig labelled = config;
  labelled.backend = "projected:" + cluster.name;
  labelled.iters = 0;
  labelled.warmup = 0;
  return labelled;
}
}  // namespace

CsvTable project_plan(const ExperimentConfig& config, const Cluster& cluster,
                      const std::string& where, const std::string& command,
                      std::vector<Point>* points) {
  Plan plan = plan_for(config.experiment)(config, where, std::numeric_limits<int>::max());
  CsvTable table = result_table();
  const ExperimentConfig labelled = labelled_for(config, cluster);
  for (std::size_t i = 0; i < plan.points.size(); ++i) {
    // Every projected row is judged against the cluster's memory (the fits column), the
    // memory experiment's against its own budget.
    if (plan.points[i].budget < 0)
      plan.points[i].budget = static_cast<std::int64_t>(cluster.memory_bytes);
    auto result = project(plan.points[i], cluster);
    print_progress(static_cast<int>(i), static_cast<int>(plan.points.size()), plan.points[i],
                   result);
    const auto budget = static_cast<std::uint64_t>(plan.points[i].budget);
    std::printf(
        "      memory: peak %s per rank, %s %s: %s\n", format_bytes(result.peak_total).c_str(),
        budget == static_cast<std::uint64_t>(cluster.memory_bytes) ? "device" : "budget",
        format_bytes(budget).c_str(), result.peak_total <= budget ? "fits" : "does not fit");
    add_result(table, labelled, plan.points[i], result, command);
  }
  *points = std::move(plan.points);
  return table;
}

int search_global_batch(const ExperimentConfig& config, int given, const std::string& where) {
  int global_batch = given;
  if (global_batch == 0) global_batch = config.global_batch;
  if (global_batch == 0 && config.ep > 0 && config.dp > 0)
    global_batch =
        config.train.data.micro_batches * config.train.data.micro_batch * config.ep * config.dp;
  if (global_batch == 0)
    throw ConfigError(where +
                      ": the search compares layouts at one global batch: give "
                      "--global-batch, data.global_batch, or layout.ep and layout.dp");
  return global_batch;
}

CsvTable print_search(const ExperimentConfig& config, const std::vector<Candidate>& candidates,
                      int top, const Cluster& cluster, const std::string& command) {
  std::printf("%4s %-18s %3s %3s %4s %6s %10s %10s %10s %10s %5s\n", "rank", "system", "T", "Ep",
              "D", "micro", "ms/iter", "compute", "comm", "peak GB", "fits");
  CsvTable table = result_table();
  const ExperimentConfig labelled = labelled_for(config, cluster);
  // The --top rows, printed and written: the CSV stays small.
  for (std::size_t i = 0; i < candidates.size() && static_cast<int>(i) < top; ++i) {
    const auto& c = candidates[i];
    std::printf("%4zu %-18s %3d %3d %4d %6d %10.1f %10.1f %10.1f %10.2f %5s\n", i + 1,
                c.point.system.name.c_str(), c.point.layout.tensor, c.point.layout.expert,
                c.point.layout.data, c.point.train.data.micro_batches, c.time.total() * 1e3,
                c.time.compute * 1e3, c.time.communication * 1e3, c.peak / 1e9,
                c.fits ? "yes" : "no");
    add_result(table, labelled, c.point, c.result, command);  // in rank order
  }
  return table;
}

void print_refused(const std::vector<Refused>& refused, const std::vector<Candidate>& candidates,
                   const Cluster& cluster, int top) {
  auto name = [](const Layout& l, const std::string& system) {
    return std::to_string(l.tensor) + " x " + std::to_string(l.expert) + " x " +
           std::to_string(l.data) +
           (system.empty() ? std::string(" (every system)") : " " + system);
  };
  int unfit = 0;
  for (const auto& c : candidates) {
    if (c.fits) continue;
    if (unfit++ == top) break;
    std::printf("# refused: T x Ep x D %s: projected peak %.2f GB exceeds the device's %.2f GB\n",
                name(c.point.layout, c.point.system.name).c_str(), c.peak / 1e9,
                cluster.memory_bytes / 1e9);
  }
  for (const auto& r : refused)
    std::printf("# refused: T x Ep x D %s: %s\n", name(r.layout, r.system).c_str(),
                r.reason.c_str());
}

}  // namespace ted::experiments
