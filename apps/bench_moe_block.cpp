// bench_moe_block: GFLOP/s of one MoE transformer block, forward + backward, on the CPU
// reference backend, next to cblas_sgemm of the expert FFN's shape in the same binary (the
// machine's practical peak). FLOPs are those of the GEMMs the block runs (attention counted
// as the whole S x S square, expert FFNs over the full capacity, gate, and a 256-way LM head
// the single-block model needs). act_peak_MiB: the activation peak of the step from the
// tracking allocator (fused attention keeps no S x S probabilities); slots_kept, the share of the
// experts' capacity slots holding a token, and run_GFLOP/s, the rate of the GEMMs that ran (the
// experts leave the empty slots out; TED_FULL_CAPACITY=1 runs them).
// scripts/comparisons/bench_vs_pytorch.sh times the same model in PyTorch next to it.
//
//   build/apps/bench_moe_block                               # h=512 and 1024, 2048 tokens
//   build/apps/bench_moe_block --benchmark_filter=tiny       # what CTest runs
//   TED_PROFILE_OPS=cpu build/apps/bench_moe_block ...       # time per op (backend/cpu)
#include <benchmark/benchmark.h>

#include <cmath>
#include <vector>

#include "bench_main.hpp"
#include "moe_block.hpp"
#include "sgemm_bench.hpp"
#include "ted/backend/cpu/cpu_ops.hpp"
#include "ted/backend/memory.hpp"
#include "ted/device/device.hpp"
#include "ted/kernels/cpu/blas.hpp"

namespace {

using ted::bench::sgemm;  // sgemm_bench.hpp

using ted::bench::BlockShape;

void moe_block(benchmark::State& state, BlockShape shape) {
  auto cpu = ted::make_cpu_device();
  ted::TrackingDevice device(*cpu);
  ted::model::GptModel<float> model(ted::bench::one_moe_block(shape), device);
  ted::bench::BlockBatch data(shape);
  const auto& batch = data.batch;
  const int tokens = shape.seq * shape.sequences;

  // One untimed step first, as PyTorch's side has its warm-up: the first step touches fresh
  // activation and gradient memory, which later steps take from the device's cache.
  model.forward(batch);
  model.backward(1.0f);

  double flops = 0;
  int dropped = 0;
  for (auto _ : state) {
    auto losses = model.forward(batch);
    flops = 3.0 * model.last_forward_flops();  // backward = 2x forward, every slot counted
    dropped = losses.dropped;
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
  state.counters["act_peak_MiB"] =
      static_cast<double>(device.usage(ted::MemoryCategory::activations).peak) / (1 << 20);
  // The capacity slots that hold a token, and the FLOPs of the GEMMs that ran: the CPU experts
  // leave the empty slots out unless TED_FULL_CAPACITY=1, while GFLOP/s counts every slot (the
  // model's FLOPs, as PyTorch's block runs them).
  const auto& config = model.config();
  const double slots =
      static_cast<double>(config.gate.experts) * ted::routing::expert_capacity(config.gate, tokens);
  const double kept = (static_cast<double>(tokens) * config.gate.top_k - dropped) / slots;
  const double expert_flops = 3.0 * 4.0 * slots * config.hidden * config.ffn();
  const double ran =
      ted::cpu::experts_run_every_slot() ? flops : flops - expert_flops * (1.0 - kept);
  state.counters["slots_kept"] = kept;
  state.counters["run_GFLOP/s"] =
      benchmark::Counter(ran / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] =
      benchmark::Counter(tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel("attention " + model.attention());
}

}  // namespace

// The sizes of the comparison with PyTorch (scripts/comparisons/bench_vs_pytorch.sh): h = 512 (8
// heads) and 1024 (16 heads), 2048 tokens (8 x 256), 8 experts, top-1 and top-2, cf 1; fused
// attention, and h = 512 with the materialised attention next to it.
#define TED_BLOCK(name, ...)                                  \
  BENCHMARK_CAPTURE(moe_block, name, BlockShape{__VA_ARGS__}) \
      ->Unit(benchmark::kMillisecond)                         \
      ->UseRealTime()                                         \
      ->MinTime(2.0);
TED_BLOCK(h512_tokens2048_e8_top1, 512, 8, 256, 8, 8, 1)
TED_BLOCK(h512_tokens2048_e8_top2, 512, 8, 256, 8, 8, 2)
TED_BLOCK(h1024_tokens2048_e8_top1, 1024, 16, 256, 8, 8, 1)
TED_BLOCK(h1024_tokens2048_e8_top2, 1024, 16, 256, 8, 8, 2)
TED_BLOCK(h512_tokens2048_e8_top1_materialized, 512, 8, 256, 8, 8, 1,
          ted::model::AttentionKind::materialized)
TED_BLOCK(h512_tokens2048_e8_top2_materialized, 512, 8, 256, 8, 8, 2,
          ted::model::AttentionKind::materialized)
BENCHMARK_CAPTURE(sgemm, expert_ffn_2048x2048x512, 2048, 2048, 512)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);
// The CPU experiments' block (experiments/*/cpu.yaml): what scripts/calibration/calibrate_cpu.sh
// measures.
BENCHMARK_CAPTURE(moe_block, h128_tokens256_e8_top1, BlockShape{128, 8, 64, 4, 8, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(1.0);
// Small shapes for CTest's smoke run (both attention variants).
BENCHMARK_CAPTURE(moe_block, tiny, BlockShape{32, 4, 16, 4, 4, 2})->Iterations(3);
BENCHMARK_CAPTURE(moe_block, tiny_materialized,
                  BlockShape{32, 4, 16, 4, 4, 2, ted::model::AttentionKind::materialized})
    ->Iterations(3);
BENCHMARK_CAPTURE(sgemm, tiny, 64, 64, 32)->Iterations(3);

int main(int argc, char** argv) {
  return ted::bench::benchmark_main(
      argc, argv,
      "bench_moe_block: measures one MoE transformer block, forward + backward, on the CPU\n"
      "reference backend: time per step, GFLOP/s (from the GEMMs it runs) and the activation\n"
      "peak (act_peak_MiB, tracking allocator); next to it cblas_sgemm of the expert FFN's\n"
      "shape, the machine's practical peak. Shapes: h512 and h1024 with 2048 tokens, 8\n"
      "experts, top-1/top-2, fused and materialised attention; tiny* is what CTest runs.\n"
      "Threads: TED_NUM_THREADS (default: the CPUs of the affinity mask). The experts leave\n"
      "the empty capacity slots out (slots_kept, run_GFLOP/s); TED_FULL_CAPACITY=1 runs them.\n"
      "  build/apps/bench_moe_block --benchmark_filter=tiny");
}
