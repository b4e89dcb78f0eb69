// bench_machine: the rates the projection's compute model reads from a CPU cluster file
// (scripts/calibration/calibrate_cpu.sh writes them into experiments/clusters/cpu.yaml):
// cblas_sgemm at a large shape (the practical peak) and at the CPU experiments' shapes (the rate
// their GEMMs run at); the bandwidth of a plain element-wise pass (a = b + s * c) in cache and
// beyond; and the rate of the suite's own element-wise work: the bytes the projection counts for a
// step shaped as the CPU experiments' (a dense and an MoE block of their width, checkpointed, every
// expert slot computed as the projection counts it; projection::memory_bound_bytes) over its
// measured time less its GEMMs' time at the measured sgemm rate. On a CPU the GeLU, softmax and
// LayerNorm kernels compute transcendentals and are far from bandwidth-bound, so this, not the
// triad, is the rate the model's "memory-bound" work runs at here. Each checks its result before it
// reports.
//
//   build/apps/bench_machine --benchmark_filter=tiny   # what CTest runs
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "moe_block.hpp"
#include "sgemm_bench.hpp"
#include "ted/device/device.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/projection/time.hpp"

namespace {

using ted::bench::sgemm;  // sgemm_bench.hpp

// a = b + 3 c over `bytes` bytes per array: two reads and one write per element.
void triad(benchmark::State& state, std::size_t bytes) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  for (auto _ : state) {
    float* out = a.data();
    const float* x = b.data();
    const float* y = c.data();
    for (std::size_t i = 0; i < n; ++i) out[i] = x[i] + 3.0f * y[i];
    benchmark::DoNotOptimize(a.data());
    benchmark::ClobberMemory();
  }
  if (a[n - 1] != 7.0f) state.SkipWithError("triad result is wrong");
  state.counters["GB/s"] = benchmark::Counter(3.0 * n * sizeof(float) / 1e9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

// The fastest of `repeats` single calls after a warm-up one: a call that another process
// preempted only makes that call slower, so the minimum is the machine's rate.
double sgemm_seconds(int m, int n, int k, int repeats) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f),
      b(static_cast<std::size_t>(k) * n, 0.25f), c(static_cast<std::size_t>(m) * n);
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= repeats; ++i) {  // call 0 is the warm-up
    const auto start = std::chrono::steady_clock::now();
    ted::kernels::cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(),
                            n);
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) best = std::min(best, s);
  }
  return best;
}

// TED_FULL_CAPACITY=1 for the scope, the caller's value back after it.
class EverySlot {
 public:
  EverySlot() {
    if (const char* value = std::getenv("TED_FULL_CAPACITY")) saved_ = value, had_ = true;
    setenv("TED_FULL_CAPACITY", "1", 1);
  }
  ~EverySlot() {
    if (had_)
      setenv("TED_FULL_CAPACITY", saved_.c_str(), 1);
    else
      unsetenv("TED_FULL_CAPACITY");
  }
  EverySlot(const EverySlot&) = delete;
  EverySlot& operator=(const EverySlot&) = delete;

 private:
  std::string saved_;
  bool had_ = false;
};

// The block's element-wise rate, as described at the top.
// blocks: 1, one MoE block (the smoke check's tiny one); 2, the experiments' shape.
void elementwise(benchmark::State& state, ted::bench::BlockShape shape, int blocks) {
  // The experts run every capacity slot here, as the projection counts their GEMMs: the time
  // left over after the GEMMs is then the element-wise work alone (by default the CPU experts
  // leave the empty slots out, and the block would take less than the GEMMs the model counts).
  EverySlot every_slot;
  auto device = ted::make_cpu_device();
  // With 2 blocks shaped as the CPU experiments' steps are: a dense block and an MoE block, full
  // activation checkpointing (the recompute runs every element-wise pass of the blocks again).
  auto config = ted::bench::one_moe_block(shape);
  if (blocks == 2) {
    config.layers = 2;
    config.expert_interval = 2;
    config.checkpoint = true;
    config.gate.min_capacity = 4;
  }
  ted::model::GptModel<float> model(config, *device);
  ted::bench::BlockBatch data(shape);
  // One step first (warm-up, and the check of what runs), then the timed iterations.
  if (!std::isfinite(model.forward(data.batch).lm)) {
    state.SkipWithError("loss is not finite");
    return;
  }
  model.backward(1.0f);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    model.forward(data.batch);
    model.backward(1.0f);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      static_cast<double>(state.iterations());
  // The same block as the projection sees it: one rank, one micro-batch of `sequences`.
  ted::projection::StepShape step;
  step.model = config;
  step.micro_batch = shape.sequences;
  step.layout = ted::Layout{1, 1, 1};
  ted::projection::Cluster core;
  const double m = shape.seq * shape.sequences, h = shape.hidden;
  core.sustained_flops =
      2 * m * 4 * h * h / sgemm_seconds(static_cast<int>(m), 4 * shape.hidden, shape.hidden, 50);
  core.peak_flops = core.sustained_flops;
  core.memory_bandwidth = 1e30;  // GEMMs at the sgemm rate only
  const double gemms = ted::projection::gemm_seconds(step, core);
  state.counters["block_ms"] = seconds * 1e3;
  state.counters["gemm_ms"] = gemms * 1e3;
  if (seconds <= gemms) {
    // Timing noise, not a wrong result (a block this small is mostly GEMMs): no rate derived,
    // and scripts/calibration/calibrate_cpu.sh, which reads GB/s, says so.
    state.SetLabel("no GB/s: the block measured within its GEMMs' time (a noisy machine)");
    return;
  }
  state.counters["GB/s"] = ted::projection::memory_bound_bytes(step) / (seconds - gemms) / 1e9;
}

}  // namespace

// The CPU experiments' blocks (experiments/*/cpu.yaml: h128, 8 heads, 4 x 64 tokens, 8 experts).
BENCHMARK_CAPTURE(elementwise, cpu_block_h128, ted::bench::BlockShape{128, 8, 64, 4, 8, 1}, 2)
    ->Iterations(20)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sgemm, large_2048x2048x512, 2048, 2048, 512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
// The CPU experiments' FFN GEMM (experiments/*/cpu.yaml: 256 tokens, hidden 128, FFN 512).
BENCHMARK_CAPTURE(sgemm, cpu_ffn_256x512x128, 256, 512, 128)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(1.0);
// The CPU experiments' small GEMMs (scripts/calibration/calibrate_cpu.sh fits the shape model to
// them): attention scores and context of one head (64 tokens, head 16), an expert's FFN (32 rows),
// the tensor-split projection.
BENCHMARK_CAPTURE(sgemm, cpu_scores_64x64x16, 64, 64, 16)->UseRealTime()->MinTime(0.5);
BENCHMARK_CAPTURE(sgemm, cpu_context_64x16x64, 64, 16, 64)->UseRealTime()->MinTime(0.5);
BENCHMARK_CAPTURE(sgemm, cpu_expert_32x512x128, 32, 512, 128)->UseRealTime()->MinTime(0.5);
BENCHMARK_CAPTURE(sgemm, cpu_proj_256x128x64, 256, 128, 64)->UseRealTime()->MinTime(0.5);
BENCHMARK_CAPTURE(sgemm, cpu_qkv_256x384x128, 256, 384, 128)->UseRealTime()->MinTime(0.5);
// 512 KiB arrays: the CPU experiments' activations ([256, 512] fp32), in cache.
BENCHMARK_CAPTURE(triad, cache_512KiB, 512 << 10)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(triad, dram_256MiB, std::size_t(256) << 20)->UseRealTime()->MinTime(1.0);
// Small cases for CTest's smoke run.
BENCHMARK_CAPTURE(sgemm, tiny, 64, 64, 32)->Iterations(3);
BENCHMARK_CAPTURE(triad, tiny, 64 << 10)->Iterations(3);
BENCHMARK_CAPTURE(elementwise, tiny, ted::bench::BlockShape{32, 4, 16, 4, 4, 2}, 1)->Iterations(1);

int main(int argc, char** argv) {
  return ted::bench::benchmark_main(
      argc, argv,
      "bench_machine: measures the rates the projection's CPU cluster file needs\n"
      "(scripts/calibration/calibrate_cpu.sh writes them into experiments/clusters/cpu.yaml): "
      "cblas_sgemm\n"
      "at a large shape and at the CPU experiments' shapes (GFLOP/s), the bandwidth of an\n"
      "element-wise pass in cache and beyond (GB/s), and the rate of the suite's own\n"
      "element-wise work in a CPU experiment's block. Each checks its result first; tiny* is\n"
      "what CTest runs.\n"
      "  build/apps/bench_machine --benchmark_filter=tiny");
}
