// The projection under a forced routing workload (step.hpp, step_load): the loads it reads are
// the assignment routing::assign_experts makes of the step's global tokens, numbered here
// independently of the projection; the balanced workload projects today's even-routing step;
// a hotter workload never projects a faster expert step.
#include "catch.hpp"

#include <map>

#include "ted/projection/memory.hpp"
#include "ted/projection/time.hpp"
#include "ted/routing/gating.hpp"
#include "ted/routing/workload.hpp"

namespace pj = ted::projection;
namespace rt = ted::routing;

namespace {

// T = 2, Ep = 2, D = 2, 3 micro-batches of 2 sequences of 32 tokens, 8 experts top-2, four
// blocks (MoE layers 1 and 3), DTD on.
pj::StepShape shape(rt::WorkloadKind kind, double hot_share = 0.5, bool dropless = false) {
  pj::StepShape s;
  s.model.seq_len = 32;
  s.model.hidden = 64;
  s.model.layers = 4;
  s.model.gate.experts = 8;
  s.model.gate.top_k = 2;
  s.model.gate.capacity_factor = 1.0;
  s.model.gate.dropless = dropless;
  s.model.gate.workload.kind = kind;
  s.model.gate.workload.hot_share = hot_share;
  s.micro_batch = 2;
  s.micro_batches = 3;
  s.layout = {2, 2, 2};
  s.parallel.dtd = true;
  s.routing_step = 5;
  return s;
}

pj::Cluster cpu_like(double units) {
  pj::Cluster c;
  c.devices_per_node = 8;
  c.peak_flops = c.sustained_flops = 1e11;
  c.memory_bandwidth = 1e10;
  c.gemm = {units, units > 1 ? 16.0 : 1.0, units > 1 ? 16.0 : 1.0, 0};
  c.intra = {1e9, 1e-5, 1e-6};
  c.inter = {1e9, 1e-5, 1e-6};
  return c;
}

std::map<std::tuple<int, int, int, std::uint64_t, std::uint64_t>, std::uint64_t> collectives(
    const pj::StepShape& s) {
  std::map<std::tuple<int, int, int, std::uint64_t, std::uint64_t>, std::uint64_t> calls;
  for (const auto& c : pj::step_collectives(s))
    calls[{static_cast<int>(c.op), static_cast<int>(c.group), 0, c.bytes_sent, c.bytes_recv}] +=
        c.calls;
  return calls;
}

}  // namespace

TEST_CASE("projected loads are the assignment assign_experts makes of the step's tokens") {
  for (auto kind : {rt::WorkloadKind::hot_experts, rt::WorkloadKind::zipf,
                    rt::WorkloadKind::rotating, rt::WorkloadKind::balanced}) {
    const pj::StepShape s = shape(kind);
    const auto& g = s.model.gate;
    const int N = s.micro_batch * s.model.seq_len, Ep = 2, D = 2, Mb = 3;
    const pj::StepLoad load = pj::step_load(s);
    REQUIRE(load.forced);
    for (int l = 1; l < 4; l += 2) {
      std::vector<std::int64_t> total(8, 0);
      // The trainer's numbering: rank (e, d) is data-parallel rank e + Ep d; its micro-batch m
      // is global micro-batch (step Mb + m) Ep D + e + Ep d.
      for (int d = 0; d < D; ++d)
        for (int e = 0; e < Ep; ++e)
          for (int m = 0; m < Mb; ++m) {
            const std::int64_t first = ((5 * Mb + m) * Ep * D + e + Ep * d) * std::int64_t{N};
            std::vector<std::int32_t> choices(static_cast<std::size_t>(N) * 2);
            rt::assign_experts(g.workload, 8, 2, s.model.seed, 5, l, first, N, choices.data());
            std::vector<int> counts(8, 0);
            for (auto x : choices) ++counts[static_cast<std::size_t>(x)];
            CHECK(pj::group_load(s, l, d, e, m) == counts);
            for (int x = 0; x < 8; ++x) total[static_cast<std::size_t>(x)] += counts[x];
          }
      CHECK(load.expert_load[static_cast<std::size_t>(l)] == total);
      // The whole step's tokens in one call: the same loads, whatever the ranks' numbering.
      const int global = N * Mb * Ep * D;
      std::vector<std::int32_t> all(static_cast<std::size_t>(global) * 2);
      rt::assign_experts(g.workload, 8, 2, s.model.seed, 5, l, std::int64_t{5} * global, global,
                         all.data());
      std::vector<std::int64_t> counted(8, 0);
      for (auto x : all) ++counted[static_cast<std::size_t>(x)];
      CHECK(counted == total);
    }
    CHECK(load.expert_load[0].empty());
  }
}

TEST_CASE("learned and balanced project today's even-routing step") {
  const auto gpu = cpu_like(4);
  for (bool dropless : {false, true}) {
    const pj::StepShape learned = shape(rt::WorkloadKind::learned, 0.5, dropless);
    const pj::StepShape balanced = shape(rt::WorkloadKind::balanced, 0.5, dropless);
    CHECK_FALSE(pj::step_load(learned).forced);
    const pj::StepLoad load = pj::step_load(balanced);
    // Balanced at capacity factor 1: every expert takes exactly its capacity, nothing dropped,
    // and dropless agrees on the formula's capacity.
    CHECK(load.dropped == 0);
    CHECK(load.largest_capacity() == rt::expert_capacity(balanced.model.gate, 64));
    for (int m = 0; m < balanced.micro_batches; ++m) {
      const auto a = pj::forward_gemms(learned), b = pj::forward_gemms(balanced, load, m);
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].m == b[i].m);
        CHECK(a[i].n == b[i].n);
        CHECK(a[i].k == b[i].k);
        CHECK(a[i].count == b[i].count);
      }
    }
    CHECK(collectives(learned) == collectives(balanced));
    CHECK(pj::gemm_seconds(balanced, gpu) == pj::gemm_seconds(learned, gpu));
    CHECK(pj::step_time(balanced, gpu).total() ==
          Approx(pj::step_time(learned, gpu).total()).epsilon(1e-12));
    CHECK(pj::step_memory(balanced).total == pj::step_memory(learned).total);
  }
}

TEST_CASE("a hotter workload never projects a faster expert step") {
  // hot_experts with 2 hot experts of 8: hot_share 0.25 is even routing, then ever hotter.
  // Dropless on every backend, and capacity routing where every slot is computed (a GPU): the
  // step only grows. Capacity routing on a backend that leaves empty slots out (the CPU) drops
  // what the hot experts cannot hold, so its experts can compute fewer rows than under even
  // routing at capacity factor 1: there the straggler computes at least its share of the kept
  // rows, and the dropped choices only grow.
  for (bool skip : {true, false})
    for (bool dropless : {false, true}) {
      const auto cluster = cpu_like(skip ? 1 : 4);
      const pj::StepShape even = shape(rt::WorkloadKind::learned, 0.5, dropless);
      const double even_gemm = pj::gemm_seconds(even, cluster);
      double last_gemm = 0, last_total = 0;
      std::int64_t last_dropped = -1;
      for (double share : {0.25, 0.5, 0.75, 0.95}) {
        pj::StepShape s = shape(rt::WorkloadKind::hot_experts, share, dropless);
        s.skip_empty_slots = skip;
        const double gemm = pj::gemm_seconds(s, cluster);
        const double total = pj::step_time(s, cluster).total();
        const pj::StepLoad load = pj::step_load(s);
        INFO("skip " << skip << " dropless " << dropless << " hot_share " << share);
        if (dropless) CHECK(load.dropped == 0);
        CHECK(load.dropped >= last_dropped);
        if (dropless || !skip) {
          CHECK(gemm >= last_gemm);
          CHECK(total >= last_total);
          CHECK(gemm >= even_gemm);
        } else {
          const double choices = 2.0 * 64 * 3 * 2 * 2 * 2;  // per MoE layer of the step
          const double kept = 1 - static_cast<double>(load.dropped) / (2 * choices);
          CHECK(gemm >= even_gemm * kept);
        }
        if (!dropless && !skip) CHECK(gemm == even_gemm);
        last_gemm = gemm, last_total = total, last_dropped = load.dropped;
      }
      if (dropless) CHECK(last_gemm > even_gemm);
    }
  // Dropless grows the exchange: the all-to-all bytes and the buffers.
  const auto hot = shape(rt::WorkloadKind::hot_experts, 0.9, true);
  const auto even = shape(rt::WorkloadKind::balanced, 0.5, true);
  CHECK(pj::step_traffic(hot)[static_cast<std::size_t>(ted::CollectiveOp::all_to_all)]
                             [static_cast<std::size_t>(ted::GroupKind::expert)]
                                 .bytes_sent >
        pj::step_traffic(even)[static_cast<std::size_t>(ted::CollectiveOp::all_to_all)]
                              [static_cast<std::size_t>(ted::GroupKind::expert)]
                                  .bytes_sent);
  CHECK(pj::step_memory(hot).total > pj::step_memory(even).total);
}
