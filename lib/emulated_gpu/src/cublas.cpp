// The emulated cuBLAS (include/cublas_v2.h). A GEMM is checked when it is called, as cuBLAS
// checks it (sizes, leading dimensions, types), then queued on the handle's stream; there, each
// matrix is checked against the allocation it lies in (a GEMM that reads or writes past one is
// an illegal address, as on the GPU), 16-bit operands are widened exactly to fp32, and the
// host's CBLAS computes C = alpha op(A) op(B) + beta C in fp32, column-major, with the same
// operations and leading dimensions; a 16-bit C is rounded once at the end.
#include <cblas.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "half.hpp"
#include "internal.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  void* workspace = nullptr;
};

namespace ted_emu {
namespace {

std::size_t width_of(cudaDataType type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

float widen(const void* base, cudaDataType type, std::size_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  std::uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(base) + 2 * i, 2);
  return type == CUDA_R_16BF ? bf16_to_float(bits) : f16_to_float(bits);
}

void narrow(void* base, cudaDataType type, std::size_t i, float value) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(base)[i] = value;
    return;
  }
  const std::uint16_t bits = type == CUDA_R_16BF ? float_to_bf16(value) : float_to_f16(value);
  std::memcpy(static_cast<char*>(base) + 2 * i, &bits, 2);
}

// One column-major operand: `rows` x `cols` stored with leading dimension `ld`.
struct Operand {
  const void* data;
  cudaDataType type;
  int rows, cols, ld;
  // Elements from the first to one past the last that the operand touches.
  std::size_t extent() const {
    return rows && cols ? static_cast<std::size_t>(cols - 1) * ld + rows : 0;
  }
  std::vector<float> packed() const {  // widened, leading dimension = rows
    std::vector<float> out(static_cast<std::size_t>(rows) * cols);
    for (int c = 0; c < cols; ++c)
      for (int r = 0; r < rows; ++r)
        out[static_cast<std::size_t>(c) * rows + r] =
            widen(data, type, static_cast<std::size_t>(c) * ld + r);
    return out;
  }
};

struct Gemm {
  bool ta, tb;
  int m, n, k;
  float alpha, beta;
  Operand a, b, c;
  long long stride_a, stride_b, stride_c;
  int batch;
};

// True when every batch's operand lies inside one live allocation.
bool in_bounds(const Operand& op, long long stride, int batch, std::size_t* bad_batch) {
  const std::size_t width = width_of(op.type), extent = op.extent();
  if (!extent) return true;
  for (int i = 0; i < batch; ++i) {
    const char* start = static_cast<const char*>(op.data) +
                        static_cast<long long>(i) * stride * static_cast<long long>(width);
    if (!device_range(start, extent * width)) {
      *bad_batch = static_cast<std::size_t>(i);
      return false;
    }
  }
  return true;
}

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
    auto at = [&](const Operand& op, long long stride) {
      Operand moved = op;
      moved.data = static_cast<const char*>(op.data) +
                   static_cast<long long>(i) * stride * static_cast<long long>(width_of(op.type));
      return moved;
    };
    const Operand a = at(g.a, g.stride_a), b = at(g.b, g.stride_b), c = at(g.c, g.stride_c);
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
      cblas_sgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, g.alpha, static_cast<const float*>(a.data),
                  a.ld, static_cast<const float*>(b.data), b.ld, g.beta,
                  static_cast<float*>(const_cast<void*>(c.data)), c.ld);
      continue;
    }
    const std::vector<float> pa = a.packed(), pb = b.packed();
    std::vector<float> pc(static_cast<std::size_t>(g.m) * g.n, 0.0f);
    if (g.beta != 0.0f) pc = c.packed();
    cblas_sgemm(CblasColMajor, ta, tb, g.m, g.n, g.k, g.alpha, pa.data(), a.rows, pb.data(), b.rows,
                g.beta, pc.data(), g.m);
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
