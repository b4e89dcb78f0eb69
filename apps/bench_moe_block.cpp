// bench_moe_block: GFLOP/s of one MoE transformer block, forward + backward, on the CPU
// reference backend, next to cblas_sgemm of the expert FFN's shape in the same binary (the
// machine's practical peak). FLOPs are those of the GEMMs the block runs (attention, expert
// FFNs over the full capacity, gate, and a 256-token LM head the single-block model needs).
//
//   build/apps/bench_moe_block                               # h=512, 2048 tokens, 8 experts
//   build/apps/bench_moe_block --benchmark_filter=tiny       # what CTest runs
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "moe_block.hpp"
#include "ted/backend/device.hpp"
#include "ted/kernels/cpu/blas.hpp"

namespace {

using ted::bench::BlockShape;

void moe_block(benchmark::State& state, BlockShape shape) {
  auto device = ted::make_cpu_device();
  ted::model::GptModel<float> model(ted::bench::one_moe_block(shape), *device);
  ted::bench::BlockBatch data(shape);
  const auto& batch = data.batch;
  const int tokens = shape.seq * shape.sequences;

  double flops = 0;
  for (auto _ : state) {
    auto losses = model.forward(batch);
    flops = 3.0 * model.last_forward_flops();  // backward = 2x forward
    model.backward(1.0f);
    if (!std::isfinite(losses.lm)) {  // the benchmark checks what it runs
      state.SkipWithError("loss is not finite");
      break;
    }
    benchmark::DoNotOptimize(model.params().grads().data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens"] = tokens;
  state.counters["tok/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
}

// C[m, n] = A[m, k] B[k, n], the expert FFN's first GEMM at full capacity.
void sgemm(benchmark::State& state, int m, int n, int k) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f),
      b(static_cast<std::size_t>(k) * n, 0.25f);
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (auto _ : state) {
    ted::kernels::cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(),
                            n);
    benchmark::DoNotOptimize(c.data());
  }
  if (c[0] != 0.125f * k) state.SkipWithError("sgemm result is wrong");
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

// The size the issue asks about: h = 512, 2048 tokens (8 x 256), 8 experts, top-1, cf 1.
BENCHMARK_CAPTURE(moe_block, h512_tokens2048_e8_top1, BlockShape{512, 8, 256, 8, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(moe_block, h512_tokens2048_e8_top2, BlockShape{512, 8, 256, 8, 8, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
BENCHMARK_CAPTURE(sgemm, expert_ffn_2048x2048x512, 2048, 2048, 512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
// The CPU experiments' block (experiments/*/cpu.yaml): what scripts/calibrate_cpu.sh measures.
BENCHMARK_CAPTURE(moe_block, h128_tokens256_e8_top1, BlockShape{128, 8, 64, 4, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
// Small shapes for CTest's smoke run.
BENCHMARK_CAPTURE(moe_block, tiny, BlockShape{32, 4, 16, 4, 4, 2})->Iterations(3);
BENCHMARK_CAPTURE(sgemm, tiny, 64, 64, 32)->Iterations(3);

BENCHMARK_MAIN();
