// The cuBLAS GEMMs under the CUDA backend's kernel table against CBLAS: every transpose, a
// strided batch, and the fp32-output form, in fp32, fp16 and bf16 storage (the kernel table's
// own ops are tested per backend in tests/backend). Exits 77 (skipped) without a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <memory>
#include <type_traits>
#include <vector>

#include "ted/backend/registry.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/cuda/kernels.hpp"

namespace {

namespace kc = ted::kernels::cuda;
std::unique_ptr<ted::Device> g_device;

template <typename T>
std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = static_cast<float>(ted::widen(ted::narrow<T>(x)));
  return v;
}

std::vector<float> random_vector(std::size_t n, unsigned seed) {
  std::vector<float> v(n);
  unsigned s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  return v;
}

template <typename T>
ted::Tensor<T> upload(const std::vector<float>& host) {
  std::vector<T> typed(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) typed[i] = ted::narrow<T>(host[i]);
  ted::Tensor<T> t(*g_device, host.size());
  g_device->copy_from_host(t.data(), typed.data(), typed.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<float> download(const T* data, std::size_t n) {
  std::vector<T> typed(n);
  g_device->copy_to_host(typed.data(), data, n * sizeof(T));
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(ted::widen(typed[i]));
  return host;
}

double error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return worst / std::max(scale, 1e-30);
}

template <typename T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, ted::Half>) return 4e-3;
  return 2e-2;
}

}  // namespace

TEMPLATE_TEST_CASE("gemm and batched gemm match CBLAS", "[cuda][gemm]", float, ted::Half,
                   ted::BFloat16) {
  using T = TestType;
  kc::Context ctx(*g_device);
  const int m = 37, n = 29, k = 45, batch = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto a = rounded<T>(random_vector(static_cast<std::size_t>(batch) * m * k, 1));
      auto b = rounded<T>(random_vector(static_cast<std::size_t>(batch) * k * n, 2));
      auto c0 = rounded<T>(random_vector(static_cast<std::size_t>(batch) * m * n, 3));
      const int lda = ta ? m : k, ldb = tb ? k : n;
      std::vector<float> want = c0;
      for (int i = 0; i < batch; ++i)
        ted::kernels::cpu::gemm(ta, tb, m, n, k, 0.5f, a.data() + i * m * k, lda,
                                b.data() + i * k * n, ldb, 0.25f, want.data() + i * m * n, n);
      auto da = upload<T>(a), db = upload<T>(b), dc = upload<T>(c0);
      kc::gemm_batched<T>(ctx, ta, tb, m, n, k, 0.5f, da.data(), lda, m * k, db.data(), ldb, k * n,
                          0.25f, dc.data(), n, m * n, batch);
      INFO("transposes " << ta << tb);
      CHECK(error(download(dc.data(), dc.size()), want) <= tolerance<T>());
      auto f32 = upload<float>(c0);
      kc::gemm_f32_out<T>(ctx, ta, tb, m, n, k, 0.5f, da.data(), lda, db.data(), ldb, 0.25f,
                          f32.data(), n);
      std::vector<float> first(want.begin(), want.begin() + m * n);
      CHECK(error(download(f32.data(), static_cast<std::size_t>(m) * n), first) <= 1e-5);
    }
}

int main(int argc, char** argv) {
  if (ted::gpu_count() == 0) {
    std::printf("SKIPPED: no GPU visible to this process (the CUDA tests need one)\n");
    return 77;
  }
  g_device = ted::make_gpu_device(0);
  std::printf("GPU: %s\n", g_device->name().c_str());
  const int failed = Catch::Session().run(argc, argv);
  g_device.reset();
  return failed;
}
