// ted_collbench's work around the harness (collective_bench.hpp): its command line resolved
// before anything runs, the header, the table's rows as they come, and the verdict with the CSV.
//   mpirun -np 4 build/apps/ted_collbench --op all_to_all -b 1K -e 16M --compare-mpi
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/bench/collective_bench.hpp"

namespace ted::bench {

// The command line as given (the options' text).
struct CollbenchArgs {
  std::string op = "all_to_all", group = "world", dtype = "float", comm = "mpi", device;
  std::string min_bytes = "1K", max_bytes = "16M";
  int tensor = 1, expert = 1, data = 0;
  CollectiveBenchOptions options;  // the numeric options, set directly
};

// The command line resolved for `ranks` ranks, identically on every rank: ConfigError (one
// line naming the option) for anything wrong, before any collective runs.
struct CollbenchPlan {
  CollectiveBenchOptions options;
  CommBackend comm = CommBackend::mpi;
  DeviceKind device = DeviceKind::cpu;  // --device, default cuda for nccl, else cpu
  Layout layout;
  int ranks = 1;
  int group_size = 1;
  std::uint64_t need = 0;  // bytes per rank at the largest size (peak_bytes)
};
CollbenchPlan resolve(const CollbenchArgs& args, int ranks);

// --check's lines: the verdict and the needs line the Slurm scripts read.
std::string check_report(const CollbenchPlan& plan);

// Rank 0's header: what runs on which group, the carrier and device, the table's columns.
void print_header(const CollbenchPlan& plan, const Communicator& group, const std::string& carrier,
                  const std::string& device, int world_size);
// One row of the table (a RowCallback; `user` points to the options' compare_mpi).
void print_row(const CollectiveBenchRow& row, void* user);

// Rank 0: the rows as CSV (atomically) and the verdict; the exit code (1 when any element was
// wrong).
int finish(const CollbenchPlan& plan, const std::vector<CollectiveBenchRow>& rows,
           const CollectiveBenchContext& context, const std::string& csv_path, bool rank0);

}  // namespace ted::bench
