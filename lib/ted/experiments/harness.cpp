#include "ted/experiments/harness.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <limits>
#include <utility>

#include <mpi.h>
#include <sched.h>
#include <unistd.h>

#include "ted/app/app_main.hpp"
#include "ted/app/check.hpp"
#include "ted/backend/registry.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/parallel.hpp"
#include "ted/core/system.hpp"
#include "ted/core/units.hpp"
#include "ted/grid/ted_groups.hpp"
#include "ted/model/gpt.hpp"
#include "ted/projection/cluster.hpp"
#include "ted/projection/fit.hpp"
#include "ted/train/trainer.hpp"

namespace ted::experiments {

ConfigSchema ExperimentConfig::schema() {
  ConfigSchema s = train.schema();
  s.add("experiment", &experiment);
  s.add("run.warmup", &warmup);
  s.add("run.iters", &iters);
  s.add("run.csv", &csv);
  s.add("layout.tp", &tp);
  s.add("layout.ep", &ep);
  s.add("layout.dp", &dp);
  s.add("systems", &systems);
  s.add("sweep.ranks", &sweep_ranks);
  s.add("sweep.tp", &sweep_tp);
  s.add("sweep.ep", &sweep_ep);
  s.add("sweep.hidden", &sweep_hidden);
  s.add("sweep.heads", &sweep_heads);
  s.add("sweep.layers", &sweep_layers);
  s.add("family.hidden", &family_hidden);
  s.add("family.heads", &family_heads);
  s.add("family.layers", &family_layers);
  s.add("sweep.experts", &sweep_experts);
  s.add("sweep.global_batch", &sweep_global_batch);
  s.add("sweep.tile", &sweep_tile);
  s.add("memory.budget_bytes", &budget_bytes);
  s.add("data.global_batch", &global_batch);
  s.add("largest.gpus", &largest_gpus);
  s.add("largest.max_tp", &largest_max_tp);
  s.add("largest.max_experts", &largest_max_experts);
  return s;
}

namespace {
// The digits after "overlap" in a system name: none (the YAML's parallel.overlap, 0 here) or a
// chunk count of at least 2. False when they are not that.
bool overlap_chunks(const std::string& digits, int* chunks) {
  if (digits.empty()) {
    *chunks = 0;
    return true;
  }
  if (digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *chunks = std::stoi(digits);
  return *chunks >= 2;
}
}  // namespace

System parse_system(const std::string& name, const std::string& where) {
  System s;
  s.name = name;
  if (name == "deepspeed-moe") {
    s.tensor_parallel = false;
  } else if (name == "ted") {
    s.dtd = s.cac = true;
  } else if (name == "ted-baseline") {
  } else if (name.rfind("ted+", 0) == 0) {
    std::string rest = name.substr(4);
    std::size_t start = 0;
    while (start <= rest.size()) {
      std::size_t plus = rest.find('+', start);
      std::string part = rest.substr(start, plus == std::string::npos ? plus : plus - start);
      if (part == "dtd")
        s.dtd = true;
      else if (part == "cac")
        s.cac = true;
      else if (part == "rs")
        s.reduce_scatter = true;
      else if (part.rfind("overlap", 0) == 0 && overlap_chunks(part.substr(7), &s.overlap))
        ;
      else
        throw ConfigError(where + ": system '" + name + "' has an unknown part '" + part +
                          "' (expected dtd, cac, rs, or overlap with an optional chunk count "
                          "of at least 2)");
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    // ted+overlap[N] alone is ted (DTD + CAC) with the overlap, as the ablation compares them.
    if (s.overlap != 1 && !s.dtd && !s.cac && !s.reduce_scatter) s.dtd = s.cac = true;
    if (s.reduce_scatter && !s.dtd)
      throw ConfigError(where + ": system '" + name + "': rs needs dtd");
  } else {
    throw ConfigError(where + ": unknown system '" + name +
                      "' (expected deepspeed-moe, ted-baseline, ted, or ted+dtd/+cac/+rs/"
                      "+overlap[N])");
  }
  return s;
}

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             const std::string& experiment) {
  ExperimentConfig c;
  ConfigSchema schema = c.schema();
  schema.load_yaml(path);
  for (const auto& assignment : overrides) schema.set(assignment);
  const std::string where = path + (overrides.empty() ? "" : " with --set");
  auto fail = [&](const std::string& what) { throw ConfigError(where + ": " + what); };
  if (!experiment.empty() && c.experiment != experiment)
    fail("key 'experiment' must be '" + experiment + "' for this program, got '" + c.experiment +
         "'");
  c.backend = c.train.run.backend;
  auto count = [&](long long value, long long minimum, long long maximum, const char* key) {
    try {
      in_range(value, minimum, maximum, key);
    } catch (const ConfigError& e) {
      fail(std::string("key ") + e.what());
    }
  };
  count(c.warmup, 0, 1000000, "run.warmup");
  count(c.iters, 0, 1000000, "run.iters");
  count(c.tp, 1, 1 << 24, "layout.tp");
  count(c.ep, 1, 1 << 24, "layout.ep");
  count(c.dp, 0, 1 << 24, "layout.dp (0: the launched ranks over tp x ep)");
  count(c.budget_bytes, 0, std::numeric_limits<std::int64_t>::max(), "memory.budget_bytes");
  count(c.global_batch, 0, 1 << 30, "data.global_batch (0: data.micro_batches per rank)");
  count(c.largest_max_tp, 1, 1 << 24, "largest.max_tp");
  count(c.largest_max_experts, 1, 1 << 24, "largest.max_experts");
  for (const auto* list : {&c.sweep_ranks, &c.sweep_tp, &c.sweep_ep, &c.sweep_hidden,
                           &c.sweep_heads, &c.sweep_layers, &c.sweep_experts, &c.sweep_global_batch,
                           &c.family_hidden, &c.family_heads, &c.family_layers, &c.largest_gpus})
    for (int value : *list)
      if (value < 1)
        fail("keys 'sweep.*', 'family.*' and 'largest.gpus' list positive numbers, got " +
             std::to_string(value));
  for (int value : c.sweep_tile)
    if (value < 0)
      fail("key 'sweep.tile' lists tile sizes (0: untiled), got " + std::to_string(value));
  if (c.systems.empty()) fail("key 'systems' must list at least one system");
  for (const auto& name : c.systems) parse_system(name, where + ", key 'systems'");
  try {
    c.train.validate();
  } catch (const ConfigError& e) {
    fail(e.what());
  }
  return c;
}

Point make_point(const ExperimentConfig& config, const System& system, Layout layout,
                 const train::TrainConfig& base, int global_batch, const std::string& where) {
  Point p;
  p.system = system;
  if (!system.tensor_parallel) {  // DeepSpeed-MoE: the tensor ranks become data ranks
    layout.data *= layout.tensor;
    layout.tensor = 1;
  }
  p.layout = layout;
  p.train = base;
  auto& par = p.train.parallel;
  par.tp = layout.tensor;
  par.ep = layout.expert;
  par.dp = layout.data;
  par.dtd = system.dtd;
  par.cac = system.cac;
  par.reduce_scatter = system.reduce_scatter;
  par.overlap = system.overlap == 1  ? 1
                : system.overlap > 1 ? system.overlap
                                     : base.parallel.overlap;
  if (par.overlap < 2 && system.overlap == 0)
    throw ConfigError(where + ": system " + system.name +
                      " takes its chunk count from parallel.overlap, which is " +
                      std::to_string(par.overlap) + "; give at least 2 (or name it, ted+overlap4)");
  if (system.cac) p.train.model.checkpoint = true;
  p.train.steps = std::max(1, config.warmup + config.iters);
  if (global_batch > 0) {
    const int per_step = p.train.data.micro_batch * layout.expert * layout.data;
    if (global_batch % per_step != 0)
      throw ConfigError(where + ": a global batch of " + std::to_string(global_batch) +
                        " sequences does not divide into micro-batches of " +
                        std::to_string(p.train.data.micro_batch) + " over the " +
                        std::to_string(layout.expert * layout.data) + " data-parallel ranks of " +
                        system.name + " at " + layout.to_string());
    p.train.data.micro_batches = global_batch / per_step;
  }
  const auto& m = p.train.model;
  p.model_name = "h" + std::to_string(m.hidden) + "-L" + std::to_string(m.layers) + "-E" +
                 std::to_string(m.gate.experts);
  return p;
}

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr CollectiveOp kOps[4] = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                                  CollectiveOp::reduce_scatter, CollectiveOp::all_to_all};
// The result's per-kind columns, in their order.
constexpr CollectiveOp kReportedOps[4] = {CollectiveOp::all_reduce, CollectiveOp::all_to_all,
                                          CollectiveOp::all_gather, CollectiveOp::reduce_scatter};
constexpr GroupKind kGroups[4] = {GroupKind::tensor, GroupKind::expert, GroupKind::expert_data,
                                  GroupKind::nonexpert_data};

// The most ranks of `comm` on one node per CPU they may run on (the union of their affinity
// masks). Above 1 the OS time-slices the ranks. Collective over `comm`.
double ranks_per_core(MPI_Comm comm) {
  MPI_Comm node;
  TED_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int size = 1;
  MPI_Comm_size(node, &size);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) CPU_SET(0, &mask);
  cpu_set_t cpus;
  TED_CHECK_MPI(
      MPI_Allreduce(&mask, &cpus, static_cast<int>(sizeof mask), MPI_BYTE, MPI_BOR, node));
  MPI_Comm_free(&node);
  double mine = static_cast<double>(size) / std::max(1, CPU_COUNT(&cpus)), most = 0;
  TED_CHECK_MPI(MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, comm));
  return most;
}
}  // namespace

const std::string& run_id() {
  static const std::string id = [] {
    const std::time_t t = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&t, &utc);
    char text[64];
    const std::size_t n = std::strftime(text, sizeof text, "%Y%m%dT%H%M%SZ", &utc);
    return std::string(text, n) + "-" + std::to_string(static_cast<long>(::getpid()));
  }();
  return id;
}

Result measure(const Point& point, Communicator& world, int warmup, int iters) {
  const int G = point.layout.world_size();
  TED_CHECK(G <= world.size(), "point needs more ranks than launched");
  const bool active = world.rank() < G;
  auto ranks = world.split(active ? 0 : 1, world.rank(), GroupKind::custom);
  Result result;
  if (active) {
    const auto& run = point.train.run;
    auto* host = dynamic_cast<MpiCommunicator*>(ranks.get());
    TED_CHECK(host != nullptr, "the experiments' world must be MPI on host memory");
    // Over the point's ranks only: the others are not here.
    auto base = make_device(parse_device_kind(run.backend), host->native_handle());
    TrackingDevice device(*base);
    auto device_world = make_device_communicator(parse_comm_backend(run.comm), device,
                                                 host->native_handle(), nullptr);
    result.device = device.name();
    result.threads = parallel_threads();
    result.comm = device_world->name();
    ProcessGrid grid(G, point.layout);
    TedGroups groups(*ranks, *device_world, grid);
    Ledger ledger;
    for (auto kind : kGroups) groups.group(kind).set_ledger(&ledger);
    train::Trainer trainer(point.train, device, G > 1 ? &groups : nullptr);
    const int steps = iters == 0 ? 1 : warmup + iters;
    std::vector<double> times, comms, op_times[4];
    double flops = 0;
    for (int step = 0; step < steps; ++step) {
      ledger.clear();
      ranks->barrier();
      double start = now();
      auto record = trainer.step(step);
      // This rank's step, its collectives, and those by reported kind (every group).
      double mine[6] = {now() - start, ledger.total().seconds};
      for (int i = 0; i < 4; ++i) mine[2 + i] = ledger.total(kReportedOps[i]).seconds;
      mine[3] += ledger.total(CollectiveOp::all_to_all_v).seconds;
      std::vector<double> all(6 * static_cast<std::size_t>(G));
      ranks->all_gather(mine, all.data(), 6, DataType::f64);
      result.final_loss = record.loss;
      if (iters > 0 && step >= warmup) {
        // The step lasts as long as its slowest rank; the collective time and its kinds are
        // one rank's, the one with the most, so that the kinds add up to it.
        double slowest = 0;
        std::size_t most = 0;
        for (std::size_t r = 0; r < static_cast<std::size_t>(G); ++r) {
          slowest = std::max(slowest, all[6 * r]);
          if (all[6 * r + 1] > all[6 * most + 1]) most = r;
        }
        times.push_back(slowest * 1e3);
        comms.push_back(all[6 * most + 1] * 1e3);
        for (int i = 0; i < 4; ++i) op_times[i].push_back(all[6 * most + 2 + i] * 1e3);
        flops = record.flops;
      }
    }
    for (int i = 0; i < 4; ++i)
      for (auto kind : kGroups) result.bytes_sent[i] += ledger.total(kOps[i], kind).bytes_sent;
    result.all_to_all_calls = ledger.total(CollectiveOp::all_to_all, GroupKind::expert).calls;
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c)
      result.peak[c] = device.usage(static_cast<MemoryCategory>(c)).peak;
    result.peak_total = device.total().peak;
    std::uint64_t peaks[kMemoryCategoryCount + 1];
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) peaks[c] = result.peak[c];
    peaks[kMemoryCategoryCount] = result.peak_total;
    ranks->all_reduce(peaks, peaks, kMemoryCategoryCount + 1, DataType::i64, ReduceOp::max);
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) result.peak[c] = peaks[c];
    result.peak_total = peaks[kMemoryCategoryCount];
    ranks->all_reduce(&flops, &flops, 1, DataType::f64);  // summed over ranks
    for (const auto& spec : trainer.params().specs()) {
      std::uint64_t n = 1;
      for (int d : spec.shape) n *= static_cast<std::uint64_t>(d);
      result.parameters += n;
    }
    if (run.backend == "cpu") result.ranks_per_core = ranks_per_core(host->native_handle());
    if (!times.empty()) {
      split_time(times, comms, op_times, &result);
      const auto& t = point.train;
      double tokens = static_cast<double>(t.data.micro_batch) * t.data.micro_batches *
                      point.layout.expert * point.layout.data * t.model.seq_len;
      result.tokens_per_s = tokens / (result.time_ms.median * 1e-3);
      result.tflops_per_rank = flops / G / (result.time_ms.median * 1e-3) / 1e12;
    }
  }
  world.barrier();
  return result;
}

void split_time(const std::vector<double>& times, const std::vector<double>& comms,
                const std::vector<double> (&op_times)[4], Result* r) {
  TED_CHECK(!times.empty() && comms.size() == times.size(), "one collective time per iteration");
  r->time_ms = summarize(times);
  std::vector<std::size_t> order(times.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
  // The lower middle iteration: its time is at most the (interpolated) median, and a rank's
  // collectives lie inside its step, so its comm fits in the median time. The clamp only
  // guards inputs that break that.
  const std::size_t median = order[(order.size() - 1) / 2];
  const double scale = comms[median] > r->time_ms.median && comms[median] > 0
                           ? r->time_ms.median / comms[median]
                           : 1.0;
  r->comm_ms = comms[median] * scale;
  r->compute_ms = r->time_ms.median - r->comm_ms;
  double kinds = 0;
  for (int i = 0; i < 4; ++i) {
    TED_CHECK(op_times[i].size() == times.size(), "one time per kind per iteration");
    kinds += r->op_ms[i] = op_times[i][median] * scale;
  }
  r->other_ms = std::max(r->compute_ms, r->time_ms.median - kinds);
}

CsvTable result_table() {
  std::vector<std::string> columns = {"experiment",
                                      "system",
                                      "G",
                                      "T",
                                      "Ep",
                                      "D",
                                      "model",
                                      "layers",
                                      "hidden",
                                      "heads",
                                      "experts",
                                      "top_k",
                                      "parameters",
                                      "seq_len",
                                      "micro_batch",
                                      "micro_batches",
                                      "backend",
                                      "dtype",
                                      "grad_dtype",
                                      "comm",
                                      "device",
                                      "checkpoint",
                                      "dtd",
                                      "cac",
                                      "reduce_scatter",
                                      "warmup",
                                      "iters",
                                      "time_ms_median",
                                      "time_ms_p10",
                                      "time_ms_p90",
                                      "compute_ms",
                                      "comm_ms",
                                      "all_reduce_ms",
                                      "all_to_all_ms",
                                      "all_gather_ms",
                                      "reduce_scatter_ms",
                                      "other_ms",
                                      "pct_of_peak",
                                      "tokens_per_s",
                                      "tflops_per_rank",
                                      "all_reduce_bytes",
                                      "all_gather_bytes",
                                      "reduce_scatter_bytes",
                                      "all_to_all_bytes",
                                      "all_to_all_calls"};
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c)
    columns.push_back("peak_" + std::string(to_string(static_cast<MemoryCategory>(c))) + "_bytes");
  // threads, slurm_job, ranks_per_core and run_id last, so older CSVs gain them as trailing
  // columns.
  for (const char* name :
       {"peak_total_bytes", "budget_bytes", "fits", "status", "final_loss", "git_revision",
        "command", "threads", "slurm_job", "ranks_per_core", "run_id"})
    columns.push_back(name);
  return CsvTable(columns);
}

void add_result(CsvTable& table, const ExperimentConfig& config, const Point& point,
                const Result& r, const std::string& command) {
  const std::int64_t budget = point.budget;
  const auto& m = point.train.model;
  const auto& par = point.train.parallel;
  table.row()
      .add(config.experiment)
      .add(point.system.name)
      .add(point.layout.world_size())
      .add(point.layout.tensor)
      .add(point.layout.expert)
      .add(point.layout.data)
      .add(point.model_name)
      .add(m.layers)
      .add(m.hidden)
      .add(m.heads)
      .add(m.gate.experts)
      .add(m.gate.top_k)
      .add(static_cast<unsigned long long>(r.parameters))
      .add(m.seq_len)
      .add(point.train.data.micro_batch)
      .add(point.train.data.micro_batches)
      .add(config.backend)
      .add(point.train.run.dtype)
      .add(point.train.model.grad_dtype)
      .add(r.comm)
      .add(r.device)
      .add(int(m.checkpoint))
      .add(int(par.dtd))
      .add(int(par.cac))
      .add(int(par.reduce_scatter))
      .add(config.warmup)
      .add(config.iters)
      .add(r.time_ms.median)
      .add(r.time_ms.p10)
      .add(r.time_ms.p90)
      .add(r.compute_ms)
      .add(r.comm_ms);
  for (double ms : r.op_ms) table.add(ms);
  table.add(r.other_ms);
  if (r.pct_of_peak >= 0)
    table.add(r.pct_of_peak);
  else
    table.add("");
  table.add(r.tokens_per_s).add(r.tflops_per_rank);
  for (auto bytes : r.bytes_sent) table.add(static_cast<unsigned long long>(bytes));
  table.add(static_cast<unsigned long long>(r.all_to_all_calls));
  for (auto peak : r.peak) table.add(static_cast<unsigned long long>(peak));
  table.add(static_cast<unsigned long long>(r.peak_total));
  if (budget >= 0)
    table.add(static_cast<long long>(budget))
        .add(int(r.ran() && r.peak_total <= static_cast<std::size_t>(budget)));
  else
    table.add("").add("");
  table.add(r.status);
  if (r.status.rfind("projected", 0) == 0)
    table.add("");  // nothing trained: no loss
  else
    table.add(r.final_loss);
  table.add(git_revision()).add(command);
  if (r.threads > 0)
    table.add(r.threads);
  else
    table.add("");
  table.add(slurm_job());
  if (r.ranks_per_core > 0)
    table.add(r.ranks_per_core);
  else
    table.add("");
  table.add(run_id());
}

void append_rows(const CsvTable& table, const std::string& path) {
  append_csv(table, path);
}

bool fixed_layout(const ExperimentConfig& config, const std::string& where, int world_size,
                  Layout* layout, std::vector<std::string>* skipped) {
  const int ranks = config.dp > 0 ? config.tp * config.ep * config.dp : world_size;
  try {
    *layout = resolve_layout(ranks, config.tp, config.ep, config.dp);
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": keys 'layout.tp/ep/dp': " + e.what());
  }
  if (ranks <= world_size) return true;
  skipped->push_back("skipping " + layout->to_string() + ": needs " + std::to_string(ranks) +
                     " ranks, " + std::to_string(world_size) + " launched");
  return false;
}

Plan sweep_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  auto fail = [&](const std::string& what) { throw ConfigError(where + ": " + what); };
  const auto& ranks = config.sweep_ranks;
  if (ranks.empty()) fail("key 'sweep.ranks' must list the rank count of every point");
  auto check_length = [&](const char* key, const std::vector<int>& list, bool required) {
    if ((required || !list.empty()) && list.size() != ranks.size())
      fail("key '" + std::string(key) + "' has " + std::to_string(list.size()) +
           " entries, but 'sweep.ranks' has " + std::to_string(ranks.size()) +
           " (one entry per point)");
  };
  check_length("sweep.tp", config.sweep_tp, true);
  check_length("sweep.ep", config.sweep_ep, true);
  check_length("sweep.hidden", config.sweep_hidden, false);
  check_length("sweep.heads", config.sweep_heads, false);
  check_length("sweep.layers", config.sweep_layers, false);
  check_length("sweep.experts", config.sweep_experts, false);
  check_length("sweep.global_batch", config.sweep_global_batch, false);
  check_length("sweep.tile", config.sweep_tile, false);
  Plan plan;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string point = "sweep point " + std::to_string(i + 1);
    Layout layout;
    try {
      layout = resolve_layout(ranks[i], config.sweep_tp[i], config.sweep_ep[i], 0);
    } catch (const ConfigError& e) {
      fail("keys 'sweep.ranks/tp/ep', " + point + ": " + e.what());
    }
    train::TrainConfig train = config.train;
    if (!config.sweep_hidden.empty()) train.model.hidden = config.sweep_hidden[i];
    if (!config.sweep_heads.empty()) train.model.heads = config.sweep_heads[i];
    if (!config.sweep_layers.empty()) train.model.layers = config.sweep_layers[i];
    if (!config.sweep_experts.empty()) train.model.gate.experts = config.sweep_experts[i];
    if (!config.sweep_tile.empty()) train.parallel.tile_elems = config.sweep_tile[i];
    try {
      train.model.validate();
      train.model.validate_batch(train.data.micro_batch);
    } catch (const ConfigError& e) {
      fail("keys 'sweep.hidden/heads/layers/experts', " + point + ": " + e.what());
    }
    const int global_batch =
        config.sweep_global_batch.empty() ? config.global_batch : config.sweep_global_batch[i];
    if (ranks[i] > world_size) {
      plan.skipped.push_back("skipping " + point + " (G=" + std::to_string(ranks[i]) + ", " +
                             layout.to_string() + "): needs " + std::to_string(ranks[i]) +
                             " ranks, " + std::to_string(world_size) + " launched");
      continue;
    }
    for (const auto& name : config.systems)
      plan.points.push_back(make_point(config, parse_system(name, where), layout, train,
                                       global_batch, where + ", " + point));
  }
  return plan;
}

Plan ablation_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  Plan plan;
  Layout layout;
  if (!fixed_layout(config, where, world_size, &layout, &plan.skipped)) return plan;
  for (const auto& name : config.systems)
    plan.points.push_back(make_point(config, parse_system(name, where), layout, config.train,
                                     config.global_batch, where));
  return plan;
}

Plan strong_scaling_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  Plan plan = sweep_plan(config, where, world_size);
  // A global batch already shares the step's sequences among the data-parallel ranks.
  if (config.global_batch > 0 || !config.sweep_global_batch.empty()) return plan;
  for (auto& point : plan.points) {
    const int data_parallel = point.layout.expert * point.layout.data;
    int& micro = point.train.data.micro_batches;
    if (micro % data_parallel != 0)
      throw ConfigError(where + ": key 'data.micro_batches' (" + std::to_string(micro) +
                        ", the whole step's) must divide over the " +
                        std::to_string(data_parallel) + " data-parallel ranks of " +
                        point.system.name + " at " + point.layout.to_string());
    micro /= data_parallel;
  }
  return plan;
}

namespace {

// The family's base models (checked: one entry per model, each a valid model).
std::vector<train::TrainConfig> family_models(const ExperimentConfig& config,
                                              const std::string& where) {
  const auto& hidden = config.family_hidden;
  if (config.family_heads.size() != hidden.size() || config.family_layers.size() != hidden.size())
    throw ConfigError(where +
                      ": keys 'family.hidden/heads/layers' must have one entry per model (" +
                      std::to_string(hidden.size()) + ")");
  if (config.budget_bytes <= 0)
    throw ConfigError(where + ": key 'memory.budget_bytes' must be positive with a family");
  std::vector<train::TrainConfig> models;
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    train::TrainConfig train = config.train;
    train.model.hidden = hidden[i];
    train.model.heads = config.family_heads[i];
    train.model.layers = config.family_layers[i];
    try {
      train.model.validate();
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": keys 'family.*', model " + std::to_string(i + 1) + ": " +
                        e.what());
    }
    models.push_back(train);
  }
  return models;
}

// The largest trainable model: for each GPU count and system, every family model with every
// power-of-two expert count up to largest.max_experts (expert-parallel degree = experts) and
// every tensor degree up to largest.max_tp that lays it out (TED; DeepSpeed-MoE has none) and,
// as the paper's rule, stays inside a node of run.cluster; the one with the most parameters
// whose projected peak fits memory.budget_bytes (ties: the smaller peak). When none fits, the
// candidate with the smallest peak, so its row says by how much.
Plan largest_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  if (config.family_hidden.empty())
    throw ConfigError(where + ": keys 'largest.*' need the base models in 'family.*'");
  const auto models = family_models(config, where);
  const auto budget = static_cast<std::uint64_t>(config.budget_bytes);
  int max_tp = config.largest_max_tp;
  if (!config.train.run.cluster.empty())
    max_tp = std::min(max_tp, projection::Cluster::load(config.train.run.cluster).devices_per_node);
  Plan plan;
  for (int gpus : config.largest_gpus) {
    if (gpus > world_size) {
      plan.skipped.push_back("skipping the largest model on " + std::to_string(gpus) +
                             " GPUs: needs " + std::to_string(gpus) + " ranks, " +
                             std::to_string(world_size) + " launched");
      continue;
    }
    for (const auto& name : config.systems) {
      const System system = parse_system(name, where);
      struct Best {
        Point point;
        std::uint64_t parameters = 0, peak = 0;
        bool found = false;
      } fitting, smallest;
      for (const auto& base : models)
        for (int experts = 2; experts <= config.largest_max_experts; experts *= 2)
          for (int tp = 1; tp <= (system.tensor_parallel ? max_tp : 1); ++tp) {
            if (gpus % (tp * experts) != 0) continue;
            train::TrainConfig train = base;
            train.model.gate.experts = experts;
            const Layout layout{tp, experts, gpus / (tp * experts)};
            Point point = make_point(config, system, layout, train);
            const auto& par = point.train.parallel;
            try {
              model::check_layout(point.train.model, tp, experts, par.dtd, par.reduce_scatter,
                                  par.cac, par.cac_all_reduce);
              point.train.model.validate_batch(point.train.data.micro_batch);
            } catch (const ConfigError&) {
              continue;  // this tensor degree does not split the model
            }
            const std::uint64_t peak = projection::projected_peak(point.train, point.layout);
            const projection::ParameterParts whole =
                projection::parameter_parts(point.train.model, Layout{1, 1, 1}, true);
            const std::uint64_t parameters = whole.dense + whole.expert;
            if (peak <= budget && (!fitting.found || parameters > fitting.parameters ||
                                   (parameters == fitting.parameters && peak < fitting.peak)))
              fitting = {point, parameters, peak, true};
            if (!smallest.found || peak < smallest.peak) smallest = {point, parameters, peak, true};
          }
      if (!smallest.found)
        throw ConfigError(where + ": no family model lays out on " + std::to_string(gpus) +
                          " GPUs for " + name);
      Point chosen = fitting.found ? fitting.point : smallest.point;
      chosen.budget = config.budget_bytes;
      plan.points.push_back(chosen);
    }
  }
  return plan;
}

}  // namespace

Plan memory_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  if (!config.largest_gpus.empty()) return largest_plan(config, where, world_size);
  Plan plan = sweep_plan(config, where, world_size);
  const auto& hidden = config.family_hidden;
  if (hidden.empty()) return plan;
  const auto models = family_models(config, where);
  Layout layout;
  if (!fixed_layout(config, where, world_size, &layout, &plan.skipped)) return plan;
  for (const auto& train : models) {
    for (const auto& name : config.systems) {
      Point point =
          make_point(config, parse_system(name, where), layout, train, config.global_batch, where);
      point.budget = config.budget_bytes;
      plan.points.push_back(point);
    }
  }
  return plan;
}

Planner plan_for(const std::string& experiment) {
  if (experiment == "ablation") return ablation_plan;
  if (experiment == "weak_scaling") return sweep_plan;
  if (experiment == "strong_scaling") return strong_scaling_plan;
  if (experiment == "memory") return memory_plan;
  throw ConfigError("unknown experiment '" + experiment +
                    "' (expected ablation, weak_scaling, strong_scaling or memory)");
}

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
    const auto& par = point.train.parallel;
    try {
      model::check_layout(point.train.model, point.layout.tensor, point.layout.expert, par.dtd,
                          par.reduce_scatter, par.cac, par.cac_all_reduce);
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
  auto device = make_device(parse_device_kind(run.backend));
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
                    const std::string& description, const Planner& planner,
                    const Summary& summary) {
  CLI::App app{description, "ted_" + experiment};
  std::string config_path, csv, backend, dtype, comm;
  std::vector<std::string> overrides;
  int iters = 0, point = 0;
  CheckMode check;
  app.add_option("-c,--config", config_path, "experiment YAML (experiments/" + experiment + "/)")
      ->required();
  app.add_option("--set", overrides, "override a key: section.key=value (repeatable)");
  app.add_option("--iters", iters, "timed iterations (run.iters; 0: one untimed step)");
  app.add_option("--csv", csv,
                 "CSV to append to (run.csv; default results/local/<experiment>/<config>.csv)");
  app.add_option("--backend", backend, "cpu or cuda (run.backend)");
  app.add_option("--dtype", dtype, "fp32, bf16 or fp16 (run.dtype; 16-bit: fp32 masters)");
  app.add_option("--comm", comm, "mpi or nccl: what carries device buffers (run.comm)");
  app.add_option("--point", point,
                 "run only the K-th point of the plan for these ranks, as the progress line "
                 "numbers them (a Slurm array task's index)")
      ->check(CLI::Range(1, 1 << 24));
  add_check_options(app, check);
  return run_app(
      argc, argv, app,
      [&](MpiSession& mpi) {
        // The options are --set overrides like any other, so the config's rules judge them.
        if (app.count("--iters")) overrides.push_back("run.iters=" + std::to_string(iters));
        if (app.count("--csv")) overrides.push_back("run.csv=" + csv);
        if (app.count("--backend")) overrides.push_back("run.backend=" + backend);
        if (app.count("--dtype")) overrides.push_back("run.dtype=" + dtype);
        if (app.count("--comm")) overrides.push_back("run.comm=" + comm);
        ExperimentConfig config = load_config(config_path, overrides, experiment);
        if (config.csv.empty())
          config.csv = "results/local/" + experiment + "/" +
                       std::filesystem::path(config_path).stem().string() + ".csv";
        const std::string where = config_path + (overrides.empty() ? "" : " with --set");
        const bool rank0 = mpi.world_rank() == 0;
        auto check_output = [&] {  // after the inputs: their errors come first
          try {
            check_csv_appendable(result_table(), config.csv);
          } catch (const ConfigError& e) {
            throw ConfigError(where + ": key 'run.csv': " + e.what());
          }
        };
        if (check.enabled) {
          const int ranks = check.ranks_for(mpi.world_size());
          Plan plan = planner(config, where, ranks);
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
          require_backend(parse_device_kind(run.backend), parse_comm_backend(run.comm),
                          MPI_COMM_WORLD);
        } catch (const ConfigError& e) {
          throw ConfigError(config_path + ": keys 'run.backend/comm': " + e.what());
        }
        // Launched by scripts/emulated_cluster.sh: the rows record the emulated topology.
        if (const char* topology = std::getenv("TED_TOPOLOGY"))
          config.backend += std::string(" (") + topology + ")";
        Plan plan = planner(config, where, mpi.world_size());
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
          for (const auto& line : plan.skipped) std::printf("# %s\n", line.c_str());
        }
        auto world = MpiCommunicator::world(nullptr);
        const std::string command = command_line(argc, argv);
        std::vector<Result> results;
        std::size_t written = 0;
        for (std::size_t i = 0; i < plan.points.size(); ++i) {
          const Point& point = plan.points[i];
          if (verdicts[i].empty()) {
            results.push_back(measure(point, *world, config.warmup, config.iters));
          } else {  // never allocated: a row saying it does not fit, and the sweep goes on
            results.emplace_back();
            results.back().status = "not run: does not fit: " + verdicts[i];
          }
          if (!rank0) continue;
          // Each row is in the CSV as soon as it is measured: a run that dies later keeps it.
          CsvTable row = result_table();
          add_result(row, config, point, results.back(), command);
          append_rows(row, config.csv);
          ++written;
          print_progress(static_cast<int>(i), static_cast<int>(plan.points.size()), point,
                         results.back());
        }
        if (rank0 && written == 0) std::printf("# nothing measured: no CSV written\n");
        if (rank0 && written > 0) {
          if (summary) summary(plan.points, results);
          std::printf("# CSV: %s (%zu rows appended)\n", config.csv.c_str(), written);
        }
        return 0;
      },
      &check);
}

void print_progress(int index, int count, const Point& point, const Result& r) {
  std::printf("[%d/%d] %-16s G=%-3d %-14s %-12s ", index + 1, count, point.system.name.c_str(),
              point.layout.world_size(), point.layout.to_string().c_str(),
              point.model_name.c_str());
  if (!r.ran()) {
    std::printf("%s\n", r.status.c_str());
    std::fflush(stdout);
    return;
  }
  if (r.time_ms.median > 0)
    std::printf("%9.2f ms/iter (p10 %.2f p90 %.2f) comm %.2f ms, %.3g tok/s, ", r.time_ms.median,
                r.time_ms.p10, r.time_ms.p90, r.comm_ms, r.tokens_per_s);
  std::printf("a2a %s x %llu, peak %s", format_bytes(r.bytes_sent[3]).c_str(),
              static_cast<unsigned long long>(r.all_to_all_calls),
              format_bytes(r.peak_total).c_str());
  if (r.status.rfind("projected", 0) == 0)
    std::printf(", loss n/a (projected)\n");
  else
    std::printf(", loss %.4f\n", r.final_loss);
  // Said with every timed point of an oversubscribed run: its comm is partly waiting.
  if (r.ranks_per_core > 1 && r.time_ms.median > 0)
    std::printf(
        "      %.3g ranks per core (oversubscribed): comm %.2f ms includes waiting for ranks "
        "the OS has not scheduled, not only transfers\n",
        r.ranks_per_core, r.comm_ms);
  std::fflush(stdout);
}

}  // namespace ted::experiments
