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
  // Of the activations, what the model keeps for backward at its largest (max over ranks;
  // GptModel::saved_peak_bytes, projection::MemoryEstimate::activations_saved): printed, not in
  // the CSV, for the comparison with DeepSpeed's saved tensors (baselines/deepspeed).
  std::size_t activations_saved = 0;
  std::string device;     // what ran it: "cpu", "cuda:0 NVIDIA H100 ..." (rank 0's)
  int threads = 0;        // rank 0's kernel thread pool (follows its CPU mask); 0: nothing ran
  std::string comm;       // what carried the device buffers: mpi, mpi-staged, nccl
  std::string attention;  // the attention that ran: cudnn, flash, materialized

  // The routing of the measured steps (the timed ones; with iters 0 the one step), for skewed
  // workloads. Loads are token choices per step of the global batch, before drops: per MoE
  // layer and expert (StepRecord::expert_load), and per expert rank (its E / Ep experts
  // summed). max and min: over the layers and experts (ranks) of a step; mean: over them all;
  // each averaged over the measured steps. dropped_fraction: choices dropped by capacity over
  // all choices, over the measured steps. routed: false when nothing routed (a projected row).
  bool routed = false;
  double expert_load_max = 0, expert_load_mean = 0, expert_load_min = 0;
  double rank_load_max = 0, rank_load_mean = 0;
  double dropped_fraction = 0;
  // The bytes each rank sent in all-to-alls of its expert group per measured step (the
  // ledger), max and mean over the point's ranks.
  double all_to_all_rank_bytes_max = 0, all_to_all_rank_bytes_mean = 0;
  // The straggler of the median iteration (the one split_time takes): the rank with the most
  // time outside collectives, the one the others wait for in the all-to-alls when its experts
  // draw more tokens. Its step time, that time's split and its all-to-all time; and the mean
  // over ranks of the time outside collectives. straggler_rank < 0: no timed iteration.
  int straggler_rank = -1;
  double straggler_time_ms = 0, straggler_compute_ms = 0, straggler_comm_ms = 0;
  double straggler_all_to_all_ms = 0, rank_compute_ms_mean = 0;
  // The timed iterations' step times (ms), in order: what the rounds pool (rounds.hpp).
  std::vector<double> iteration_ms;
  // Interleaved rounds (run.rounds): the round of this row, 1 .. rounds; 0 on a point's
  // summary row, which pools its rounds' iterations. round_spread_percent: the summary row's
  // (largest - smallest) / median of its rounds' medians.
  int round = 0;
  int rounds = 1;
  double round_spread_percent = 0;
  // What else used the cores while it was timed (disturbance.hpp), over this row's window: a
  // round's own, the summary row's the largest of its rounds'. disturbed: a round row's
  // others or steal above the limits; the summary rows': the run's verdict, the same on each.
  double others_percent = 0, steal_percent = 0;
  bool machine_known = false;
  bool disturbed = false;
  std::string wait;  // how ranks waited in collectives: blocking or sleep (MpiWait)
  // "measured", "projected", "projected: does not fit: ..." (the projection still gives the
  // time), or "not run: does not fit: ..." (a measured sweep never allocates such a point)
  std::string status = "measured";
  bool ran() const { return status.rfind("not run", 0) != 0; }  // measured or projected
};

// The iteration split_time takes its split from: the lower middle one by time.
std::size_t median_iteration(const std::vector<double>& times);

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
