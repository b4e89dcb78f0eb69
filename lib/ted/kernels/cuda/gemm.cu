// The context (stream, cuBLAS and cuBLASLt handles, one workspace) and the GEMMs. Row-major
// C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B first
// and no copy is made.
//
// Plain GEMMs go to cublasGemmEx (cuBLAS picks tensor-core kernels for 16-bit operands). A GEMM
// with an epilogue (gemm_fused) is, for 16-bit storage, one cuBLASLt matmul whose epilogue adds
// the bias and the residual and applies GeLU before the one rounding into D; its plan
// (descriptors, layouts, the heuristic's algorithm) is made once per shape and kept. Where
// cuBLASLt has no algorithm for a shape, for the GeLU gradient, and always for fp32, it is a GEMM
// into fp32 and one element-wise pass (epilogue_kernel), the order of the CPU backend's own
// kernels.
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "ted/device/cuda_device.hpp"
#include "ted/kernels/cuda/common.cuh"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cuda {

namespace {

// cuBLAS's and cuBLASLt's scratch: split-K and stream-K kernels on Hopper want tens of MiB.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;

bool lt_enabled() {
  static const bool on = [] {
    const char* value = std::getenv("TED_CUBLASLT");
    return !(value && std::string(value) == "0");
  }();
  return on;
}

}  // namespace

Context::Context(Device& device) : device_(device), impl_(std::make_unique<Impl>()) {
  TED_CHECK(device.kind() == DeviceKind::cuda,
            "a CUDA kernel context needs a CUDA device, got " + device.name());
  impl_->stream = ted::cuda::stream_of(device);
  // cuBLAS takes a little memory of its own with cudaMalloc, which cannot use what the device's
  // pool keeps; its workspace comes from the pool, below.
  ted::cuda::release_cached_memory(device);
  TED_CHECK_CUBLAS(cublasCreate(&impl_->blas));
  TED_CHECK_CUBLAS(cublasSetStream(impl_->blas, impl_->stream));
  // No TF32: the fp32 path is held to the CPU reference at ~1e-5.
  TED_CHECK_CUBLAS(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH));
  TED_CHECK_CUBLAS(cublasLtCreate(&impl_->lt));
  impl_->workspace = DeviceBuffer(device, kWorkspaceBytes);
  // cuBLAS and cuBLASLt share the workspace: both queue on the one stream, never at once.
  TED_CHECK_CUBLAS(cublasSetWorkspace(impl_->blas, impl_->workspace.data(), kWorkspaceBytes));
}

Context::~Context() {
  if (!impl_) return;
  for (auto& [key, plan] : impl_->plans) plan.destroy();
  if (impl_->lt) cublasLtDestroy(impl_->lt);
  if (impl_->blas) cublasDestroy(impl_->blas);
}

void LtPlan::destroy() {
  if (desc) cublasLtMatmulDescDestroy(desc);
  for (auto* layout : {a, b, c})
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  desc = nullptr;
  a = b = c = nullptr;
}

GemmPaths gemm_paths(Context& ctx) {
  return ctx.impl().paths;
}

namespace {

template <typename T>
cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, Half>) return CUDA_R_16F;
  if constexpr (std::is_same_v<T, BFloat16>) return CUDA_R_16BF;
}

cublasOperation_t op(bool transpose) {
  return transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

template <typename In, typename Out>
void gemm_any(Context& ctx, bool ta, bool tb, int m, int n, int k, float alpha, const In* a,
              int lda, std::int64_t sa, const In* b, int ldb, std::int64_t sb, float beta, Out* c,
              int ldc, std::int64_t sc, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0) {  // cuBLAS leaves C alone for k = 0 only when beta = 1; say it plainly
    TED_CHECK(beta == 1.0f, "gemm with k = 0 and beta != 1");
    return;
  }
  cublasHandle_t handle = ctx.impl().blas;
  if (batch == 1) {
    TED_CHECK_CUBLAS(cublasGemmEx(handle, op(tb), op(ta), n, m, k, &alpha, b, cuda_type<In>(), ldb,
                                  a, cuda_type<In>(), lda, &beta, c, cuda_type<Out>(), ldc,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    TED_CHECK_CUBLAS(cublasGemmStridedBatchedEx(handle, op(tb), op(ta), n, m, k, &alpha, b,
                                                cuda_type<In>(), ldb, sb, a, cuda_type<In>(), lda,
                                                sa, &beta, c, cuda_type<Out>(), ldc, sc, batch,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

// ---- the fallback: fp32 product, then one pass -------------------------------------------------

// v = acc (+ bias) (+ residual), in the CPU backend's order; then per kind: D = v; aux = v and
// D = gelu(v); D = v * gelu'(aux). acc is packed [batch, m, n]; it may be D itself (fp32, packed).
template <typename T>
__global__ void epilogue_kernel(const float* acc, T* d, int ldd, std::int64_t sd, int m, int n,
                                int batch, Epilogue kind, const T* bias, std::int64_t bias_stride,
                                T* aux, int ld_aux, std::int64_t aux_stride, const T* residual) {
  const std::size_t count = static_cast<std::size_t>(batch) * m * n;
  TED_GRID_STRIDE(i, count) {
    const std::size_t per = static_cast<std::size_t>(m) * n;
    const auto e = static_cast<std::int64_t>(i / per);
    const auto row = static_cast<std::int64_t>((i % per) / n),
               col = static_cast<std::int64_t>(i % n);
    const std::int64_t at = e * sd + row * ldd + col;
    float v = acc[i];
    if (bias) v += load(bias[e * bias_stride + col]);
    if (residual) v += load(residual[at]);
    if (kind == Epilogue::gelu_aux_bias) {
      aux[e * aux_stride + row * ld_aux + col] = store<T>(v);
      v = gelu(v);
    } else if (kind == Epilogue::dgelu) {
      v *= gelu_grad(load(aux[e * aux_stride + row * ld_aux + col]));
    }
    d[at] = store<T>(v);
  }
}

// The same for packed D, aux and residual (leading dimension n, batches m x n apart), a Pack
// at a time.
template <typename T>
__global__ void epilogue_packs_kernel(const float* acc, T* d, int m, int n, std::size_t packs,
                                      Epilogue kind, const T* bias, std::int64_t bias_stride,
                                      T* aux, const T* residual) {
  constexpr int P = Pack<T>::kSize;
  const std::size_t per = static_cast<std::size_t>(m) * n;
  TED_GRID_STRIDE(i, packs) {
    const std::size_t at = i * P;
    const auto e = static_cast<std::int64_t>(at / per);
    const auto col = static_cast<std::int64_t>(at % n);
    float v[P];
    for (int q = 0; q < P; q += 4) {  // fp32 in 16-byte loads
      const Chunk<float, 4> part = load_pack<float, 4>(acc + at + q);
      for (int j = 0; j < 4; ++j) v[q + j] = part.v[j];
    }
    if (bias) {
      const Pack<T> b = load_pack(bias + e * bias_stride + col);
      for (int q = 0; q < P; ++q) v[q] += load(b.v[q]);
    }
    if (residual) {
      const Pack<T> r = load_pack(residual + at);
      for (int q = 0; q < P; ++q) v[q] += load(r.v[q]);
    }
    Pack<T> out;
    if (kind == Epilogue::gelu_aux_bias) {
      Pack<T> kept;
      for (int q = 0; q < P; ++q) {
        kept.v[q] = store<T>(v[q]);
        out.v[q] = store<T>(gelu(v[q]));
      }
      store_pack(aux + at, kept);
    } else if (kind == Epilogue::dgelu) {
      const Pack<T> x = load_pack(aux + at);
      for (int q = 0; q < P; ++q) out.v[q] = store<T>(v[q] * gelu_grad(load(x.v[q])));
    } else {
      for (int q = 0; q < P; ++q) out.v[q] = store<T>(v[q]);
    }
    store_pack(d + at, out);
  }
}

template <typename T>
void gemm_then_pass(Context& ctx, bool ta, bool tb, int m, int n, int k, const T* a, int lda,
                    std::int64_t sa, const T* b, int ldb, std::int64_t sb, T* d, int ldd,
                    std::int64_t sd, int batch, const GemmEpilogue<T>& e) {
  const std::size_t count = static_cast<std::size_t>(batch) * m * n;
  const bool packed = ldd == n && (batch == 1 || sd == static_cast<std::int64_t>(m) * n);
  Tensor<float> scratch;
  float* acc = nullptr;
  // fp32 storage, packed and not read by the pass as a residual: the product goes into D itself.
  if constexpr (std::is_same_v<T, float>) {
    if (packed && e.residual != d) acc = d;
  }
  if (!acc) {
    scratch = Tensor<float>(ctx.device(), count);
    acc = scratch.data();
  }
  gemm_any<T, float>(ctx, ta, tb, m, n, k, 1.0f, a, lda, sa, b, ldb, sb, 0.0f, acc, n,
                     static_cast<std::int64_t>(m) * n, batch);
  if (e.kind == Epilogue::none && !e.bias && !e.residual && acc == static_cast<void*>(d)) return;
  const std::int64_t mn = static_cast<std::int64_t>(m) * n;
  const bool aux_packed = !e.aux || (e.ld_aux == n && (batch == 1 || e.aux_stride == mn));
  if (packed && aux_packed && (!e.bias || batch == 1 || e.bias_stride % Pack<T>::kSize == 0) &&
      packable<T>(n, {acc, d, e.bias, e.aux, e.residual})) {
    const std::size_t packs = count / Pack<T>::kSize;
    launch<epilogue_packs_kernel<T>>(blocks_for(packs), kThreads, 0, stream(ctx), acc, d, m, n,
                                     packs, e.kind, e.bias, e.bias_stride, e.aux, e.residual);
    return;
  }
  launch<epilogue_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), acc, d, ldd, sd, m, n,
                             batch, e.kind, e.bias, e.bias_stride, e.aux, e.ld_aux, e.aux_stride,
                             e.residual);
}

// ---- cuBLASLt ------------------------------------------------------------------------------

// The largest power of two, at most 256, that divides every batch entry's address.
unsigned alignment(const void* p, std::int64_t stride_elements, std::size_t width, int batch) {
  auto bits = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  if (batch > 1) bits |= static_cast<std::uint64_t>(stride_elements) * width;
  unsigned a = 256;
  while (a > 1 && (bits & (a - 1))) a >>= 1;
  return a;
}

cublasLtEpilogue_t lt_epilogue(Epilogue kind, bool bias) {
  switch (kind) {
    case Epilogue::gelu_aux_bias:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    default:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
}

template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, V value) {
  TED_CHECK_CUBLAS(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value));
}

// The matmul's pointers that only the epilogue reads or writes (set on the kept descriptor
// before each call).
template <typename T>
void set_epilogue_pointers(cublasLtMatmulDesc_t desc, const GemmEpilogue<T>& e) {
  if (e.bias) set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(e.bias));
  if (e.aux) set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(e.aux));
}

cublasLtMatrixLayout_t lt_layout(cudaDataType_t type, int rows, int cols, int ld, int batch,
                                 std::int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  TED_CHECK_CUBLAS(cublasLtMatrixLayoutCreate(&layout, type, static_cast<std::uint64_t>(rows),
                                              static_cast<std::uint64_t>(cols), ld));
  if (batch > 1) {
    TED_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                      &batch, sizeof batch));
    TED_CHECK_CUBLAS(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return layout;
}

// Makes the plan of a shape: the descriptor with its epilogue, the column-major layouts of the
// swapped product (cuBLASLt's A is our B), and the heuristic's first algorithm for the
// alignments the key records. usable = false when cuBLASLt has none.
template <typename T>
void make_plan(Context& ctx, const LtKey& key, LtPlan& plan, const GemmEpilogue<T>& e) {
  const cudaDataType_t type = cuda_type<T>();
  TED_CHECK_CUBLAS(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(op(key.tb)));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(op(key.ta)));
  set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
           static_cast<std::uint32_t>(lt_epilogue(e.kind, e.bias != nullptr)));
  if (e.bias && key.batch > 1)
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, e.bias_stride);
  if (e.aux) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(e.ld_aux));
    if (key.batch > 1)
      set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, e.aux_stride);
  }
  set_epilogue_pointers(plan.desc, e);
  // Column-major: D^T [n, m] = op(B)^T [n, k] op(A)^T [k, m].
  plan.a =
      lt_layout(type, key.tb ? key.k : key.n, key.tb ? key.n : key.k, key.ldb, key.batch, key.sb);
  plan.b =
      lt_layout(type, key.ta ? key.m : key.k, key.ta ? key.k : key.m, key.lda, key.batch, key.sa);
  plan.c = lt_layout(type, key.n, key.m, key.ldd, key.batch, key.sd);

  cublasLtMatmulPreference_t preference = nullptr;
  TED_CHECK_CUBLAS(cublasLtMatmulPreferenceCreate(&preference));
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, auto value) {
    TED_CHECK_CUBLAS(
        cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<std::uint64_t>(kWorkspaceBytes));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, static_cast<std::uint32_t>(key.align_b));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, static_cast<std::uint32_t>(key.align_a));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, static_cast<std::uint32_t>(key.align_c));
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, static_cast<std::uint32_t>(key.align_d));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(
      ctx.impl().lt, plan.desc, plan.a, plan.b, plan.c, plan.c, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  plan.usable = rc == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (plan.usable) plan.algo = result.algo;
}

// One cuBLASLt matmul with the epilogue; false (nothing queued) when cuBLASLt has no algorithm.
template <typename T>
bool lt_matmul(Context& ctx, bool ta, bool tb, int m, int n, int k, const T* a, int lda,
               std::int64_t sa, const T* b, int ldb, std::int64_t sb, T* d, int ldd,
               std::int64_t sd, int batch, const GemmEpilogue<T>& e) {
  const std::size_t w = sizeof(T);
  const void* c = e.residual ? static_cast<const void*>(e.residual) : d;
  LtKey key{};
  key.type = static_cast<int>(cuda_type<T>());
  key.ta = ta;
  key.tb = tb;
  key.m = m;
  key.n = n;
  key.k = k;
  key.lda = lda;
  key.ldb = ldb;
  key.ldd = ldd;
  key.sa = batch > 1 ? sa : 0;
  key.sb = batch > 1 ? sb : 0;
  key.sd = batch > 1 ? sd : 0;
  key.batch = batch;
  key.kind = static_cast<int>(e.kind);
  key.bias = e.bias != nullptr;
  key.bias_stride = batch > 1 ? e.bias_stride : 0;
  key.ld_aux = e.aux ? e.ld_aux : 0;
  key.aux_stride = e.aux && batch > 1 ? e.aux_stride : 0;
  key.align_a = alignment(a, sa, w, batch);
  key.align_b = alignment(b, sb, w, batch);
  key.align_c = alignment(c, sd, w, batch);
  key.align_d = alignment(d, sd, w, batch);
  key.align_bias = e.bias ? alignment(e.bias, e.bias_stride, w, batch) : 0;
  key.align_aux = e.aux ? alignment(e.aux, e.aux_stride, w, batch) : 0;
  auto& impl = ctx.impl();
  auto [it, made] = impl.plans.try_emplace(key);
  LtPlan& plan = it->second;
  if (made) make_plan(ctx, key, plan, e);
  if (!plan.usable) return false;
  set_epilogue_pointers(plan.desc, e);
  const float alpha = 1.0f, beta = e.residual ? 1.0f : 0.0f;
  TED_CHECK_CUBLAS(cublasLtMatmul(impl.lt, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, c,
                                  plan.c, d, plan.c, &plan.algo, impl.workspace.data(),
                                  kWorkspaceBytes, impl.stream));
  return true;
}

}  // namespace

std::size_t LtKeyHash::operator()(const LtKey& key) const {
  // FNV-1a over the key's bytes (value-initialised, so padding is zero).
  const auto* bytes = reinterpret_cast<const unsigned char*>(&key);
  std::size_t hash = 1469598103934665603ull;
  for (std::size_t i = 0; i < sizeof key; ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  return hash;
}

bool LtKey::operator==(const LtKey& other) const {
  return std::memcmp(this, &other, sizeof other) == 0;
}

template <typename T>
void gemm(Context& ctx, bool ta, bool tb, int m, int n, int k, float alpha, const T* a, int lda,
          const T* b, int ldb, float beta, T* c, int ldc) {
  gemm_any<T, T>(ctx, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

template <typename T>
void gemm_f32_out(Context& ctx, bool ta, bool tb, int m, int n, int k, float alpha, const T* a,
                  int lda, const T* b, int ldb, float beta, float* c, int ldc) {
  gemm_any<T, float>(ctx, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

template <typename T>
void gemm_batched(Context& ctx, bool ta, bool tb, int m, int n, int k, float alpha, const T* a,
                  int lda, std::int64_t sa, const T* b, int ldb, std::int64_t sb, float beta, T* c,
                  int ldc, std::int64_t sc, int batch) {
  gemm_any<T, T>(ctx, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

template <typename T>
void gemm_batched_f32_out(Context& ctx, bool ta, bool tb, int m, int n, int k, float alpha,
                          const T* a, int lda, std::int64_t sa, const T* b, int ldb,
                          std::int64_t sb, float beta, float* c, int ldc, std::int64_t sc,
                          int batch) {
  gemm_any<T, float>(ctx, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

template <typename T>
void gemm_fused(Context& ctx, bool ta, bool tb, int m, int n, int k, const T* a, int lda,
                std::int64_t sa, const T* b, int ldb, std::int64_t sb, T* d, int ldd,
                std::int64_t sd, int batch, const GemmEpilogue<T>& e) {
  if (m == 0 || n == 0 || batch == 0) return;
  TED_CHECK(k > 0, "gemm_fused with k = 0");
  TED_CHECK((e.kind == Epilogue::gelu_aux_bias || e.kind == Epilogue::dgelu) == (e.aux != nullptr),
            "gemm_fused: the GeLU epilogues need aux, the others take none");
  // Not the GeLU gradient: cuBLASLt runs that epilogue as a kernel of its own after the GEMM
  // (at the paper's experts on an H200, 1.8 ms for what this pass does in well under half).
  if constexpr (!std::is_same_v<T, float>) {
    if (lt_enabled() && e.kind != Epilogue::dgelu &&
        lt_matmul<T>(ctx, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, d, ldd, sd, batch, e)) {
      ++ctx.impl().paths.cublaslt;
      return;
    }
  }
  ++ctx.impl().paths.fallback;
  gemm_then_pass<T>(ctx, ta, tb, m, n, k, a, lda, sa, b, ldb, sb, d, ldd, sd, batch, e);
}

#define TED_INSTANTIATE_GEMM(T)                                                                    \
  template void gemm<T>(Context&, bool, bool, int, int, int, float, const T*, int, const T*, int,  \
                        float, T*, int);                                                           \
  template void gemm_f32_out<T>(Context&, bool, bool, int, int, int, float, const T*, int,         \
                                const T*, int, float, float*, int);                                \
  template void gemm_batched<T>(Context&, bool, bool, int, int, int, float, const T*, int,         \
                                std::int64_t, const T*, int, std::int64_t, float, T*, int,         \
                                std::int64_t, int);                                                \
  template void gemm_batched_f32_out<T>(Context&, bool, bool, int, int, int, float, const T*, int, \
                                        std::int64_t, const T*, int, std::int64_t, float, float*,  \
                                        int, std::int64_t, int);                                   \
  template void gemm_fused<T>(Context&, bool, bool, int, int, int, const T*, int, std::int64_t,    \
                              const T*, int, std::int64_t, T*, int, std::int64_t, int,             \
                              const GemmEpilogue<T>&);
TED_INSTANTIATE_GEMM(float)
TED_INSTANTIATE_GEMM(Half)
TED_INSTANTIATE_GEMM(BFloat16)

}  // namespace ted::kernels::cuda
