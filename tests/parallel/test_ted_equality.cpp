// TED on MPI ranks equals the single-process reference: for every layout (T, Ep, D) of the
// launched rank count, every switch set (DTD, reduce-scatter, checkpointing, CAC, ZeRO-1 off,
// tiled optimizer step) and top-1 / top-2 gating with drops and RTS, 3 optimizer steps give
// per-step losses and a final parameter fingerprint within 1e-5 relative of the reference.
// The global batch is the same for every layout (micro-batches per rank = G / DP), so one
// reference run per gating serves them all; every rank computes it itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "comm/test_env.hpp"
#include "ted/grid/ted_groups.hpp"
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
        config.parallel = {layout.tensor, layout.expert,     layout.data, sw.dtd,
                           sw.cac,        sw.reduce_scatter, sw.zero1,    sw.tile};
        config.model.checkpoint = sw.checkpoint;
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
