// TED on MPI ranks equals the single-process reference: for every layout (T, Ep, D) of the
// launched rank count, every switch set (DTD, reduce-scatter, checkpointing, CAC, ZeRO-1 off,
// tiled optimizer step, experts not split over T) and top-1 / top-2 gating with drops and RTS, 3
// optimizer steps give per-step losses and a final parameter fingerprint within 1e-5 relative of
// the reference. The global batch is the same for every layout (micro-batches per rank = G / DP),
// so one reference run per gating serves them all; every rank computes it itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "comm/test_env.hpp"
#include "ted/backend/memory.hpp"
#include "ted/grid/ted_groups.hpp"
#include "ted/projection/cluster.hpp"
#include "ted/projection/memory.hpp"
#include "ted/projection/traffic.hpp"
#include "ted/train/trainer.hpp"

namespace {

constexpr double kTolerance = 1e-5;

ted::train::TrainConfig tiny(int world, int top_k) {
  ted::train::TrainConfig c;
  bool by_three = world % 3 == 0;
  c.model.vocab = 19;
  c.model.seq_len = 8;
  c.model.heads = by_three ? 6 : 8;
  c.model.hidden = 4 * c.model.heads;
  c.model.layers = 2;
  c.model.gate.experts = by_three ? 6 : 8;
  c.model.gate.top_k = top_k;
  c.model.gate.capacity_factor = top_k == 1 ? 0.5 : 0.75;  // drops happen
  c.model.gate.min_capacity = 1;
  c.model.gate.random_token_selection = true;
  c.model.init_std = 0.1;
  c.optimizer.lr = 1e-2;
  c.optimizer.warmup_steps = 1;
  c.data.micro_batch = 2;
  c.data.micro_batches = world;  // the reference: all G micro-batches on one process
  c.steps = 3;
  return c;
}

struct Run {
  std::vector<double> losses;
  double fingerprint = 0;
  int dropped = 0;
};

Run train(const ted::train::TrainConfig& config, ted::TedGroups* groups) {
  auto device = ted::make_cpu_device();
  ted::train::Trainer trainer(config, *device, groups);
  Run run;
  for (int step = 0; step < config.steps; ++step) {
    auto record = trainer.step(step);
    run.losses.push_back(record.loss);
    run.dropped += record.dropped;
  }
  run.fingerprint = trainer.fingerprint();
  return run;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

struct Switches {
  const char* name;
  bool dtd, reduce_scatter, checkpoint, cac, zero1;
  std::int64_t tile;
  bool split_experts = true;
  bool cac_all_reduce = false;
};
const Switches kSwitches[] = {
    {"baseline", false, false, false, false, true, 0},
    {"dtd", true, false, false, false, true, 0},
    {"dtd+reduce-scatter", true, true, false, false, true, 0},
    {"checkpointing", false, false, true, false, true, 0},
    {"checkpointing+cac", false, false, true, true, true, 0},
    {"all: dtd+rs+checkpointing+cac+tiles", true, true, true, true, true, 7},
    {"no zero-1", false, false, false, false, false, 0},
    {"tiled optimizer (11 elements)", false, false, false, false, true, 11},
    {"experts not split", false, false, false, false, true, 0, false},
    {"experts not split + checkpointing + cac", false, false, true, true, true, 0, false},
    {"checkpointing+cac with all-reduce stash", false, false, true, true, true, 0, true, true},
    {"dtd+rs+checkpointing+cac with all-reduce stash", true, true, true, true, true, 0, true, true},
};

}  // namespace

TEST_CASE("every layout and switch set equals the single-process reference") {
  auto& world = ted::test::world();
  const int G = world.size();
  for (int top_k : {1, 2}) {
    const auto reference = train(tiny(G, top_k), nullptr);
    REQUIRE(reference.dropped > 0);
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(world, grid);
      for (const auto& sw : kSwitches) {
        auto config = tiny(G, top_k);
        const int dp = layout.expert * layout.data;
        config.data.micro_batches = G / dp;  // same global batch as the reference
        config.parallel = {layout.tensor,     layout.expert, layout.data, sw.dtd,          sw.cac,
                           sw.reduce_scatter, sw.zero1,      sw.tile,     sw.split_experts};
        config.model.checkpoint = sw.checkpoint;
        config.parallel.cac_all_reduce = sw.cac_all_reduce;
        INFO("top-" << top_k << ", " << layout.to_string() << ", " << sw.name << ", rank "
                    << world.rank());
        auto run = train(config, &groups);
        REQUIRE(run.losses.size() == reference.losses.size());
        for (std::size_t s = 0; s < run.losses.size(); ++s) {
          INFO("step " << s << ": " << run.losses[s] << " vs reference " << reference.losses[s]);
          CHECK(relative(run.losses[s], reference.losses[s]) < kTolerance);
        }
        INFO("fingerprint " << run.fingerprint << " vs reference " << reference.fingerprint);
        CHECK(relative(run.fingerprint, reference.fingerprint) < kTolerance);
        CHECK(run.dropped == reference.dropped);
      }
    }
  }
}

namespace {

// One optimizer step with a ledger on every TED group; returns the ledger.
// `flops`, if given: the GEMM FLOPs the model counted for the step on this rank.
ted::Ledger ledger_of_step(ted::TedGroups& groups, const ted::train::TrainConfig& config,
                           double* flops = nullptr) {
  ted::Ledger ledger;
  for (auto kind : {ted::GroupKind::tensor, ted::GroupKind::expert, ted::GroupKind::expert_data,
                    ted::GroupKind::nonexpert_data})
    groups.group(kind).set_ledger(&ledger);
  auto device = ted::make_cpu_device();
  // As the programs do: one process trains without groups.
  ted::train::Trainer trainer(config, *device, groups.world().size() > 1 ? &groups : nullptr);
  const auto record = trainer.step(0);
  if (flops) *flops = record.flops;
  for (auto kind : {ted::GroupKind::tensor, ted::GroupKind::expert, ted::GroupKind::expert_data,
                    ted::GroupKind::nonexpert_data})
    groups.group(kind).set_ledger(nullptr);
  return ledger;
}

}  // namespace

TEST_CASE("ledger: DTD divides all-to-all bytes by T, CAC saves a third, reduce-scatter halves") {
  auto& world = ted::test::world();
  const int G = world.size();
  const int T = G % 3 == 0 ? 3 : 2, Ep = 2;
  if (G < 4 || G % (T * Ep) != 0) return;  // needs T > 1 and Ep > 1
  ted::ProcessGrid grid(G, ted::Layout{T, Ep, G / (T * Ep)});
  ted::TedGroups groups(world, grid);
  auto config = tiny(G, 1);
  config.model.gate.capacity_factor = 1.0;  // 16 tokens over 8 (or 6) experts: C = 2 (or 3),
  config.model.gate.min_capacity = 0;       // a multiple of T, so DTD needs no padding
  const int dp = Ep * (G / (T * Ep)), micro = 2;
  config.data.micro_batches = micro;
  config.parallel = {T, Ep, G / (T * Ep), false, false, false, true, 0};
  const int moe_layers = 1;  // layers = 2, expert_interval = 2
  INFO("T=" << T << " Ep=" << Ep << " DP=" << dp << ", rank " << world.rank());

  const auto plain = ledger_of_step(groups, config);
  const auto& a2a = plain.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert);
  CHECK(a2a.calls == 4u * micro * moe_layers);  // 2 forward, 2 backward

  auto dtd_config = config;
  dtd_config.parallel.dtd = true;
  const auto dtd = ledger_of_step(groups, dtd_config);
  const auto& a2a_dtd = dtd.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert);
  CHECK(a2a_dtd.calls == a2a.calls);
  CHECK(a2a_dtd.bytes_sent * T == a2a.bytes_sent);  // exactly 1/T
  CHECK(a2a_dtd.bytes_recv * T == a2a.bytes_recv);
  // ... and an all-gather in the tensor group of the full buffer per all-to-all.
  const auto& gathers = dtd.total(ted::CollectiveOp::all_gather, ted::GroupKind::tensor);
  CHECK(gathers.calls == a2a.calls);
  CHECK(gathers.bytes_recv == a2a.bytes_sent);

  auto rs_config = dtd_config;
  rs_config.parallel.reduce_scatter = true;
  const auto rs = ledger_of_step(groups, rs_config);
  // The expert block's tensor all-reduces become reduce-scatters of the same buffers: half the
  // bus bytes. (The attention and dense-FFN all-reduces are the same in both runs.)
  double expert_all_reduce =
      dtd.total(ted::CollectiveOp::all_reduce, ted::GroupKind::tensor).bus_bytes -
      rs.total(ted::CollectiveOp::all_reduce, ted::GroupKind::tensor).bus_bytes;
  double reduce_scatter =
      rs.total(ted::CollectiveOp::reduce_scatter, ted::GroupKind::tensor).bus_bytes;
  CHECK(rs.total(ted::CollectiveOp::reduce_scatter, ted::GroupKind::tensor).calls ==
        2u * micro * moe_layers);
  CHECK(expert_all_reduce > 0);
  CHECK(reduce_scatter * 2 == Approx(expert_all_reduce).epsilon(1e-12));

  auto checkpoint_config = config;
  checkpoint_config.model.checkpoint = true;
  const auto recomputed = ledger_of_step(groups, checkpoint_config);
  CHECK(recomputed.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert).calls ==
        6u * micro * moe_layers);
  checkpoint_config.parallel.cac = true;
  const auto cac = ledger_of_step(groups, checkpoint_config);
  CHECK(cac.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert).calls ==
        4u * micro * moe_layers);
  // With the all-reduce outputs stashed too, the recompute adds no tensor all-reduce: as many
  // as without checkpointing, where plain checkpointing repeats the forward's.
  checkpoint_config.parallel.cac_all_reduce = true;
  const auto cac_all = ledger_of_step(groups, checkpoint_config);
  const auto tensor_all_reduces = [](const ted::Ledger& l) {
    return l.total(ted::CollectiveOp::all_reduce, ted::GroupKind::tensor).calls;
  };
  CHECK(tensor_all_reduces(cac_all) == tensor_all_reduces(plain));
  CHECK(tensor_all_reduces(recomputed) > tensor_all_reduces(plain));
  CHECK(cac_all.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert).calls ==
        4u * micro * moe_layers);
}

TEST_CASE("allocator: tiles bound the optimizer temporaries; the CAC stash equals its formula") {
  auto& world = ted::test::world();
  const int G = world.size();
  const int T = G % 3 == 0 ? 3 : 2, Ep = 2;
  if (G < 4 || G % (T * Ep) != 0) return;
  const int D = G / (T * Ep);
  ted::ProcessGrid grid(G, ted::Layout{T, Ep, D});
  ted::TedGroups groups(world, grid);
  auto config = tiny(G, 1);
  config.model.gate.capacity_factor = 1.0;
  config.model.gate.min_capacity = 0;
  config.data.micro_batches = 2;
  config.parallel = {T, Ep, D, false, false, false, true, 0};
  INFO("T=" << T << " Ep=" << Ep << " D=" << D << ", rank " << world.rank());

  auto peaks = [&](const ted::train::TrainConfig& c, ted::MemoryCategory category,
                   std::size_t* dense_shard = nullptr, std::size_t* expert_shard = nullptr) {
    auto cpu = ted::make_cpu_device();
    ted::TrackingDevice device(*cpu);
    ted::train::Trainer trainer(c, device, &groups);
    trainer.step(0);
    const auto& params = trainer.model().params();
    if (dense_shard) *dense_shard = params.range(ted::model::ParamKind::dense).second / (Ep * D);
    if (expert_shard) *expert_shard = params.range(ted::model::ParamKind::expert).second / D;
    return device.usage(category).peak;
  };

  // Without tiles the whole shard's temporary copy is alive at once; with tiles, one tile.
  std::size_t dense_shard = 0, expert_shard = 0;
  auto untiled =
      peaks(config, ted::MemoryCategory::optimizer_temporaries, &dense_shard, &expert_shard);
  CHECK(untiled == std::max(dense_shard, expert_shard) * sizeof(float));
  config.parallel.tile_elems = 11;
  CHECK(peaks(config, ted::MemoryCategory::optimizer_temporaries) == 11 * sizeof(float));
  config.parallel.tile_elems = 0;
  // ZeRO-1 off: every rank updates the whole part, so the untiled spike is the whole part.
  config.parallel.zero1 = false;
  CHECK(peaks(config, ted::MemoryCategory::optimizer_temporaries) ==
        std::max(dense_shard * Ep * D, expert_shard * D) * sizeof(float));
  config.parallel.zero1 = true;

  // CAC keeps both all-to-all outputs of every MoE layer of the micro-batch in flight:
  // 2 x E x C' x h floats per layer, C' = C, or C / T with DTD.
  const int tokens = config.data.micro_batch * config.model.seq_len;
  const std::size_t C = ted::model::expert_capacity(config.model.gate, tokens);
  REQUIRE(C % T == 0);
  const std::size_t E = config.model.gate.experts, h = config.model.hidden, moe_layers = 1;
  config.model.checkpoint = true;
  CHECK(peaks(config, ted::MemoryCategory::cac_stash) == 0);
  config.parallel.cac = true;
  CHECK(peaks(config, ted::MemoryCategory::cac_stash) ==
        moe_layers * 2 * E * C * h * sizeof(float));
  config.parallel.dtd = true;
  CHECK(peaks(config, ted::MemoryCategory::cac_stash) ==
        moe_layers * 2 * E * (C / T) * h * sizeof(float));
}

namespace {
// What the projection sees of a training config on a layout.
ted::projection::StepShape shape_of(const ted::train::TrainConfig& config,
                                    const ted::Layout& layout) {
  ted::projection::StepShape shape;
  shape.model = config.model;
  shape.micro_batch = config.data.micro_batch;
  shape.micro_batches = config.data.micro_batches;
  shape.layout = layout;
  shape.parallel = config.parallel;
  return shape;
}
}  // namespace

TEST_CASE("the traffic and FLOP models equal the ledger and the model's own count") {
  auto& world = ted::test::world();
  const int G = world.size();
  for (int top_k : {1, 2}) {
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(world, grid);
      for (const auto& sw : kSwitches) {
        auto config = tiny(G, top_k);
        config.data.micro_batches = 2;
        config.parallel = {layout.tensor,     layout.expert, layout.data, sw.dtd,          sw.cac,
                           sw.reduce_scatter, sw.zero1,      sw.tile,     sw.split_experts};
        config.parallel.cac_all_reduce = sw.cac_all_reduce;
        config.model.checkpoint = sw.checkpoint;
        INFO("top-" << top_k << ", " << layout.to_string() << ", " << sw.name << ", rank "
                    << world.rank());
        double flops = 0;
        const auto ledger = ledger_of_step(groups, config, &flops);
        // The compute model counts the FLOPs the model ran.
        CHECK(ted::projection::step_flops(shape_of(config, layout)) ==
              Approx(flops).epsilon(1e-12));

        const auto predicted = ted::projection::step_traffic(shape_of(config, layout));
        for (std::size_t op = 0; op < ted::kCollectiveOpCount; ++op)
          for (auto group : {ted::GroupKind::tensor, ted::GroupKind::expert,
                             ted::GroupKind::expert_data, ted::GroupKind::nonexpert_data}) {
            auto kind = static_cast<ted::CollectiveOp>(op);
            INFO(ted::to_string(kind) << " on the " << ted::to_string(group) << " group");
            const auto& measured = ledger.total(kind, group);
            const auto& model = ted::projection::at(predicted, kind, group);
            CHECK(model.calls == measured.calls);
            CHECK(model.bytes_sent == measured.bytes_sent);
            CHECK(model.bytes_recv == measured.bytes_recv);
          }
      }
    }
  }
}

TEST_CASE("the parameter parts of the traffic model match the flat buffers") {
  auto& world = ted::test::world();
  const int G = world.size();
  for (const auto& layout : ted::all_layouts(G)) {
    for (bool split : {true, false}) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(world, grid);
      auto config = tiny(G, 1);
      config.parallel = {layout.tensor, layout.expert, layout.data};
      config.parallel.split_experts = split;
      auto device = ted::make_cpu_device();
      ted::train::Trainer trainer(config, *device, &groups);
      const auto& params = trainer.model().params();
      auto parts = ted::projection::parameter_parts(config.model, layout, split);
      INFO(layout.to_string() << (split ? "" : ", experts not split"));
      CHECK(parts.dense == params.range(ted::model::ParamKind::dense).second);
      CHECK(parts.expert == params.range(ted::model::ParamKind::expert).second);
    }
  }
}

TEST_CASE("the memory model matches the allocator's peaks within 5%") {
  auto& world = ted::test::world();
  const int G = world.size();
  for (const auto& layout : ted::all_layouts(G)) {
    ted::ProcessGrid grid(G, layout);
    ted::TedGroups groups(world, grid);
    for (const auto& sw : kSwitches) {
      auto config = tiny(G, 1);
      config.data.micro_batches = 2;
      config.parallel = {layout.tensor,     layout.expert, layout.data, sw.dtd,          sw.cac,
                         sw.reduce_scatter, sw.zero1,      sw.tile,     sw.split_experts};
      config.parallel.cac_all_reduce = sw.cac_all_reduce;
      config.model.checkpoint = sw.checkpoint;
      auto cpu = ted::make_cpu_device();
      ted::TrackingDevice device(*cpu);
      {
        ted::train::Trainer trainer(config, device, G > 1 ? &groups : nullptr);
        trainer.step(0);
      }
      const auto estimate = ted::projection::step_memory(shape_of(config, layout));
      for (std::size_t c = 0; c < ted::kMemoryCategoryCount; ++c) {
        auto category = static_cast<ted::MemoryCategory>(c);
        double measured = static_cast<double>(device.usage(category).peak);
        double model = static_cast<double>(estimate.of(category));
        INFO(layout.to_string() << ", " << sw.name << ", " << ted::to_string(category) << ": model "
                                << model << " vs allocator " << measured << ", rank "
                                << world.rank());
        CHECK(std::abs(model - measured) <= 0.05 * std::max(measured, 1.0));
      }
    }
  }
}
