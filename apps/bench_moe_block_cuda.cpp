// Google Benchmark of one MoE transformer block, forward + backward, on one GPU: the suite's
// model (model/gpt.hpp) with a single MoE block on the CUDA backend, in bf16 or fp16 storage with
// fp32-accumulating tensor-core GEMMs. Next to it, in the same binary, a cuBLAS GEMM of the
// experts' shape, the practical peak; the block reports its TFLOP/s (the GEMM FLOPs it ran:
// attention, gate, experts over the full capacity, and the small LM head a one-block model
// needs), that GEMM's rate measured in the same run, and the share of it the block reached.
// Every line names the attention that ran (cudnn, flash: the suite's own kernel, materialized)
// and how many of its GEMMs had their epilogue fused by cuBLASLt.
// Before timing, each block checks itself: its loss against the fp32 model on the same weights
// and data on the same GPU (the fp32 path is held to the CPU reference by the backend tests);
// `passed` is 1, or the benchmark reports an error and the program exits 1 after the run.
//
//   build/apps/bench_moe_block_cuda                               # paper size and a tiny one
//   build/apps/bench_moe_block_cuda --benchmark_filter=tiny       # what CTest runs
//   build/apps/bench_moe_block_cuda --profile-step=paper_h4096_E8_top2_8192tok
//       # checks, warms up and runs one bf16 step between cudaProfilerStart and Stop, for
//       # `ncu --profile-from-start off` (scripts/gpu/gpu_bench.sh's per-kernel table)
// --help works anywhere; without a GPU anything else exits 77 (skipped).
#include <benchmark/benchmark.h>
#include <cuda_profiler_api.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "moe_block.hpp"
#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/kernels/cuda/cudnn_attention.hpp"
#include "ted/kernels/cuda/kernels.hpp"

namespace {

namespace kc = ted::kernels::cuda;

std::unique_ptr<ted::Device> g_device;
int g_failed_checks = 0;  // blocks whose self-check failed: the exit code says so

struct Size {
  const char* name;
  ted::bench::BlockShape shape;
};

// The size (h=4096, 8 experts, top-2, 8192 tokens) with the attention model.attention =
// auto picks (cuDNN's where it takes the shape) and with the materialised one (cuBLAS), and a
// tiny one for CTest (both variants).
const Size kSizes[] = {{"paper_h4096_E8_top2_8192tok", {4096, 32, 2048, 4, 8, 2}},
                       {"paper_h4096_E8_top2_8192tok_materialized",
                        {4096, 32, 2048, 4, 8, 2, ted::model::AttentionKind::materialized}},
                       {"tiny_h64_E4_top2_256tok", {64, 4, 128, 2, 4, 2}},
                       {"tiny_h64_E4_top2_256tok_materialized",
                        {64, 4, 128, 2, 4, 2, ted::model::AttentionKind::materialized}}};

double seconds_of(const std::function<void()>& work) {
  g_device->synchronize();
  auto start = std::chrono::steady_clock::now();
  work();
  g_device->synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The experts' GEMM shape as one plain GEMM: [tokens, h] x [h, 4h], on random data.
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
    ted::model::SliceMap whole{};
    auto ops = ted::make_ops<T>(*g_device);
    ops->init_normal(a.data(), a.size(), 11, 1, 1.0, whole);
    ops->init_normal(b.data(), b.size(), 11, 2, 1.0, whole);
  }
  void run() {
    kc::gemm<T>(ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  }
  double flops() const { return 2.0 * m * n * k; }
  // The best of 10 after one warm-up: the practical peak at this shape.
  double best_rate() {
    run();
    double best = INFINITY;
    for (int i = 0; i < 10; ++i) best = std::min(best, seconds_of([&] { run(); }));
    return flops() / best;
  }
};

template <typename T>
void BM_gemm(benchmark::State& state, Size size) {
  GemmRef<T> gemm(size.shape);
  gemm.run();
  for (auto _ : state) state.SetIterationTime(seconds_of([&] { gemm.run(); }));
  state.counters["TFLOPs"] =
      benchmark::Counter(gemm.flops() * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
}

// A one-block model of T checked against the fp32 model on the same weights and data: the
// model, or null with the reason in `why`.
template <typename T>
std::unique_ptr<ted::model::GptModel<T>> checked_model(const Size& size,
                                                       const ted::bench::BlockBatch& data,
                                                       std::string& why, bool& ok) {
  const auto config = ted::bench::one_moe_block(size.shape);
  double want = 0;
  {  // the fp32 model on the same weights (same seed and init) and data
    ted::model::GptModel<float> reference(config, *g_device);
    want = reference.forward(data.batch).lm;
  }
  auto model = std::make_unique<ted::model::GptModel<T>>(config, *g_device);
  const double got = model->forward(data.batch).lm;
  model->backward(1.0f);
  const double error = std::fabs(got - want) / want;
  why = "loss " + std::to_string(got) + " vs fp32 " + std::to_string(want) + " (relative " +
        std::to_string(error) + ", tolerance 2e-2)";
  ok = std::isfinite(got) && error <= 2e-2;
  return model;
}

template <typename T>
void BM_moe_block(benchmark::State& state, Size size) {
  ted::bench::BlockBatch data(size.shape);
  std::string why;
  bool ok = false;
  auto model = checked_model<T>(size, data, why, ok);
  if (!ok) {
    ++g_failed_checks;
    state.SkipWithError(("self-check failed: " + why).c_str());
    return;
  }
  // The practical peak, measured in this run: the best of 10 GEMMs of the experts' shape.
  const double gemm_rate = GemmRef<T>(size.shape).best_rate();
  model->forward(data.batch);  // a warm-up step: plans and workspaces made before timing
  model->backward(1.0f);
  double flops = 0;
  for (auto _ : state) {
    state.SetIterationTime(seconds_of([&] {
      model->forward(data.batch);
      flops = 3.0 * model->last_forward_flops();  // backward = 2x forward
      model->backward(1.0f);
    }));
  }
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["gemm_TFLOPs"] = gemm_rate * 1e-12;
  state.counters["passed"] = 1;
  state.SetLabel("attention " + model->attention() + "; " + model->ops().kernel_notes() + "; " +
                 why);
}

// --profile-step=<size>: one checked, warmed-up bf16 step between cudaProfilerStart and Stop.
int profile_step(const std::string& name) {
  for (const Size& size : kSizes) {
    if (name != size.name) continue;
    ted::bench::BlockBatch data(size.shape);
    std::string why;
    bool ok = false;
    auto model = checked_model<ted::BFloat16>(size, data, why, ok);
    std::printf("# %s: attention %s; %s; %s\n", size.name, model->attention().c_str(),
                model->ops().kernel_notes().c_str(), why.c_str());
    if (!ok) return 1;
    model->forward(data.batch);
    model->backward(1.0f);
    g_device->synchronize();
    cudaProfilerStart();
    const double seconds = seconds_of([&] {
      model->forward(data.batch);
      model->backward(1.0f);
    });
    cudaProfilerStop();
    std::printf("# profiled step: %.3f ms\n", seconds * 1e3);
    return 0;
  }
  std::fprintf(stderr, "error: --profile-step: no size named '%s'\n", name.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Before looking for a GPU: --help answers on any machine.
  ted::bench::program_description() =
      "bench_moe_block_cuda: measures one MoE transformer block, forward + backward, on one\n"
      "GPU (the suite's model on the CUDA backend, bf16 and fp16 storage, fp32-accumulating\n"
      "tensor-core GEMMs, cuDNN's attention where found): time per step and TFLOP/s, next to a\n"
      "cuBLAS GEMM of the experts' shape measured in the same run. Each block first checks its\n"
      "16-bit loss against the fp32 model on the same weights (passed = 1); its label names the\n"
      "attention that ran. Sizes: the paper's block (h4096, 8 experts, top-2, 8192 tokens) and\n"
      "tiny (what CTest runs). Without a GPU it exits 77 (skipped).\n"
      "  build/apps/bench_moe_block_cuda --benchmark_filter=tiny\n"
      "  build/apps/bench_moe_block_cuda --profile-step=<size>   one bf16 step for ncu";
  if (ted::bench::asks_for_help(argc, argv)) {
    ted::bench::print_help();
    return 0;
  }
  if (int rc = ted::gpu_exit_code("bench_moe_block_cuda", "the CUDA benchmark needs one"))
    return rc;
  g_device = ted::make_gpu_device(0);
  std::printf("# %s; %s; revision %s\n", g_device->name().c_str(),
              kc::CudnnAttention::describe().c_str(), std::string(ted::git_revision()).c_str());
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--profile-step=", 15) == 0) {
      const int rc = profile_step(argv[i] + 15);
      g_device.reset();
      return rc;
    }
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
  benchmark::AddCustomContext("attention_library", kc::CudnnAttention::describe());
  benchmark::AddCustomContext("git_revision", std::string(ted::git_revision()));
  ted::bench::initialize(&argc, argv, ted::bench::program_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_device.reset();
  if (g_failed_checks > 0) {
    std::fprintf(stderr, "error: %d block(s) failed their self-check against the fp32 model\n",
                 g_failed_checks);
    return 1;
  }
  return 0;
}
