// Training on the backend under test against the CPU fp32 reference Trainer, on the same data,
// seed and initial weights: fp32 tracks the reference step by step (the CPU backend is the
// reference: exactly); the tiny-cpu config trained for 200 steps in bf16 and in fp16 (with
// dynamic loss scaling) ends within 5% of fp32's final loss.
#include "catch.hpp"

#include <cmath>
#include <cstdio>

#include "backend/backend.hpp"
#include "ted/train/trainer.hpp"
#include "train/tiny_run.hpp"

using namespace ted;
using namespace ted::test;

namespace {

train::TrainConfig tiny_top2(int steps) {  // top-2 with drops and RTS
  train::TrainConfig c = tiny_run(steps);
  c.model.gate.top_k = 2;
  c.model.gate.capacity_factor = 0.75;
  c.model.gate.random_token_selection = true;
  return c;
}

struct Run {
  std::vector<double> losses;
  double fingerprint = 0;
  int skipped = 0;
  double last_scale = 1;
};

Run train_on(const train::TrainConfig& config, Device& device) {
  train::Trainer trainer(config, device);
  Run run;
  for (int s = 0; s < config.steps; ++s) {
    auto record = trainer.step(s);
    run.losses.push_back(record.loss);
    run.skipped += record.skipped;
    run.last_scale = record.loss_scale;
  }
  run.fingerprint = trainer.fingerprint();
  return run;
}

Run reference(const train::TrainConfig& config) {
  auto cpu = make_cpu_device();
  auto fp32 = config;
  fp32.run.dtype = DataType::f32;
  return train_on(fp32, *cpu);
}

}  // namespace

TEST_CASE("fp32 training tracks the CPU reference step by step", "[train]") {
  auto config = tiny_top2(30);
  const auto want = reference(config);
  const auto got = train_on(config, device());
  double worst = 0;
  for (int s = 0; s < config.steps; ++s)
    worst = std::max(worst, std::fabs(got.losses[s] - want.losses[s]) / want.losses[s]);
  const double fingerprint = std::fabs(got.fingerprint - want.fingerprint) / want.fingerprint;
  // The CPU backend is the reference; cuBLAS sums in its own order (fp32, no TF32).
  const double tolerance = device().kind() == DeviceKind::cpu ? 0.0 : 1e-3;
  WARN("fp32 on " << device().name() << ": worst relative loss difference over 30 steps " << worst
                  << ", fingerprint " << fingerprint << "; loss " << want.losses.front() << " -> "
                  << want.losses.back());
  CHECK(worst <= tolerance);
  CHECK(fingerprint <= std::max(tolerance, 1e-12));
}

TEST_CASE("200 steps of tiny-cpu in bf16 and fp16 end within 5% of fp32's final loss", "[train]") {
  train::TrainConfig config;
  auto schema = config.schema();
  schema.load_yaml(TED_SOURCE_DIR "/experiments/train/tiny-cpu.yaml");
  REQUIRE(config.steps == 200);
  const auto fp32 = reference(config);
  for (const char* dtype : {"bf16", "fp16"}) {
    auto run_config = config;
    run_config.run.dtype = parse_dtype(dtype);
    const auto got = train_on(run_config, device());
    const double ratio = got.losses.back() / fp32.losses.back();
    WARN(dtype << " on " << device().name() << ": final loss " << got.losses.back() << " vs fp32 "
               << fp32.losses.back() << " (ratio " << ratio << "), first " << got.losses.front()
               << " vs " << fp32.losses.front() << "; skipped steps " << got.skipped
               << ", loss scale at the end " << got.last_scale);
    CHECK(std::fabs(ratio - 1.0) < 0.05);
    CHECK(got.losses.back() < 0.5 * got.losses.front());        // it learned
    if (std::string(dtype) == "bf16") CHECK(got.skipped == 0);  // no loss scaling in bf16
  }
}
