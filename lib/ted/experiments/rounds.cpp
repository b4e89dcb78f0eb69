#include "ted/experiments/rounds.hpp"

#include <algorithm>
#include <cstdio>

#include "ted/core/error.hpp"
#include "ted/experiments/disturbance.hpp"
#include "ted/experiments/rows.hpp"

namespace ted::experiments {

Result pool_rounds(const std::vector<Result>& rounds) {
  TED_CHECK(!rounds.empty(), "pool_rounds: no round");
  std::vector<double> medians, iterations;
  for (const auto& r : rounds) {
    medians.push_back(r.time_ms.median);
    iterations.insert(iterations.end(), r.iteration_ms.begin(), r.iteration_ms.end());
  }
  const Result& middle = rounds[median_iteration(medians)];
  Result pooled = middle;
  pooled.iteration_ms = iterations;
  pooled.time_ms = summarize(iterations);
  // The median round's split, scaled so that its parts add up to the pooled median.
  const double scale =
      middle.time_ms.median > 0 ? pooled.time_ms.median / middle.time_ms.median : 1.0;
  pooled.comm_ms *= scale;
  pooled.compute_ms *= scale;
  for (double& ms : pooled.op_ms) ms *= scale;
  pooled.other_ms *= scale;
  if (scale > 0) {
    pooled.tokens_per_s /= scale;
    pooled.tflops_per_rank /= scale;
  }
  pooled.round = 0;
  pooled.rounds = static_cast<int>(rounds.size());
  pooled.round_spread_percent = spread_percent(medians);
  pooled.machine_known = true;
  pooled.others_percent = pooled.steal_percent = 0;
  pooled.disturbed = false;
  for (const auto& r : rounds) {
    pooled.machine_known = pooled.machine_known && r.machine_known;
    pooled.others_percent = std::max(pooled.others_percent, r.others_percent);
    pooled.steal_percent = std::max(pooled.steal_percent, r.steal_percent);
    pooled.disturbed = pooled.disturbed || r.disturbed;
  }
  return pooled;
}

std::vector<Result> measure_rounds(const Plan& plan, const std::vector<std::string>& verdicts,
                                   const ExperimentConfig& config, MpiCommunicator& world,
                                   const std::string& command, std::size_t* written) {
  const bool rank0 = world.rank() == 0;
  const std::size_t n = plan.points.size();
  // The correctness-only mode (iters 0) times nothing: one round.
  const int rounds = config.iters == 0 ? 1 : config.rounds;
  auto write = [&](std::size_t i, const Result& r, int index, int count) {
    if (!rank0) return;
    CsvTable row = result_table();
    add_result(row, config, plan.points[i], r, command);
    append_rows(row, config.csv);
    ++*written;
    print_progress(index, count, plan.points[i], r);
  };
  std::vector<std::vector<Result>> timed(n);
  std::vector<Result> results(n);
  MachineWatch watch(world);
  const std::string wait = to_string(mpi_wait());
  for (int round = 0; round < rounds; ++round) {
    if (rank0 && rounds > 1) std::printf("# round %d of %d\n", round + 1, rounds);
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = (static_cast<std::size_t>(round) + j) % n;
      if (!verdicts[i].empty()) {  // never allocated: a row saying it does not fit, in order
        if (round > 0) continue;
        results[i].status = "not run: does not fit: " + verdicts[i];
        write(i, results[i], static_cast<int>(j), static_cast<int>(n));
        continue;
      }
      watch.start();
      Result r = measure(plan.points[i], world, config.warmup, config.iters);
      const MachineShare share = watch.stop();
      r.others_percent = share.others_percent;
      r.steal_percent = share.steal_percent;
      r.machine_known = share.known;
      r.disturbed = share.others_percent > kOthersPercent || share.steal_percent > kStealPercent;
      r.wait = wait;
      r.rounds = rounds;
      r.round = rounds > 1 ? round + 1 : 0;
      write(i, r, static_cast<int>(rounds > 1 ? j : i), static_cast<int>(n));
      timed[i].push_back(std::move(r));
    }
  }
  if (rounds == 1) {
    for (std::size_t i = 0; i < n; ++i)
      if (!timed[i].empty()) results[i] = timed[i].front();
    return results;
  }
  // The run's verdict, on every summary row: any round disturbed, or any point's rounds
  // disagreeing beyond what a quiet machine shows.
  bool disturbed = false;
  double spread = 0, others = 0, steal = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (timed[i].empty()) continue;
    results[i] = pool_rounds(timed[i]);
    spread = std::max(spread, results[i].round_spread_percent);
    others = std::max(others, results[i].others_percent);
    steal = std::max(steal, results[i].steal_percent);
    disturbed = disturbed || results[i].disturbed;
  }
  disturbed = disturbed || spread > kSpreadPercent;
  if (rank0) std::printf("# over %d rounds\n", rounds);
  for (std::size_t i = 0; i < n; ++i) {
    if (timed[i].empty()) continue;
    results[i].disturbed = disturbed;
    write(i, results[i], static_cast<int>(i), static_cast<int>(n));
  }
  if (rank0)
    std::printf(
        "# machine %s: others took up to %.1f%% of the cores (limit %.0f%%), the hypervisor "
        "%.1f%% (limit %.0f%%); a system's round medians spread up to %.1f%% (limit %.0f%%)\n",
        disturbed ? "DISTURBED" : "quiet", others, kOthersPercent, steal, kStealPercent, spread,
        kSpreadPercent);
  return results;
}

}  // namespace ted::experiments
