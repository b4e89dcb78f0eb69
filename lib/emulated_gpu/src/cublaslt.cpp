// The emulated cuBLASLt (include/cublasLt.h): descriptors as plain records, a heuristic that
// answers one algorithm or declines, and a matmul queued on its stream that computes the product
// in fp32 (matrix.hpp), adds beta C, applies the epilogue in fp32 and rounds into D (and aux) once.
// GeLU is the tanh approximation, as cuBLASLt's.
#include <cublasLt.h>

#include <cmath>
#include <string>
#include <vector>

#include "matrix.hpp"

struct cublasLtContext {
  int device = 0;
};

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  std::int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int64_t bias_stride = 0;
  void* aux = nullptr;
  std::int64_t aux_ld = 0, aux_stride = 0;
  std::int32_t bias_type = -1, aux_type = -1;
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType type;
  std::uint64_t rows, cols;
  std::int64_t ld;
  std::int32_t batch = 1;
  std::int64_t stride = 0;
};

struct cublasLtMatmulPreferenceOpaque_t {
  std::uint64_t workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace ted_emu {
namespace {

constexpr std::uint64_t kAlgoMagic = 0x7465642d6c74ull;  // "ted-lt"

// Copies an attribute's value after checking its size, as cuBLASLt does.
template <typename V>
cublasStatus_t take(V& field, const void* value, std::size_t bytes) {
  if (!value || bytes != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, value, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

bool has_bias(std::uint32_t epilogue) {
  return epilogue & CUBLASLT_EPILOGUE_BIAS;
}
bool gelu_aux(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool dgelu(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_DGELU;
}
bool known_epilogue(std::uint32_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_DEFAULT || epilogue == CUBLASLT_EPILOGUE_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_GELU || epilogue == CUBLASLT_EPILOGUE_GELU_BIAS ||
         gelu_aux(epilogue) || dgelu(epilogue);
}

float gelu(float x) {
  const float k = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}
float gelu_grad(float x) {
  const float k = 0.7978845608028654f;
  const float t = std::tanh(k * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * x * x);
}

// The shapes op(A) [m, k], op(B) [k, n], C and D [m, n] agree, with one batch count.
cublasStatus_t check_shapes(const cublasLtMatmulDescOpaque_t& desc,
                            const cublasLtMatrixLayoutOpaque_t& a,
                            const cublasLtMatrixLayoutOpaque_t& b,
                            const cublasLtMatrixLayoutOpaque_t& c,
                            const cublasLtMatrixLayoutOpaque_t& d) {
  const bool ta = desc.trans_a != CUBLAS_OP_N, tb = desc.trans_b != CUBLAS_OP_N;
  const std::uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const std::uint64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || d.rows != m || d.cols != n || c.rows != m || c.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const auto* layout : {&a, &b, &c, &d})
    if (layout->ld < static_cast<std::int64_t>(layout->rows) || layout->batch < 1 ||
        layout->batch != d.batch)
      return CUBLAS_STATUS_INVALID_VALUE;
  if (c.type != d.type || c.ld != d.ld || c.stride != d.stride) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// What cuBLASLt documents it cannot do, declined at the heuristic (no algorithm).
bool supported(const cublasLtMatmulDescOpaque_t& desc, const cublasLtMatrixLayoutOpaque_t& a,
               const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& d) {
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale != CUDA_R_32F) return false;
  const bool sixteen = a.type == CUDA_R_16F || a.type == CUDA_R_16BF;
  if (a.type != b.type || !(sixteen || a.type == CUDA_R_32F)) return false;
  if (!(d.type == a.type || (sixteen && d.type == CUDA_R_32F))) return false;
  if (!known_epilogue(desc.epilogue)) return false;
  if (desc.bias_type != -1 || desc.aux_type != -1) return false;  // the defaults only
  if (has_bias(desc.epilogue) && !desc.bias) return false;
  if (gelu_aux(desc.epilogue) || dgelu(desc.epilogue)) {
    // The GeLU input matrix: a leading dimension and batch stride divisible by 8.
    if (!desc.aux || desc.aux_ld < static_cast<std::int64_t>(d.rows) || desc.aux_ld % 8 != 0)
      return false;
    if (d.batch > 1 && desc.aux_stride % 8 != 0) return false;
  }
  return true;
}

bool aligned(const void* p, std::uint64_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

// Everything one queued matmul needs, copied at the call.
struct LtCall {
  cublasLtMatmulDescOpaque_t desc;
  cublasLtMatrixLayoutOpaque_t a, b, c, d;
  const void *A, *B, *C;
  void* D;
  float alpha, beta;
};

bool vector_in_bounds(const void* base, cudaDataType type, std::size_t count, std::int64_t stride,
                      int batch) {
  const std::size_t width = width_of(type);
  for (int i = 0; i < batch; ++i)
    if (!device_range(
            static_cast<const char*>(base) + i * stride * static_cast<std::int64_t>(width),
            count * width))
      return false;
  return true;
}

void run_matmul(const LtCall& call, int device) {
  const auto& desc = call.desc;
  const bool ta = desc.trans_a != CUBLAS_OP_N, tb = desc.trans_b != CUBLAS_OP_N;
  const int m = static_cast<int>(call.d.rows), n = static_cast<int>(call.d.cols);
  const int k = static_cast<int>(ta ? call.a.rows : call.a.cols);
  const int batch = call.d.batch;
  const Operand A{call.A, call.a.type, static_cast<int>(call.a.rows), static_cast<int>(call.a.cols),
                  call.a.ld};
  const Operand B{call.B, call.b.type, static_cast<int>(call.b.rows), static_cast<int>(call.b.cols),
                  call.b.ld};
  const Operand C{call.C, call.c.type, m, n, call.c.ld};
  const Operand D{call.D, call.d.type, m, n, call.d.ld};
  const Operand aux{desc.aux, call.d.type, m, n, desc.aux_ld};
  const char* names[] = {"A", "B", "C", "D", "aux"};
  const Operand* operands[] = {&A, &B, &C, &D, &aux};
  const long long strides[] = {call.a.stride, call.b.stride, call.c.stride, call.d.stride,
                               desc.aux_stride};
  const bool uses_aux = gelu_aux(desc.epilogue) || dgelu(desc.epilogue);
  for (int i = 0; i < 5; ++i) {
    if (i == 2 && call.beta == 0.0f) continue;
    if (i == 4 && !uses_aux) continue;
    std::size_t bad = 0;
    if (!in_bounds(*operands[i], strides[i], batch, &bad)) {
      fail_device(device, cudaErrorIllegalAddress,
                  std::string("cuBLASLt matmul: ") + names[i] + " of batch " + std::to_string(bad) +
                      " is not inside one device allocation");
      return;
    }
  }
  if (has_bias(desc.epilogue) &&
      !vector_in_bounds(desc.bias, call.d.type, call.d.rows, desc.bias_stride, batch)) {
    fail_device(device, cudaErrorIllegalAddress,
                "cuBLASLt matmul: the bias vector is not inside one device allocation");
    return;
  }
  for (int i = 0; i < batch; ++i) {
    std::vector<float> sum =
        product(ta, tb, m, n, k, call.alpha, A.at(i, call.a.stride), B.at(i, call.b.stride));
    const Operand c = C.at(i, call.c.stride), out = D.at(i, call.d.stride);
    const Operand in_aux = aux.at(i, desc.aux_stride);
    const void* bias = has_bias(desc.epilogue)
                           ? static_cast<const char*>(desc.bias) +
                                 i * desc.bias_stride * static_cast<std::int64_t>(width_of(D.type))
                           : nullptr;
    for (int col = 0; col < n; ++col)
      for (int row = 0; row < m; ++row) {
        float v = sum[static_cast<std::size_t>(col) * m + row];
        const std::size_t at = static_cast<std::size_t>(col) * c.ld + row;
        if (call.beta != 0.0f) v += call.beta * widen(c.data, c.type, at);
        if (bias) v += widen(bias, D.type, static_cast<std::size_t>(row));
        const std::size_t at_aux = static_cast<std::size_t>(col) * desc.aux_ld + row;
        if (gelu_aux(desc.epilogue)) {
          narrow(const_cast<void*>(in_aux.data), D.type, at_aux, v);
          v = gelu(v);
        } else if (desc.epilogue == CUBLASLT_EPILOGUE_GELU ||
                   desc.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS) {
          v = gelu(v);
        } else if (dgelu(desc.epilogue)) {
          v *= gelu_grad(widen(in_aux.data, D.type, at_aux));
        }
        narrow(const_cast<void*>(out.data), out.type, static_cast<std::size_t>(col) * out.ld + row,
               v);
      }
  }
}

}  // namespace
}  // namespace ted_emu

using namespace ted_emu;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasLtContext{current_device()};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (!desc) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescOpaque_t{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, std::size_t bytes) {
  if (!desc) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return take(desc->trans_a, value, bytes);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return take(desc->trans_b, value, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return take(desc->epilogue, value, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return take(desc->bias, value, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return take(desc->bias_stride, value, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return take(desc->aux, value, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return take(desc->aux_ld, value, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return take(desc->aux_stride, value, bytes);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return take(desc->bias_type, value, bytes);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return take(desc->aux_type, value, bytes);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
  if (!layout || width_of(type) == 0) return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* value, std::size_t bytes) {
  if (!layout) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attribute) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return take(layout->batch, value, bytes);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return take(layout->stride, value, bytes);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (!preference) return CUBLAS_STATUS_INVALID_VALUE;
  *preference = new cublasLtMatmulPreferenceOpaque_t{};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* value, std::size_t bytes) {
  if (!preference) return CUBLAS_STATUS_NOT_INITIALIZED;
  switch (attribute) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return take(preference->workspace, value, bytes);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return take(preference->align[attribute - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], value,
                  bytes);
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// One algorithm, or none for what cuBLASLt cannot do. The algorithm records the alignments it
// was promised; the matmul checks the pointers against them.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[],
                                              int* returned) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !preference || requested <= 0 || !results || !returned)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  if (const cublasStatus_t rc = check_shapes(*desc, *a, *b, *c, *d); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  if (!supported(*desc, *a, *b, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulHeuristicResult_t& result = results[0];
  result = {};
  result.algo.data[0] = kAlgoMagic;
  for (int i = 0; i < 4; ++i) result.algo.data[1 + i] = preference->align[i];
  result.state = CUBLAS_STATUS_SUCCESS;
  result.wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t a, const void* B,
                              cublasLtMatrixLayout_t b, const void* beta, const void* C,
                              cublasLtMatrixLayout_t c, void* D, cublasLtMatrixLayout_t d,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!desc || !a || !b || !c || !d || !alpha || !beta || !algo || !A || !B || !D)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (const cublasStatus_t rc = check_shapes(*desc, *a, *b, *c, *d); rc != CUBLAS_STATUS_SUCCESS)
    return rc;
  if (!supported(*desc, *a, *b, *d)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (algo->data[0] != kAlgoMagic) {
    explain("cublasLtMatmul: the algorithm was not returned by cublasLtMatmulAlgoGetHeuristic");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float beta_value = *static_cast<const float*>(beta);
  const void* pointers[] = {A, B, beta_value != 0.0f ? C : D, D};
  const char* names[] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i)
    if (!aligned(pointers[i], algo->data[1 + i])) {
      explain(std::string("cublasLtMatmul: ") + names[i] + " is less aligned than the " +
              std::to_string(algo->data[1 + i]) + " bytes the heuristic was promised");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  if (workspace_bytes && (!workspace || !device_range(workspace, workspace_bytes)))
    return CUBLAS_STATUS_INVALID_VALUE;
  Stream* queue = stream_of(stream);
  if (!queue) return CUBLAS_STATUS_EXECUTION_FAILED;
  LtCall call{*desc, *a, *b, *c, *d, A, B, C, D, *static_cast<const float*>(alpha), beta_value};
  const int device = queue->device();
  queue->enqueue([call, device] {
    if (device_error(device) == cudaSuccess) run_matmul(call, device);
  });
  return CUBLAS_STATUS_SUCCESS;
}
