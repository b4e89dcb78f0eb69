// The cuBLAS GEMMs under the CUDA backend's kernel table against CBLAS: every transpose, a
// strided batch, and the fp32-output form, in fp32, fp16 and bf16 storage; and the GEMMs with
// an epilogue (bias, residual, GeLU keeping its input, the GeLU gradient) against CBLAS and the
// shared element-wise math, both through cuBLASLt's fused epilogues and through the fallback
// (the kernel table's own ops are tested per backend in tests/backend). Exits 77 (skipped)
// without a GPU.
#define CATCH_CONFIG_RUNNER
#include "catch.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/cuda/kernels.hpp"
#include "ted/kernels/elementwise.hpp"

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

namespace {

// gemm_fused on a batch of `batch` [m, n] products with leading dimension ldd >= n, against the
// host: CBLAS's fp32 product of the rounded operands, then bias, residual and the GeLU math of
// kernels/elementwise.hpp. Returns which path ran (cuBLASLt or the fallback).
template <typename T>
kc::GemmPaths check_fused(kc::Context& ctx, kc::Epilogue kind, bool bias, bool residual, bool ta,
                          int m, int n, int k, int ldd, int batch) {
  const std::size_t a_size = static_cast<std::size_t>(m) * k,
                    b_size = static_cast<std::size_t>(k) * n;
  const std::size_t d_size = static_cast<std::size_t>(m) * ldd;
  auto a = rounded<T>(random_vector(batch * a_size, 11));
  auto b = rounded<T>(random_vector(batch * b_size, 12));
  auto bias_h = rounded<T>(random_vector(static_cast<std::size_t>(batch) * n, 13));
  auto res = rounded<T>(random_vector(batch * d_size, 14));
  auto aux_in = rounded<T>(random_vector(batch * d_size, 15));
  for (float& v : aux_in) v *= 6.0f;  // GeLU inputs across its bend
  aux_in = rounded<T>(aux_in);
  const int lda = ta ? m : k;
  std::vector<float> want_d(batch * d_size, 0.0f), want_aux = aux_in;
  for (int i = 0; i < batch; ++i) {
    std::vector<float> sum(static_cast<std::size_t>(m) * n, 0.0f);
    ted::kernels::cpu::gemm(ta, false, m, n, k, 1.0f, a.data() + i * a_size, lda,
                            b.data() + i * b_size, n, 0.0f, sum.data(), n);
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < n; ++c) {
        const std::size_t at = i * d_size + static_cast<std::size_t>(r) * ldd + c;
        float v = sum[static_cast<std::size_t>(r) * n + c];
        if (bias) v += bias_h[static_cast<std::size_t>(i) * n + c];
        if (residual) v += res[at];
        if (kind == kc::Epilogue::gelu_aux_bias) {
          want_aux[at] = v;
          v = ted::kernels::gelu(v);
        } else if (kind == kc::Epilogue::dgelu) {
          v *= ted::kernels::gelu_grad(aux_in[at]);
        }
        want_d[at] = v;
      }
  }
  auto da = upload<T>(a), db = upload<T>(b), dbias = upload<T>(bias_h), dres = upload<T>(res);
  auto daux = upload<T>(aux_in);
  auto dd = upload<T>(std::vector<float>(batch * d_size, 0.0f));
  kc::GemmEpilogue<T> e;
  e.kind = kind;
  e.bias = bias ? dbias.data() : nullptr;
  e.bias_stride = n;
  e.residual = residual ? dres.data() : nullptr;
  if (kind == kc::Epilogue::gelu_aux_bias || kind == kc::Epilogue::dgelu) {
    e.aux = daux.data();
    e.ld_aux = ldd;
    e.aux_stride = static_cast<std::int64_t>(d_size);
  }
  const kc::GemmPaths before = kc::gemm_paths(ctx);
  kc::gemm_fused<T>(ctx, ta, false, m, n, k, da.data(), lda, static_cast<std::int64_t>(a_size),
                    db.data(), n, static_cast<std::int64_t>(b_size), dd.data(), ldd,
                    static_cast<std::int64_t>(d_size), batch, e);
  const kc::GemmPaths after = kc::gemm_paths(ctx);
  auto got = download(dd.data(), dd.size());
  // Padding columns of D (ld > n) are never written.
  for (int i = 0; i < batch; ++i)
    for (int r = 0; r < m; ++r)
      for (int c = n; c < ldd; ++c) {
        const std::size_t at = i * d_size + static_cast<std::size_t>(r) * ldd + c;
        CHECK(got[at] == 0.0f);
        got[at] = want_d[at];
      }
  CHECK(error(got, want_d) <= tolerance<T>());
  if (kind == kc::Epilogue::gelu_aux_bias)
    CHECK(error(download(daux.data(), daux.size()), rounded<T>(want_aux)) <= tolerance<T>());
  return {after.cublaslt - before.cublaslt, after.fallback - before.fallback};
}

bool cublaslt_off() {
  const char* value = std::getenv("TED_CUBLASLT");
  return value && std::string(value) == "0";
}

}  // namespace

TEMPLATE_TEST_CASE("GEMMs with an epilogue match CBLAS and the element-wise math",
                   "[cuda][gemm][epilogue]", float, ted::Half, ted::BFloat16) {
  using T = TestType;
  kc::Context ctx(*g_device);
  const bool sixteen = !std::is_same_v<T, float>;
  struct Case {
    const char* name;
    kc::Epilogue kind;
    bool bias, residual;
  };
  const Case cases[] = {{"bias", kc::Epilogue::bias, true, false},
                        {"bias + residual", kc::Epilogue::bias, true, true},
                        {"residual", kc::Epilogue::none, false, true},
                        {"GeLU keeping its input, bias", kc::Epilogue::gelu_aux_bias, true, false},
                        {"GeLU gradient", kc::Epilogue::dgelu, false, false}};
  for (const Case& c : cases)
    for (bool ta : {false, true}) {
      INFO(c.name << ", transposed A " << ta);
      // A shape cuBLASLt takes (aligned operands, leading dimensions multiples of 8): the
      // epilogue is fused for 16-bit storage but the GeLU gradient's; fp32 always takes the
      // fallback.
      const auto fused = check_fused<T>(ctx, c.kind, c.bias, c.residual, ta, 64, 48, 32, 48, 3);
      CHECK(fused.cublaslt + fused.fallback == 1);
      const bool lt = sixteen && !cublaslt_off() && c.kind != kc::Epilogue::dgelu;
      CHECK(fused.cublaslt == (lt ? 1 : 0));
      // Ragged: odd sizes and a padded leading dimension, one of them not a multiple of 8.
      check_fused<T>(ctx, c.kind, c.bias, c.residual, ta, 37, 29, 45, 36, 2);
      check_fused<T>(ctx, c.kind, c.bias, c.residual, ta, 5, 19, 7, 19, 1);
    }
}

int main(int argc, char** argv) {
  if (int rc = ted::gpu_exit_code("test_cuda_kernels", "the CUDA tests need one")) return rc;
  g_device = ted::make_gpu_device(0);
  std::printf("GPU: %s\n", g_device->name().c_str());
  const int failed = Catch::Session().run(argc, argv);
  g_device.reset();
  return failed;
}
