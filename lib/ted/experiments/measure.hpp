// Measuring one point: warm-up, timed iterations, median/p10/p90, the time split by collective
// kind, ledger bytes, allocator peaks and the final loss.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/backend/memory.hpp"
#include "ted/comm/communicator.hpp"
#include "ted/core/stats.hpp"
#include "ted/experiments/plans.hpp"

namespace ted::experiments {

// The time split of a measured row, all from one iteration and one rank so that the parts add
// up: the median iteration (by step time; the lower middle one of an even count), and in it the
// rank that spent the most time in collectives (split_time). Then
//   time_ms.median = compute_ms + comm_ms = all_reduce + all_to_all + all_gather +
//                    reduce_scatter + other_ms,
// and other_ms - compute_ms is the time in collectives of no reported kind (broadcast, barrier).
// On a CPU whose ranks outnumber its cores (ranks_per_core > 1) a rank's wait for a peer the OS
// has not scheduled is time in a collective: comm_ms then holds that wait, not only transfers.
struct Result {
  Summary time_ms;
  double comm_ms = 0;     // the collective time of the rank above, at most the median time
  double compute_ms = 0;  // median time minus comm, never negative
  // The collective time by kind of the same rank and iteration: all_reduce, all_to_all
  // (all_to_all_v included), all_gather, reduce_scatter; other_ms is the rest of the median time.
  double op_ms[4] = {};
  double other_ms = 0;
  double ranks_per_core = 0;  // CPU runs: the most ranks of a node per CPU they may use; 0: n/a
  double pct_of_peak = -1;    // model FLOPs over the peak of all devices; < 0: no stated peak
  double tokens_per_s = 0;
  double tflops_per_rank = 0;
  double final_loss = 0;
  std::uint64_t parameters = 0;      // of the whole model
  std::uint64_t bytes_sent[4] = {};  // per rank per iteration: all_reduce, all_gather,
                                     // reduce_scatter, all_to_all (rank 0, from the ledger)
  std::uint64_t all_to_all_calls = 0;
  std::size_t peak[kMemoryCategoryCount] = {};  // max over ranks
  std::size_t peak_total = 0;
  std::string device;     // what ran it: "cpu", "cuda:0 NVIDIA H100 ..." (rank 0's)
  int threads = 0;        // rank 0's kernel thread pool (follows its CPU mask); 0: nothing ran
  std::string comm;       // what carried the device buffers: mpi, mpi-staged, nccl
  std::string attention;  // the attention that ran: cudnn, flash, materialized
  // "measured", "projected", "projected: does not fit: ..." (the projection still gives the
  // time), or "not run: does not fit: ..." (a measured sweep never allocates such a point)
  std::string status = "measured";
  bool ran() const { return status.rfind("not run", 0) != 0; }  // measured or projected
};

// The time columns of a point from its iterations (ms): the step time (the slowest rank's),
// and the collective time with its split by kind of the rank with the most collective time.
// Takes comm and the kinds from the median iteration (see Result), clamped to the median time.
void split_time(const std::vector<double>& times, const std::vector<double>& comms,
                const std::vector<double> (&op_times)[4], Result* r);

// Runs `point` on world ranks 0 .. G-1 (the others wait) for warmup + iters steps, on the
// backend, dtype and communicator of point.train.run; iters = 0 is the correctness-only mode:
// one untimed step. Collective over `world`, a host MPI communicator.
Result measure(const Point& point, Communicator& world, int warmup, int iters);

}  // namespace ted::experiments
