// The collective benchmark harness, in the manner of nccl-tests: a sweep of sizes, warm-up and
// timed iterations, the data checked on every size, one row per size. Optionally the same
// collective is timed through plain MPI in the same run, interleaved iteration by iteration,
// so the communicator's own overhead can be read off as a ratio on a noisy machine.
//
// Timing, two ways. By default (per call) all ranks meet at a world barrier before every
// iteration, and an iteration's time is the slowest rank's, from the barrier to its collective's
// completion: one call from idle links. Back to back (--back-to-back) the ranks meet once per
// size, then run the warm-up and timed calls one after another with nothing between them, as
// nccl-tests times its loop: an iteration's time is the slowest rank's interval from its previous
// call's completion to this one's, so a link stays busy from call to call and a shaper or NIC
// that could bank the idle time of a barrier has none to bank (nccl-tests divides the loop's time
// by its calls; the intervals add up to that and give p10/p90 too). Rows report the median and
// p10/p90 over the timed iterations. Every group of the chosen kind runs at the same time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/comm/communicator.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/stats.hpp"
#include "ted/device/device.hpp"
#include "ted/grid/process_grid.hpp"

namespace ted::bench {

struct CollectiveBenchOptions {
  CollectiveOp op = CollectiveOp::all_to_all;
  GroupKind group = GroupKind::world;
  DataType dtype = DataType::f32;
  std::size_t min_bytes = 1024;
  std::size_t max_bytes = 16u << 20;
  int step_factor = 2;
  int warmup_iters = 5;
  int iters = 20;
  int root = 0;
  bool compare_mpi = false;   // also time plain MPI calls (mpi backend only)
  bool back_to_back = false;  // no barrier between calls (see Timing above)
};

struct CollectiveBenchRow {
  std::size_t bytes = 0;
  std::size_t elements = 0;
  Summary time_us;       // of the suite's communicator
  double algbw_gbs = 0;  // bytes / median time, GB/s (1e9)
  double busbw_gbs = 0;
  std::uint64_t wrong = 0;    // summed over all ranks
  Summary reference_time_us;  // plain MPI, when compared
  double reference_busbw_gbs = 0;
  std::uint64_t ledger_bytes_sent = 0;  // per call, this rank, from the ledger
  std::uint64_t ledger_bytes_recv = 0;
};

// The sizes of a sweep: min, min*f, ... up to and including max. Throws ConfigError when
// min is 0, min > max or f < 2.
std::vector<std::size_t> size_sweep(std::size_t min_bytes, std::size_t max_bytes, int factor);

// Checks the options against the group before any collective runs (ConfigError, one line).
void validate(const CollectiveBenchOptions& options, int group_size);

// Bytes one rank holds at the largest size: send and receive buffers on the device, their host
// copies, and plain MPI's own pair with --compare-mpi (for the memory check before the sweep).
std::uint64_t peak_bytes(const CollectiveBenchOptions& options, int group_size,
                         bool device_is_host);

// Called on rank 0 after each row, so a long sweep shows progress.
using RowCallback = void (*)(const CollectiveBenchRow& row, void* user);

// Runs the sweep. Collective over `control` (an MPI communicator on host memory that
// synchronises and reduces the timings, never measured) and
// `group` (the communicator under test, any backend, whose ledger counts the bytes). Every
// rank gets the
// same rows back.
std::vector<CollectiveBenchRow> run_collective_bench(const CollectiveBenchOptions& options,
                                                     Communicator& control, Communicator& group,
                                                     Device& device, RowCallback on_row = nullptr,
                                                     void* user = nullptr);

// The columns of a benchmark CSV and one row of it, with the run's context.
struct CollectiveBenchContext {
  std::string backend;
  int world_size = 1;
  Layout layout;
  int group_size = 1;
  std::string command_line;
};
CsvTable collective_bench_table();
void add_row(CsvTable& table, const CollectiveBenchOptions& options,
             const CollectiveBenchContext& context, const CollectiveBenchRow& row);

}  // namespace ted::bench
