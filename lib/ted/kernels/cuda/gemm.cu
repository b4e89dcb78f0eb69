// The context (stream + cuBLAS handle) and the GEMMs. Row-major C = op(A) op(B) is computed as
// the column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B first and no copy is made.
#include <type_traits>

#include "ted/device/cuda_device.hpp"
#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {

Context::Context(Device& device) : device_(device), impl_(std::make_unique<Impl>()) {
  TED_CHECK(device.kind() == DeviceKind::cuda,
            "a CUDA kernel context needs a CUDA device, got " + device.name());
  impl_->stream = ted::cuda::stream_of(device);
  // cuBLAS takes its workspace with cudaMalloc, which cannot use what the device's pool keeps.
  ted::cuda::release_cached_memory(device);
  TED_CHECK_CUBLAS(cublasCreate(&impl_->blas));
  TED_CHECK_CUBLAS(cublasSetStream(impl_->blas, impl_->stream));
  // No TF32: the fp32 path is held to the CPU reference at ~1e-5.
  TED_CHECK_CUBLAS(cublasSetMathMode(impl_->blas, CUBLAS_DEFAULT_MATH));
}

Context::~Context() {
  if (impl_ && impl_->blas) cublasDestroy(impl_->blas);
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

}  // namespace

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
                                        int, std::int64_t, int);
TED_INSTANTIATE_GEMM(float)
TED_INSTANTIATE_GEMM(Half)
TED_INSTANTIATE_GEMM(BFloat16)

}  // namespace ted::kernels::cuda
