#include "ted/bench/collbench_report.hpp"

#include <cstdio>

#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/units.hpp"
#include "ted/run/check.hpp"

namespace ted::bench {

CollbenchPlan resolve(const CollbenchArgs& args, int ranks) {
  CollbenchPlan plan;
  plan.options = args.options;
  plan.options.op = parse_collective(args.op);
  plan.options.group = parse_group(args.group);
  plan.options.dtype = parse_dtype(args.dtype);
  plan.options.min_bytes = parse_bytes(args.min_bytes, "-b/--minbytes");
  plan.options.max_bytes = parse_bytes(args.max_bytes, "-e/--maxbytes");
  plan.comm = parse_comm_backend(args.comm);
  if (plan.options.compare_mpi && plan.comm != CommBackend::mpi)
    throw ConfigError("--compare-mpi needs --comm mpi");
  plan.ranks = ranks;
  plan.layout = resolve_layout(ranks, args.tensor, args.expert, args.data);
  ProcessGrid grid(ranks, plan.layout);
  plan.group_size = grid.group_size(plan.options.group);
  validate(plan.options, plan.group_size);
  plan.device = args.device.empty()
                    ? (plan.comm == CommBackend::nccl ? DeviceKind::cuda : DeviceKind::cpu)
                    : parse_device_kind(args.device);
  plan.need = peak_bytes(plan.options, plan.group_size, plan.device == DeviceKind::cpu);
  return plan;
}

std::string check_report(const CollbenchPlan& plan) {
  const std::string needs = check_needs(plan.device, plan.comm, plan.ranks, "--comm/--device");
  char line[512];
  std::snprintf(line, sizeof line,
                "ted_collbench: check passed: %s on the %s group, %d ranks as %s, up to %s per "
                "rank\n",
                std::string(to_string(plan.options.op)).c_str(),
                std::string(to_string(plan.options.group)).c_str(), plan.ranks,
                plan.layout.to_string().c_str(), format_bytes(plan.need).c_str());
  return line + needs;
}

void print_header(const CollbenchPlan& plan, const Communicator& group, const std::string& carrier,
                  const std::string& device, int world_size) {
  const auto& o = plan.options;
  std::printf("# ted_collbench %s: %s on the %s group (size %d), %d ranks %s\n",
              std::string(git_revision()).c_str(), std::string(to_string(o.op)).c_str(),
              std::string(to_string(o.group)).c_str(), group.size(), world_size,
              plan.layout.to_string().c_str());
  std::printf(
      "# backend %s (%s), dtype %s, warm-up %d, timed %d (%s); time = slowest rank, median "
      "(p10 p90) in us; bandwidth GB/s\n",
      carrier.c_str(), device.c_str(), std::string(to_string(o.dtype)).c_str(), o.warmup_iters,
      o.iters, o.back_to_back ? "back to back" : "a barrier before each");
  std::printf("#%11s %12s %10s %10s %10s %8s %8s %8s", "size", "count", "time", "p10", "p90",
              "algbw", "busbw", "#wrong");
  if (o.compare_mpi) std::printf(" %10s %8s %6s", "mpi_time", "mpi_bus", "ratio");
  std::printf("\n");
}

void print_row(const CollectiveBenchRow& row, void* user) {
  const bool compare = *static_cast<bool*>(user);
  std::printf("%12zu %12zu %10.2f %10.2f %10.2f %8.3f %8.3f %8llu", row.bytes, row.elements,
              row.time_us.median, row.time_us.p10, row.time_us.p90, row.algbw_gbs, row.busbw_gbs,
              static_cast<unsigned long long>(row.wrong));
  if (compare) {
    double ratio = row.reference_busbw_gbs > 0 ? row.busbw_gbs / row.reference_busbw_gbs : 0.0;
    std::printf(" %10.2f %8.3f %6.3f", row.reference_time_us.median, row.reference_busbw_gbs,
                ratio);
  }
  std::printf("\n");
  std::fflush(stdout);
}

int finish(const CollbenchPlan& plan, const std::vector<CollectiveBenchRow>& rows,
           const CollectiveBenchContext& context, const std::string& csv_path, bool rank0) {
  std::uint64_t wrong = 0;
  double ratio_sum = 0;
  for (const auto& row : rows) {
    wrong += row.wrong;
    if (row.reference_busbw_gbs > 0) ratio_sum += row.busbw_gbs / row.reference_busbw_gbs;
  }
  if (rank0) {
    CsvTable table = collective_bench_table();
    for (const auto& row : rows) add_row(table, plan.options, context, row);
    table.write_atomic(csv_path);
    if (plan.options.compare_mpi && !rows.empty() && plan.options.iters > 0)
      std::printf("# mean busbw ratio vs plain MPI: %.3f\n", ratio_sum / rows.size());
    std::printf("# %s: %llu wrong elements\n# CSV: %s\n", wrong ? "Failed" : "Passed",
                static_cast<unsigned long long>(wrong), csv_path.c_str());
  }
  return wrong ? 1 : 0;
}

}  // namespace ted::bench
