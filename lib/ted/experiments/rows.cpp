#include "ted/experiments/rows.hpp"

#include <cstdio>
#include <ctime>

#include <unistd.h>

#include "ted/core/csv_columns.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/system.hpp"
#include "ted/core/units.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/routing/workload.hpp"

namespace ted::experiments {

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

namespace {

// What one row is read from.
struct ResultRow {
  const ExperimentConfig& config;
  const Point& point;
  const Result& result;
  const std::string& command;
};

CsvField or_empty(bool present, CsvField value) {
  return present ? std::move(value) : CsvField(std::string());
}

// A row measured here, not projected.
bool ran(const ResultRow& x) {
  return x.result.status.rfind("projected", 0) != 0;
}

// The experiments' CSV, declared once. threads, slurm_job, ranks_per_core, run_id, attention,
// the routing columns (workload .. rank_compute_ms_mean) and blas, blas_kernel are last, so
// older CSVs gained them as trailing columns.
CsvColumns<ResultRow> make_columns() {
  using R = const ResultRow&;
  using ll = long long;
  using ull = unsigned long long;
  CsvColumns<ResultRow> c;
  c.add("experiment", [](R x) { return x.config.experiment; });
  c.add("system", [](R x) { return x.point.system.name; });
  c.add("G", [](R x) { return ll(x.point.layout.world_size()); });
  c.add("T", [](R x) { return ll(x.point.layout.tensor); });
  c.add("Ep", [](R x) { return ll(x.point.layout.expert); });
  c.add("D", [](R x) { return ll(x.point.layout.data); });
  c.add("model", [](R x) { return x.point.model_name; });
  c.add("layers", [](R x) { return ll(x.point.train.model.layers); });
  c.add("hidden", [](R x) { return ll(x.point.train.model.hidden); });
  c.add("heads", [](R x) { return ll(x.point.train.model.heads); });
  c.add("experts", [](R x) { return ll(x.point.train.model.gate.experts); });
  c.add("top_k", [](R x) { return ll(x.point.train.model.gate.top_k); });
  c.add("parameters", [](R x) { return ull(x.result.parameters); });
  c.add("seq_len", [](R x) { return ll(x.point.train.model.seq_len); });
  c.add("micro_batch", [](R x) { return ll(x.point.train.data.micro_batch); });
  c.add("micro_batches", [](R x) { return ll(x.point.train.data.micro_batches); });
  c.add("backend", [](R x) { return x.config.backend; });
  c.add("dtype",
        [](R x) { return CsvField(std::string(precision_name(x.point.train.run.dtype))); });
  c.add("grad_dtype",
        [](R x) { return CsvField(std::string(precision_name(x.point.train.model.grad_dtype))); });
  c.add("comm", [](R x) { return x.result.comm; });
  c.add("device", [](R x) { return x.result.device; });
  c.add("checkpoint", [](R x) { return ll(x.point.train.model.checkpoint); });
  c.add("dtd", [](R x) { return ll(x.point.train.parallel.dtd); });
  c.add("cac", [](R x) { return ll(x.point.train.parallel.cac); });
  c.add("reduce_scatter", [](R x) { return ll(x.point.train.parallel.reduce_scatter); });
  c.add("warmup", [](R x) { return ll(x.config.warmup); });
  c.add("iters", [](R x) { return ll(x.config.iters); });
  c.add("time_ms_median", [](R x) { return x.result.time_ms.median; });
  c.add("time_ms_p10", [](R x) { return x.result.time_ms.p10; });
  c.add("time_ms_p90", [](R x) { return x.result.time_ms.p90; });
  c.add("compute_ms", [](R x) { return x.result.compute_ms; });
  c.add("comm_ms", [](R x) { return x.result.comm_ms; });
  // Result::op_ms's order.
  const char* kinds[4] = {"all_reduce", "all_to_all", "all_gather", "reduce_scatter"};
  for (int i = 0; i < 4; ++i)
    c.add(std::string(kinds[i]) + "_ms", [i](R x) { return x.result.op_ms[i]; });
  c.add("other_ms", [](R x) { return x.result.other_ms; });
  c.add("pct_of_peak",
        [](R x) { return or_empty(x.result.pct_of_peak >= 0, x.result.pct_of_peak); });
  c.add("tokens_per_s", [](R x) { return x.result.tokens_per_s; });
  c.add("tflops_per_rank", [](R x) { return x.result.tflops_per_rank; });
  // Result::bytes_sent's order.
  const char* sent[4] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"};
  for (int i = 0; i < 4; ++i)
    c.add(std::string(sent[i]) + "_bytes", [i](R x) { return ull(x.result.bytes_sent[i]); });
  c.add("all_to_all_calls", [](R x) { return ull(x.result.all_to_all_calls); });
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i)
    c.add("peak_" + std::string(to_string(static_cast<MemoryCategory>(i))) + "_bytes",
          [i](R x) { return ull(x.result.peak[i]); });
  c.add("peak_total_bytes", [](R x) { return ull(x.result.peak_total); });
  c.add("budget_bytes", [](R x) { return or_empty(x.point.budget >= 0, ll(x.point.budget)); });
  c.add("fits", [](R x) {
    const std::int64_t budget = x.point.budget;
    return or_empty(budget >= 0,
                    ll(x.result.ran() && x.result.peak_total <= static_cast<std::size_t>(budget)));
  });
  c.add("status", [](R x) { return x.result.status; });
  // Nothing trained in a projected row: no loss.
  c.add("final_loss", [](R x) {
    return or_empty(x.result.status.rfind("projected", 0) != 0, x.result.final_loss);
  });
  c.add("git_revision", [](R) { return std::string(git_revision()); });
  c.add("command", [](R x) { return x.command; });
  c.add("threads", [](R x) { return or_empty(x.result.threads > 0, ll(x.result.threads)); });
  c.add("slurm_job", [](R) { return slurm_job(); });
  c.add("ranks_per_core",
        [](R x) { return or_empty(x.result.ranks_per_core > 0, x.result.ranks_per_core); });
  c.add("run_id", [](R) { return run_id(); });
  c.add("attention", [](R x) { return x.result.attention; });
  // The routing under skewed workloads (issue 36): which workload and capacity rule ran, the
  // loads and drops of the measured steps, the all-to-all bytes per rank and the straggler
  // (measure.hpp, Result). Empty where nothing routed (projected rows) or nothing was timed.
  c.add("workload", [](R x) {
    return CsvField(std::string(routing::to_string(x.point.train.model.gate.workload.kind)));
  });
  c.add("dropless", [](R x) { return ll(x.point.train.model.gate.dropless); });
  auto routed = [&c](const char* name, double Result::*field) {
    c.add(name, [field](R x) { return or_empty(x.result.routed, x.result.*field); });
  };
  routed("expert_load_max", &Result::expert_load_max);
  routed("expert_load_mean", &Result::expert_load_mean);
  routed("expert_load_min", &Result::expert_load_min);
  routed("rank_load_max", &Result::rank_load_max);
  routed("rank_load_mean", &Result::rank_load_mean);
  routed("dropped_fraction", &Result::dropped_fraction);
  routed("all_to_all_rank_bytes_max", &Result::all_to_all_rank_bytes_max);
  routed("all_to_all_rank_bytes_mean", &Result::all_to_all_rank_bytes_mean);
  c.add("straggler_rank",
        [](R x) { return or_empty(x.result.straggler_rank >= 0, ll(x.result.straggler_rank)); });
  auto straggler = [&c](const char* name, double Result::*field) {
    c.add(name, [field](R x) { return or_empty(x.result.straggler_rank >= 0, x.result.*field); });
  };
  straggler("straggler_time_ms", &Result::straggler_time_ms);
  straggler("straggler_compute_ms", &Result::straggler_compute_ms);
  straggler("straggler_comm_ms", &Result::straggler_comm_ms);
  straggler("straggler_all_to_all_ms", &Result::straggler_all_to_all_ms);
  straggler("rank_compute_ms_mean", &Result::rank_compute_ms_mean);
  // The host's BLAS and the kernels it ran (core/blas_library.hpp): a CPU row's times
  // depend on them. Empty in a projected row (nothing ran).
  c.add("blas", [](R x) { return or_empty(ran(x), CsvField(kernels::cpu::blas_name())); });
  c.add("blas_kernel", [](R x) { return or_empty(ran(x), CsvField(kernels::cpu::blas_kernel())); });
  // Interleaved rounds and the machine's disturbance (issue 51; measure.hpp, disturbance.hpp):
  // a round row's round (empty on a point's summary row), how many, how ranks waited in
  // collectives, what else used the cores, the summary row's spread of its rounds' medians,
  // and the verdict. Empty where nothing was timed here (projected or not-run rows).
  auto timed = [](R x) { return ran(x) && x.result.ran() && x.result.time_ms.median > 0; };
  c.add("round", [](R x) { return or_empty(x.result.round > 0, ll(x.result.round)); });
  c.add("rounds", [timed](R x) { return or_empty(timed(x), ll(x.result.rounds)); });
  c.add("wait", [timed](R x) { return or_empty(timed(x), CsvField(std::string(x.result.wait))); });
  c.add("others_cpu_pct", [timed](R x) {
    return or_empty(timed(x) && x.result.machine_known, x.result.others_percent);
  });
  c.add("steal_pct", [timed](R x) {
    return or_empty(timed(x) && x.result.machine_known, x.result.steal_percent);
  });
  c.add("round_spread_pct", [timed](R x) {
    return or_empty(timed(x) && x.result.round == 0 && x.result.rounds > 1,
                    x.result.round_spread_percent);
  });
  // Unknown without /proc/stat and without rounds to compare: empty, not "quiet".
  c.add("disturbed", [timed](R x) {
    return or_empty(timed(x) && (x.result.machine_known || x.result.rounds > 1),
                    ll(x.result.disturbed));
  });
  return c;
}

const CsvColumns<ResultRow>& columns() {
  static const CsvColumns<ResultRow> table = make_columns();
  return table;
}

}  // namespace

CsvTable result_table() {
  return columns().table();
}

void add_result(CsvTable& table, const ExperimentConfig& config, const Point& point,
                const Result& r, const std::string& command) {
  columns().add_row(table, {config, point, r, command});
}

void append_rows(const CsvTable& table, const std::string& path) {
  append_csv(table, path);
}

void print_progress(int index, int count, const Point& point, const Result& r) {
  std::printf("[%d/%d] %-16s G=%-3d %-14s %-12s ", index + 1, count, point.system.name.c_str(),
              point.layout.world_size(), point.layout.to_string().c_str(),
              point.model_name.c_str());
  // The routing, said when it is not the default's (learned, capacity).
  const auto& gate = point.train.model.gate;
  const bool routing = gate.workload.forced() || gate.dropless;
  if (routing)
    std::printf("%s%s ", std::string(routing::to_string(gate.workload.kind)).c_str(),
                gate.dropless ? "+dropless" : "");
  if (!r.ran()) {
    std::printf("%s\n", r.status.c_str());
    std::fflush(stdout);
    return;
  }
  if (r.time_ms.median > 0)
    std::printf("%9.2f ms/iter (p10 %.2f p90 %.2f) comm %.2f ms, %.3g tok/s, ", r.time_ms.median,
                r.time_ms.p10, r.time_ms.p90, r.comm_ms, r.tokens_per_s);
  // The all-to-alls' bytes sent per rank per iteration, all calls together.
  std::printf("a2a %s in %llu calls, peak %s", format_bytes(r.bytes_sent[3]).c_str(),
              static_cast<unsigned long long>(r.all_to_all_calls),
              format_bytes(r.peak_total).c_str());
  // Of the activations' peak, what the model keeps for backward (DeepSpeed's count compares).
  if (r.activations_saved > 0)
    std::printf(", activations %llu B (saved for backward %llu B)",
                static_cast<unsigned long long>(
                    r.peak[static_cast<std::size_t>(MemoryCategory::activations)]),
                static_cast<unsigned long long>(r.activations_saved));
  if (routing && r.routed && r.expert_load_mean > 0)
    std::printf(", expert load max/mean %.2f, dropped %.1f%%",
                r.expert_load_max / r.expert_load_mean, 100 * r.dropped_fraction);
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
