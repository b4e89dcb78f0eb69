// Google Benchmark of one MoE transformer block, forward + backward, on one GPU: the suite's
// model (model/gpt.hpp) with a single MoE block on the CUDA backend, in bf16 or fp16 storage with
// fp32-accumulating cuBLAS GEMMs. Next to it, in the same binary, a cuBLAS GEMM of the experts'
// shape, the practical peak; the block reports its TFLOP/s (the GEMM FLOPs it ran: attention,
// gate, experts over the full capacity, and the small LM head a one-block model needs) and that
// GEMM's rate measured in the same run.
// Before timing, each block checks itself: its loss against the fp32 model on the same weights
// and data on the same GPU (the fp32 path is held to the CPU reference by the backend tests);
// `passed` is 1 or the benchmark reports an error.
//
//   build/apps/bench_moe_block_cuda                               # paper size and a tiny one
//   build/apps/bench_moe_block_cuda --benchmark_filter=tiny       # what CTest runs
// --help works anywhere; without a GPU anything else exits 77 (skipped).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "moe_block.hpp"
#include "ted/backend/registry.hpp"
#include "ted/kernels/cuda/kernels.hpp"

namespace {

namespace kc = ted::kernels::cuda;

std::unique_ptr<ted::Device> g_device;

struct Size {
  const char* name;
  ted::bench::BlockShape shape;
};

// The size (h=4096, 8 experts, top-2, 8192 tokens) with fused attention (the default:
// kernels/cuda/flash_attention.cuh, written for clarity, fp32 in shared memory) and with the
// materialised one (cuBLAS), and a tiny one for CTest (both variants).
const Size kSizes[] = {
    {"paper_h4096_E8_top2_8192tok", {4096, 32, 2048, 4, 8, 2}},
    {"paper_h4096_E8_top2_8192tok_materialized", {4096, 32, 2048, 4, 8, 2, "materialized"}},
    {"tiny_h64_E4_top2_256tok", {64, 4, 128, 2, 4, 2}},
    {"tiny_h64_E4_top2_256tok_materialized", {64, 4, 128, 2, 4, 2, "materialized"}}};

double seconds_of(const std::function<void()>& work) {
  g_device->synchronize();
  auto start = std::chrono::steady_clock::now();
  work();
  g_device->synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The experts' GEMM shape as one plain GEMM: [tokens, h] x [h, 4h].
template <typename T>
struct GemmRef {
  int m, n, k;
  kc::Context ctx;
  ted::Tensor<T> a, b, c;
  explicit GemmRef(const ted::bench::BlockShape& s)
      : m(s.sequences * s.seq),
        n(4 * s.hidden),
        k(s.hidden),
        ctx(*g_device),
        a(*g_device, static_cast<std::size_t>(m) * k),
        b(*g_device, static_cast<std::size_t>(k) * n),
        c(*g_device, static_cast<std::size_t>(m) * n) {
    g_device->fill(a.data(), a.size(), ted::dtype_of<T>::value, 0.01);
    g_device->fill(b.data(), b.size(), ted::dtype_of<T>::value, 0.01);
  }
  void run() {
    kc::gemm<T>(ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  }
  double flops() const { return 2.0 * m * n * k; }
};

template <typename T>
void BM_gemm(benchmark::State& state, Size size) {
  GemmRef<T> gemm(size.shape);
  gemm.run();
  for (auto _ : state) state.SetIterationTime(seconds_of([&] { gemm.run(); }));
  state.counters["TFLOPs"] =
      benchmark::Counter(gemm.flops() * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
}

template <typename T>
void BM_moe_block(benchmark::State& state, Size size) {
  const auto config = ted::bench::one_moe_block(size.shape);
  ted::bench::BlockBatch data(size.shape);
  double want = 0;
  {  // the fp32 model on the same weights (same seed and init) and data
    ted::model::GptModel<float> reference(config, *g_device);
    want = reference.forward(data.batch).lm;
  }
  ted::model::GptModel<T> model(config, *g_device);
  const double got = model.forward(data.batch).lm;
  model.backward(1.0f);
  const double error = std::fabs(got - want) / want;
  const std::string why = "loss " + std::to_string(got) + " vs fp32 " + std::to_string(want) +
                          " (relative " + std::to_string(error) + ", tolerance 2e-2)";
  if (!std::isfinite(got) || error > 2e-2) {
    state.SkipWithError(("self-check failed: " + why).c_str());
    return;
  }
  // The practical peak, measured in this run: the best of 10 GEMMs of the experts' shape.
  GemmRef<T> gemm(size.shape);
  gemm.run();
  double best = INFINITY;
  for (int i = 0; i < 10; ++i) best = std::min(best, seconds_of([&] { gemm.run(); }));
  double flops = 0;
  for (auto _ : state) {
    state.SetIterationTime(seconds_of([&] {
      model.forward(data.batch);
      flops = 3.0 * model.last_forward_flops();  // backward = 2x forward
      model.backward(1.0f);
    }));
  }
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["gemm_TFLOPs"] = gemm.flops() / best * 1e-12;
  state.counters["passed"] = 1;
  state.SetLabel(why);
}

}  // namespace

int main(int argc, char** argv) {
  // Before looking for a GPU: --help answers on any machine.
  ted::bench::program_description() =
      "bench_moe_block_cuda: measures one MoE transformer block, forward + backward, on one\n"
      "GPU (the suite's model on the CUDA backend, bf16 and fp16 storage, fp32-accumulating\n"
      "cuBLAS): time per step and TFLOP/s, next to a cuBLAS GEMM of the experts' shape measured\n"
      "in the same run. Each block first checks its 16-bit loss against the fp32 model on the\n"
      "same weights (passed = 1). Sizes: the paper's block (h4096, 8 experts, top-2, 8192\n"
      "tokens) and tiny (what CTest runs). Without a GPU it exits 77 (skipped).\n"
      "  build/apps/bench_moe_block_cuda --benchmark_filter=tiny";
  if (ted::bench::asks_for_help(argc, argv)) {
    ted::bench::print_help();
    return 0;
  }
  if (ted::gpu_count() == 0) {
    std::printf("SKIPPED: no GPU visible to this process (the CUDA benchmark needs one)\n");
    return 77;
  }
  g_device = ted::make_gpu_device(0);
  std::printf("# %s\n", g_device->name().c_str());
  for (const Size& size : kSizes) {
    std::string n = size.name;
    benchmark::RegisterBenchmark(("moe_block_bf16/" + n).c_str(), BM_moe_block<ted::BFloat16>, size)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("moe_block_fp16/" + n).c_str(), BM_moe_block<ted::Half>, size)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("cublas_gemm_bf16/" + n).c_str(), BM_gemm<ted::BFloat16>, size)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  ted::bench::initialize(&argc, argv, ted::bench::program_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_device.reset();
  return 0;
}
