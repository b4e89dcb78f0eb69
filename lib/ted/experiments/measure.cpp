#include "ted/experiments/measure.hpp"

#include <algorithm>
#include <chrono>

#include <mpi.h>

#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"
#include "ted/core/parallel.hpp"
#include "ted/run/run.hpp"

namespace ted::experiments {

namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
constexpr CollectiveOp kOps[4] = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                                  CollectiveOp::reduce_scatter, CollectiveOp::all_to_all};
// The result's per-kind columns, in their order.
constexpr CollectiveOp kReportedOps[4] = {CollectiveOp::all_reduce, CollectiveOp::all_to_all,
                                          CollectiveOp::all_gather, CollectiveOp::reduce_scatter};

// The measured steps' routing, summed step by step (Result::expert_load_max and the rest).
struct RoutingTally {
  int steps = 0;
  double expert_max = 0, expert_min = 0, expert_mean = 0, rank_max = 0, rank_mean = 0;
  double dropped = 0, choices = 0;

  // expert_ranks: Ep; expert rank r holds experts r E / Ep .. (r + 1) E / Ep - 1.
  void add(const train::StepRecord& record, int expert_ranks) {
    if (record.expert_load.empty()) return;
    double most = 0, least = -1, total = 0, rank_most = 0;
    std::size_t entries = 0;
    for (const auto& layer : record.expert_load) {
      const std::size_t per_rank = layer.size() / static_cast<std::size_t>(expert_ranks);
      for (std::size_t first = 0; first < layer.size(); first += per_rank) {
        double rank = 0;
        for (std::size_t e = first; e < first + per_rank; ++e) {
          const auto load = static_cast<double>(layer[e]);
          most = std::max(most, load);
          least = least < 0 ? load : std::min(least, load);
          rank += load;
        }
        rank_most = std::max(rank_most, rank);
        total += rank;
      }
      entries += layer.size();
    }
    const double ranks = static_cast<double>(record.expert_load.size()) * expert_ranks;
    ++steps;
    expert_max += most;
    expert_min += least;
    expert_mean += total / static_cast<double>(entries);
    rank_max += rank_most;
    rank_mean += total / ranks;
    dropped += record.dropped;
    choices += total;
  }

  void write(Result* r) const {
    if (steps == 0) return;
    r->routed = true;
    r->expert_load_max = expert_max / steps;
    r->expert_load_min = expert_min / steps;
    r->expert_load_mean = expert_mean / steps;
    r->rank_load_max = rank_max / steps;
    r->rank_load_mean = rank_mean / steps;
    r->dropped_fraction = choices > 0 ? dropped / choices : 0;
  }
};

// The straggler of one timed iteration from every rank's [step, collectives, the four kinds]
// (the gathered `all` of measure): the rank with the most time outside collectives.
struct Straggler {
  int rank = -1;
  double time = 0, compute = 0, comm = 0, all_to_all = 0, mean_compute = 0;  // ms
};
Straggler find_straggler(const std::vector<double>& all, int ranks) {
  Straggler s;
  double total = 0;
  for (int r = 0; r < ranks; ++r) {
    const double* x = all.data() + 6 * static_cast<std::size_t>(r);
    const double compute = (x[0] - x[1]) * 1e3;
    total += compute;
    if (s.rank < 0 || compute > s.compute) s = {r, x[0] * 1e3, compute, x[1] * 1e3, x[3] * 1e3};
  }
  s.mean_compute = total / ranks;
  return s;
}

}  // namespace

Result measure(const Point& point, Communicator& world, int warmup, int iters) {
  const int G = point.layout.world_size();
  TED_CHECK(G <= world.size(), "point needs more ranks than launched");
  const bool active = world.rank() < G;
  auto ranks = world.split(active ? 0 : 1, world.rank(), GroupKind::custom);
  Result result;
  if (active) {
    auto* host = dynamic_cast<MpiCommunicator*>(ranks.get());
    TED_CHECK(host != nullptr, "the experiments' world must be MPI on host memory");
    // Over the point's ranks only: the others are not here.
    RunSpec spec;
    spec.control = host;
    TrainingRun run(point.train, point.layout, spec);
    auto& device = run.tracked();
    auto& ledger = run.ledger();
    auto& trainer = run.trainer();
    result.device = device.name();
    result.threads = parallel_threads();
    result.comm = run.world().name();
    result.attention = trainer.attention();
    const int steps = iters == 0 ? 1 : warmup + iters;
    std::vector<double> times, comms, op_times[4];
    std::vector<Straggler> stragglers;
    RoutingTally routing;
    double all_to_all_bytes = 0;  // this rank's, in its expert group, over the measured steps
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
      if (iters == 0 || step >= warmup) {
        routing.add(record, point.layout.expert);
        for (auto op : {CollectiveOp::all_to_all, CollectiveOp::all_to_all_v})
          all_to_all_bytes += static_cast<double>(ledger.total(op, GroupKind::expert).bytes_sent);
      }
      if (iters > 0 && step >= warmup) {
        stragglers.push_back(find_straggler(all, G));
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
    routing.write(&result);
    {
      double mine = routing.steps > 0 ? all_to_all_bytes / routing.steps : 0;
      std::vector<double> bytes(static_cast<std::size_t>(G));
      ranks->all_gather(&mine, bytes.data(), 1, DataType::f64);
      for (double b : bytes) {
        result.all_to_all_rank_bytes_max = std::max(result.all_to_all_rank_bytes_max, b);
        result.all_to_all_rank_bytes_mean += b / G;
      }
    }
    for (int i = 0; i < 4; ++i)
      for (auto kind : kLedgerGroups)
        result.bytes_sent[i] += ledger.total(kOps[i], kind).bytes_sent;
    result.all_to_all_calls = ledger.total(CollectiveOp::all_to_all, GroupKind::expert).calls;
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c)
      result.peak[c] = device.usage(static_cast<MemoryCategory>(c)).peak;
    result.peak_total = device.total().peak;
    std::uint64_t peaks[kMemoryCategoryCount + 2];
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) peaks[c] = result.peak[c];
    peaks[kMemoryCategoryCount] = result.peak_total;
    peaks[kMemoryCategoryCount + 1] = trainer.activations_saved_peak();
    ranks->all_reduce(peaks, peaks, kMemoryCategoryCount + 2, DataType::i64, ReduceOp::max);
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) result.peak[c] = peaks[c];
    result.peak_total = peaks[kMemoryCategoryCount];
    result.activations_saved = peaks[kMemoryCategoryCount + 1];
    ranks->all_reduce(&flops, &flops, 1, DataType::f64);  // summed over ranks
    for (const auto& spec : trainer.params().specs()) {
      std::uint64_t n = 1;
      for (int d : spec.shape) n *= static_cast<std::uint64_t>(d);
      result.parameters += n;
    }
    if (point.train.run.backend == DeviceKind::cpu)
      result.ranks_per_core = ranks_per_core(host->native_handle());
    if (!times.empty()) {
      result.iteration_ms = times;
      split_time(times, comms, op_times, &result);
      const Straggler& s = stragglers[median_iteration(times)];
      result.straggler_rank = s.rank;
      result.straggler_time_ms = s.time;
      result.straggler_compute_ms = s.compute;
      result.straggler_comm_ms = s.comm;
      result.straggler_all_to_all_ms = s.all_to_all;
      result.rank_compute_ms_mean = s.mean_compute;
      const auto& t = point.train;
      double tokens = static_cast<double>(t.data.micro_batch) * t.data.micro_batches *
                      point.layout.expert * point.layout.data * t.model.seq_len;
      result.tokens_per_s = tokens / (result.time_ms.median * 1e-3);
      result.tflops_per_rank = flops / G / (result.time_ms.median * 1e-3) / 1e12;
    }
  }
  // The ranks this point leaves out wait here from its start: asleep, or their blocking wait
  // would share the cores with the measured ranks (a 1-rank point of 4 on 2 cores: 2x slower).
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&world))
    sleeping_barrier(mpi->native_handle());
  else
    world.barrier();
  return result;
}

std::size_t median_iteration(const std::vector<double>& times) {
  TED_CHECK(!times.empty(), "no iteration");
  std::vector<std::size_t> order(times.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return times[a] < times[b]; });
  return order[(order.size() - 1) / 2];
}

void split_time(const std::vector<double>& times, const std::vector<double>& comms,
                const std::vector<double> (&op_times)[4], Result* r) {
  TED_CHECK(!times.empty() && comms.size() == times.size(), "one collective time per iteration");
  r->time_ms = summarize(times);
  // The lower middle iteration: its time is at most the (interpolated) median, and a rank's
  // collectives lie inside its step, so its comm fits in the median time. The clamp only
  // guards inputs that break that.
  const std::size_t median = median_iteration(times);
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

}  // namespace ted::experiments
