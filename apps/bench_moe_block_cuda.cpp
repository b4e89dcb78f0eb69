// Google Benchmark of one MoE transformer block, forward + backward, on one GPU: pre-LN causal
// attention, then a top-k MoE FFN (gate, routing, dispatch, experts as batched GEMMs, combine),
// with fp32-accumulating cuBLAS GEMMs on bf16 (or fp16/fp32) storage. Next to it, in the same
// binary, a cuBLAS GEMM of the experts' shape, the practical peak; the block reports its
// TFLOP/s and its ratio to that GEMM's rate measured in the same run.
// Before timing, each block checks itself: its bf16/fp16 output and input gradient against the
// fp32 GPU block on the same weights (the fp32 ops are tested against the CPU in test_cuda);
// `passed` is 1 or the benchmark reports an error.
//
//   build/apps/bench_moe_block_cuda                               # paper size and a tiny one
//   build/apps/bench_moe_block_cuda --benchmark_filter=tiny       # what CTest runs
// Exits 77 (skipped) without a GPU.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ted/backend/registry.hpp"
#include "ted/model/cuda/gpu_gpt.hpp"

namespace {

namespace kc = ted::kernels::cuda;
using ted::model::cuda::BlockGrads;
using ted::model::cuda::BlockShape;
using ted::model::cuda::BlockWeights;
using ted::model::cuda::GpuBlock;

std::unique_ptr<ted::Device> g_device;
std::unique_ptr<kc::Context> g_ctx;

struct Size {
  const char* name;
  int hidden, heads, experts, top_k, sequences, seq;
  double capacity_factor;
};

// The size (h=4096, 8 experts, top-2, 8192 tokens) and a tiny one for CTest.
const Size kSizes[] = {{"paper_h4096_E8_top2_8192tok", 4096, 32, 8, 2, 4, 2048, 1.0},
                       {"tiny_h64_E4_top2_256tok", 64, 4, 4, 2, 2, 128, 1.0}};

BlockShape shape_of(const Size& size) {
  BlockShape shape{size.sequences, size.seq, size.hidden, size.heads, 4 * size.hidden, true, {}};
  shape.gate.experts = size.experts;
  shape.gate.top_k = size.top_k;
  shape.gate.capacity_factor = size.capacity_factor;
  return shape;
}

// One block's parameters: fp32 masters and gradients, T copies for the GEMMs.
template <typename T>
struct BlockParams {
  struct Entry {
    std::size_t offset, size;
    float value;  // 0 or 1: constant; else the init std
  };
  std::vector<Entry> entries;
  std::size_t total = 0;
  ted::Tensor<float> master, grads;
  ted::Tensor<T> copy;

  std::size_t add(std::size_t size, float value) {
    entries.push_back({total, size, value});
    total += size;
    return entries.back().offset;
  }
};

template <typename T>
struct Bench {
  BlockShape shape;
  BlockParams<T> params;
  std::size_t ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b, gate_w, w1, b1, w2, b2;
  std::unique_ptr<GpuBlock<T>> block;
  ted::Tensor<T> x, out, d_out, d_in;

  explicit Bench(const BlockShape& s) : shape(s) {
    const std::size_t h = s.hidden, f = s.ffn, E = s.gate.experts;
    auto& p = params;
    ln1_g = p.add(h, 1), ln1_b = p.add(h, 0), qkv_w = p.add(h * 3 * h, 0.02f);
    qkv_b = p.add(3 * h, 0), proj_w = p.add(h * h, 0.02f), proj_b = p.add(h, 0);
    ln2_g = p.add(h, 1), ln2_b = p.add(h, 0), gate_w = p.add(h * E, 0.02f);
    w1 = p.add(E * h * f, 0.02f), b1 = p.add(E * f, 0), w2 = p.add(E * f * h, 0.02f);
    b2 = p.add(E * h, 0);
    ted::Device& device = g_ctx->device();
    p.master = ted::Tensor<float>(device, p.total);
    for (std::size_t i = 0; i < p.entries.size(); ++i) {
      const auto& e = p.entries[i];
      if (e.value == 0 || e.value == 1)
        device.fill(p.master.data() + e.offset, e.size, ted::DataType::f32, e.value);
      else
        kc::init_normal(*g_ctx, p.master.data() + e.offset, e.size, 1234, i + 1, e.value);
    }
    p.copy = ted::Tensor<T>(device, p.total);
    kc::from_float<T>(*g_ctx, p.master.data(), p.copy.data(), p.total);
    p.grads = ted::zeros<float>(device, p.total);
    block = std::make_unique<GpuBlock<T>>(*g_ctx, s);
    const std::size_t Nh = static_cast<std::size_t>(s.sequences) * s.seq * h;
    ted::Tensor<float> staging(device, Nh);
    kc::init_normal(*g_ctx, staging.data(), Nh, 99, 1, 1.0f);
    x = ted::Tensor<T>(device, Nh), out = ted::Tensor<T>(device, Nh);
    d_out = ted::Tensor<T>(device, Nh), d_in = ted::Tensor<T>(device, Nh);
    kc::from_float<T>(*g_ctx, staging.data(), x.data(), Nh);
    kc::init_normal(*g_ctx, staging.data(), Nh, 99, 2, 1e-3f);
    kc::from_float<T>(*g_ctx, staging.data(), d_out.data(), Nh);
    g_ctx->synchronize();
  }

  BlockWeights<T> weights() const {
    const float* m = params.master.data();
    const T* c = params.copy.data();
    BlockWeights<T> w{m + ln1_g, m + ln1_b, m + qkv_b, m + proj_b,
                      m + ln2_g, m + ln2_b, c + qkv_w, c + proj_w};
    w.gate_w = c + gate_w, w.w1 = c + w1, w.w2 = c + w2, w.b1 = m + b1, w.b2 = m + b2;
    return w;
  }
  BlockGrads grads() {
    float* g = params.grads.data();
    BlockGrads out{g + ln1_g,  g + ln1_b,  g + qkv_w, g + qkv_b,
                   g + proj_w, g + proj_b, g + ln2_g, g + ln2_b};
    out.gate_w = g + gate_w, out.w1 = g + w1, out.b1 = g + b1, out.w2 = g + w2, out.b2 = g + b2;
    return out;
  }
  void run() {
    block->forward(x.data(), out.data(), weights(), ted::model::RoutingKey{1234, 0, 0, 0});
    block->backward(x.data(), d_out.data(), d_in.data(), weights(), grads(), 0.01f);
  }
  double flops() const { return 3.0 * block->forward_flops(); }
};

template <typename T>
std::vector<float> host_copy(const ted::Tensor<T>& t) {
  ted::Tensor<float> f(g_ctx->device(), t.size());
  kc::to_float<T>(*g_ctx, t.data(), f.data(), t.size());
  std::vector<float> host(t.size());
  g_ctx->device().copy_to_host(host.data(), f.data(), host.size() * sizeof(float));
  return host;
}

// ||got - want|| / ||want||: a norm, not a max, because a 16-bit gate may route the odd
// near-tie token differently from the fp32 one.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// The 16-bit block against the fp32 block with the same weights and inputs.
template <typename T>
bool verify(Bench<T>& bench, std::string& why) {
  if constexpr (std::is_same_v<T, float>) {
    return true;
  } else {
    Bench<float> reference(bench.shape);
    reference.run();
    bench.run();
    g_ctx->synchronize();
    double out_error = relative_error(host_copy(bench.out), host_copy(reference.out));
    double grad_error = relative_error(host_copy(bench.d_in), host_copy(reference.d_in));
    const double tolerance = 2e-2;
    why = "output error " + std::to_string(out_error) + ", input-gradient error " +
          std::to_string(grad_error) + " against fp32 (tolerance " + std::to_string(tolerance) +
          ")";
    return out_error <= tolerance && grad_error <= tolerance;
  }
}

double seconds_of(const std::function<void()>& work) {
  g_ctx->synchronize();
  auto start = std::chrono::steady_clock::now();
  work();
  g_ctx->synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The experts' GEMM shape as one plain GEMM: [tokens, h] x [h, 4h].
template <typename T>
struct GemmRef {
  int m, n, k;
  ted::Tensor<T> a, b, c;
  explicit GemmRef(const BlockShape& s)
      : m(s.sequences * s.seq),
        n(s.ffn),
        k(s.hidden),
        a(g_ctx->device(), static_cast<std::size_t>(m) * k),
        b(g_ctx->device(), static_cast<std::size_t>(k) * n),
        c(g_ctx->device(), static_cast<std::size_t>(m) * n) {
    g_ctx->device().fill(a.data(), a.size(), ted::dtype_of<T>::value, 0.01);
    g_ctx->device().fill(b.data(), b.size(), ted::dtype_of<T>::value, 0.01);
  }
  void run() {
    kc::gemm<T>(*g_ctx, false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  }
  double flops() const { return 2.0 * m * n * k; }
};

template <typename T>
void BM_gemm(benchmark::State& state, Size size) {
  GemmRef<T> gemm(shape_of(size));
  gemm.run();
  for (auto _ : state) state.SetIterationTime(seconds_of([&] { gemm.run(); }));
  state.counters["TFLOPs"] =
      benchmark::Counter(gemm.flops() * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
}

template <typename T>
void BM_moe_block(benchmark::State& state, Size size) {
  Bench<T> bench(shape_of(size));
  std::string why;
  if (!verify(bench, why)) {
    state.SkipWithError(("self-check failed: " + why).c_str());
    return;
  }
  // The practical peak, measured in this run: the best of 10 GEMMs of the experts' shape.
  GemmRef<T> gemm(bench.shape);
  gemm.run();
  double best = INFINITY;
  for (int i = 0; i < 10; ++i) best = std::min(best, seconds_of([&] { gemm.run(); }));
  bench.run();  // warm-up
  for (auto _ : state) state.SetIterationTime(seconds_of([&] { bench.run(); }));
  const double flops = bench.flops();
  state.counters["TFLOPs"] =
      benchmark::Counter(flops * 1e-12 * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["gemm_TFLOPs"] = gemm.flops() / best * 1e-12;
  state.counters["capacity"] = bench.block->routing().capacity;
  state.counters["passed"] = 1;
  state.SetLabel(why);
}

}  // namespace

int main(int argc, char** argv) {
  if (ted::gpu_count() == 0) {
    std::printf("SKIPPED: no GPU visible to this process (the CUDA benchmark needs one)\n");
    return 77;
  }
  g_device = ted::make_gpu_device(0);
  g_ctx = std::make_unique<kc::Context>(*g_device);
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
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  g_ctx.reset();
  g_device.reset();
  return 0;
}
