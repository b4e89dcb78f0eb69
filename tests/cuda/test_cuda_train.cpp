// A short training run on one GPU against the CPU reference Trainer, on the same data, seed
// and initial weights: fp32 tracks the reference step by step; bf16 and fp16 (with dynamic
// loss scaling) track it loosely and learn as much. Also one MoE block forward+backward.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

#include "cuda/gpu.hpp"
#include "ted/train/cuda/gpu_trainer.hpp"

using namespace ted;
using namespace ted::test;

namespace {

train::TrainConfig tiny_run(int steps) {  // the CPU training test's model, top-2 with drops
  train::TrainConfig c;
  c.model.vocab = 32;
  c.model.seq_len = 16;
  c.model.hidden = 32;
  c.model.heads = 4;
  c.model.layers = 2;
  c.model.gate.experts = 4;
  c.model.gate.top_k = 2;
  c.model.gate.capacity_factor = 0.75;
  c.model.gate.random_token_selection = true;
  c.optimizer.lr = 3e-3;
  c.optimizer.min_lr = 3e-4;
  c.data.micro_batch = 8;
  c.data.micro_batches = 2;
  c.steps = steps;
  return c;
}

std::vector<double> cpu_losses(const train::TrainConfig& config) {
  auto device = make_cpu_device();
  train::Trainer trainer(config, *device);
  std::vector<double> losses;
  for (int s = 0; s < config.steps; ++s) losses.push_back(trainer.step(s).loss);
  return losses;
}

template <typename T>
std::vector<double> gpu_losses(const train::TrainConfig& config, int* skipped = nullptr) {
  train::cuda::GpuTrainer<T> trainer(config, gpu());
  std::vector<double> losses;
  for (int s = 0; s < config.steps; ++s) losses.push_back(trainer.step(s).loss);
  if (skipped) *skipped = trainer.scaler().skipped();
  return losses;
}

double tail_mean(const std::vector<double>& v, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += v[v.size() - 1 - i];
  return sum / n;
}

}  // namespace

TEST_CASE("fp32 training on the GPU tracks the CPU reference step by step", "[cuda][train]") {
  auto config = tiny_run(30);
  auto want = cpu_losses(config);
  auto got = gpu_losses<float>(config);
  double worst = 0;
  for (int s = 0; s < config.steps; ++s)
    worst = std::max(worst, std::fabs(got[s] - want[s]) / want[s]);
  WARN("fp32: worst relative loss difference over 30 steps " << worst << "; loss " << want.front()
                                                             << " -> " << want.back());
  CHECK(worst < 1e-3);
}

TEMPLATE_TEST_CASE("16-bit training on the GPU tracks the CPU reference", "[cuda][train]",
                   ted::BFloat16, ted::Half) {
  using T = TestType;
  auto config = tiny_run(200);
  auto want = cpu_losses(config);
  int skipped = 0;
  auto got = gpu_losses<T>(config, &skipped);
  double first = std::fabs(got.front() - want.front()) / want.front();
  double end_cpu = tail_mean(want, 5), end_gpu = tail_mean(got, 5);
  WARN(to_string(dtype_of<T>::value)
       << ": first loss " << got.front() << " vs " << want.front() << "; last-5 mean " << end_gpu
       << " vs " << end_cpu << "; skipped steps " << skipped);
  CHECK(first < 2e-2);
  CHECK(std::fabs(end_gpu - end_cpu) < 0.1 * end_cpu + 0.05);
  CHECK(end_gpu < 0.5 * got.front());  // it learned
}
