#include "ted/experiments/rows.hpp"

#include <cstdio>
#include <ctime>

#include <unistd.h>

#include "ted/core/git_revision.hpp"
#include "ted/core/system.hpp"
#include "ted/core/units.hpp"

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
  // threads, slurm_job, ranks_per_core, run_id and attention last, so older CSVs gain them as
  // trailing columns.
  for (const char* name :
       {"peak_total_bytes", "budget_bytes", "fits", "status", "final_loss", "git_revision",
        "command", "threads", "slurm_job", "ranks_per_core", "run_id", "attention"})
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
      .add(std::string(precision_name(point.train.model.grad_dtype)))
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
  table.add(run_id()).add(r.attention);
}

void append_rows(const CsvTable& table, const std::string& path) {
  append_csv(table, path);
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
  // The all-to-alls' bytes sent per rank per iteration, all calls together.
  std::printf("a2a %s in %llu calls, peak %s", format_bytes(r.bytes_sent[3]).c_str(),
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
