// The emulated cuBLAS (include/cublas_v2.h). A GEMM is checked when it is called, as cuBLAS
// checks it (sizes, leading dimensions, types), then queued on the handle's stream; there, each
// matrix is checked against the allocation it lies in (a GEMM that reads or writes past one is
// an illegal address, as on the GPU), 16-bit operands are widened exactly to fp32, and the
// host's CBLAS computes C = alpha op(A) op(B) + beta C in fp32, column-major, with the same
// operations and leading dimensions; a 16-bit C is rounded once at the end. The host's BLAS is
// the one the CPU kernels load, with the kernels chosen for this CPU
// (ted/core/blas_library.hpp).
#include <cblas.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "matrix.hpp"
#include "ted/core/blas_library.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;       // what cublasCreate took
  void* user_workspace = nullptr;  // what cublasSetWorkspace gave
};

namespace ted_emu {

std::vector<float> product(bool ta, bool tb, int m, int n, int k, float alpha, const Operand& a,
                           const Operand& b) {
  std::vector<float> c(static_cast<std::size_t>(m) * n, 0.0f);
  if (k == 0 || m == 0 || n == 0) return c;
  const std::vector<float> pa = a.packed(), pb = b.packed();
  ted::blas_library().sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, pa.data(), a.rows,
                            pb.data(), b.rows, 0.0f, c.data(), m);
  return c;
}

namespace {

struct Gemm {
  bool ta, tb;
  int m, n, k;
  float alpha, beta;
  Operand a, b, c;
  long long stride_a, stride_b, stride_c;
  int batch;
};

void run_gemm(const Gemm& g, int device) {
  const char* names[] = {"A", "B", "C"};
  const Operand* ops[] = {&g.a, &g.b, &g.c};
  const long long strides[] = {g.stride_a, g.stride_b, g.stride_c};
  for (int i = 0; i < 3; ++i) {
    std::size_t bad = 0;
    if (!in_bounds(*ops[i], strides[i], g.batch, &bad)) {
      fail_device(device, cudaErrorIllegalAddress,
                  std::string("cuBLAS GEMM: ") + names[i] + " of batch " + std::to_string(bad) +
                      " (" + std::to_string(ops[i]->rows) + " x " + std::to_string(ops[i]->cols) +
                      ", ld " + std::to_string(ops[i]->ld) +
                      ") is not inside one device allocation");
      return;
    }
  }
  const CBLAS_TRANSPOSE ta = g.ta ? CblasTrans : CblasNoTrans,
                        tb = g.tb ? CblasTrans : CblasNoTrans;
  for (int i = 0; i < g.batch; ++i) {
    const Operand a = g.a.at(i, g.stride_a), b = g.b.at(i, g.stride_b), c = g.c.at(i, g.stride_c);
    if (g.k == 0) {  // C = beta C
      for (int col = 0; col < g.n; ++col)
        for (int r = 0; r < g.m; ++r) {
          const std::size_t e = static_cast<std::size_t>(col) * c.ld + r;
          narrow(const_cast<void*>(c.data), c.type, e,
                 g.beta == 0.0f ? 0.0f : g.beta * widen(c.data, c.type, e));
        }
      continue;
    }
    if (a.type == CUDA_R_32F && c.type == CUDA_R_32F) {
      ted::blas_library().sgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, g.alpha,
                                static_cast<const float*>(a.data), a.ld,
                                static_cast<const float*>(b.data), b.ld, g.beta,
                                static_cast<float*>(const_cast<void*>(c.data)), c.ld);
      continue;
    }
    std::vector<float> pc = product(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a, b);
    if (g.beta != 0.0f) {
      const std::vector<float> old = c.packed();
      for (std::size_t e = 0; e < pc.size(); ++e) pc[e] += g.beta * old[e];
    }
    for (int col = 0; col < g.n; ++col)
      for (int r = 0; r < g.m; ++r)
        narrow(const_cast<void*>(c.data), c.type, static_cast<std::size_t>(col) * c.ld + r,
               pc[static_cast<std::size_t>(col) * g.m + r]);
  }
}

cublasStatus_t queue_gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                          int lda, long long sa, const void* B, cudaDataType Btype, int ldb,
                          long long sb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                          long long sc, int batch, cublasComputeType_t compute) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  if (m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  const bool sixteen = Atype == CUDA_R_16F || Atype == CUDA_R_16BF;
  if (Atype != Btype || !(Atype == CUDA_R_32F || sixteen) ||
      !(Ctype == Atype || (sixteen && Ctype == CUDA_R_32F)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC)
    return CUBLAS_STATUS_NOT_SUPPORTED;  // the suite asks for fp32 accumulation, nothing else
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  Stream* stream = stream_of(handle->stream);
  if (!stream) return CUBLAS_STATUS_EXECUTION_FAILED;
  Gemm g{ta,
         tb,
         m,
         n,
         k,
         *static_cast<const float*>(alpha),
         *static_cast<const float*>(beta),
         Operand{A, Atype, ta ? k : m, ta ? m : k, lda},
         Operand{B, Btype, tb ? n : k, tb ? k : n, ldb},
         Operand{C, Ctype, m, n, ldc},
         sa,
         sb,
         sc,
         batch};
  const int device = stream->device();
  stream->enqueue([g, device] {
    if (device_error(device) == cudaSuccess) run_gemm(g, device);
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace
}  // namespace ted_emu

using namespace ted_emu;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  auto* context = new cublasContext;
  // cuBLAS takes a workspace from the device when a handle is made (cudaMalloc, not the pool):
  // it fails where the memory is held elsewhere.
  if (cudaMalloc(&context->workspace, std::size_t{4} << 20) != cudaSuccess) {
    cudaGetLastError();
    delete context;
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  *handle = context;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  cudaFree(handle->workspace);
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, std::size_t bytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  // cuBLAS keeps the pointer and uses it on the handle's stream: it must be device memory.
  if (bytes && (!workspace || !device_range(workspace, bytes))) return CUBLAS_STATUS_INVALID_VALUE;
  handle->user_workspace = workspace;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the GPU program failed to execute";
    default:
      return "an internal operation failed";
  }
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  return queue_gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0,
                    beta, C, Ctype, ldc, 0, 1, computeType);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void* beta, void* C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return queue_gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
                    strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType);
}
