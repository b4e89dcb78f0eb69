// What the CUDA kernel sources share: the context's innards, fp32 loads and stores of the
// storage types (through the TED_HOST_DEVICE conversions of dtype.hpp, so the GPU rounds as
// the CPU backend does), launches and their sizes, dynamic shared memory and block
// reductions. Included only by .cu files.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <unordered_map>

#include "ted/core/dtype.hpp"
#include "ted/device/cuda_check.hpp"
#include "ted/kernels/cuda/kernels.hpp"
#include "ted/kernels/cuda/launch.hpp"

#define TED_CHECK_CUBLAS(stmt)                                                                    \
  do {                                                                                            \
    cublasStatus_t ted_cublas_rc_ = (stmt);                                                       \
    if (ted_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                  \
      ::ted::throw_check_failure(                                                                 \
          "cuBLAS", #stmt, __FILE__, __LINE__,                                                    \
          std::string(cublasGetStatusString(ted_cublas_rc_)) + ", " + ::ted::cuda::device_tag()); \
  } while (0)

// Dynamic shared memory, declared once at file scope (as CUDA allows) and viewed through
// dynamic_shared<T>() below.
extern __shared__ float4 ted_dynamic_shared[];

namespace ted::kernels::cuda {

// A cuBLASLt matmul's shape, epilogue and operand alignments: what its plan is made for. Every
// field is 64 bits wide, so the key has no padding and compares and hashes as bytes.
struct LtKey {
  std::int64_t type, ta, tb, m, n, k, lda, ldb, ldd, sa, sb, sd, batch;
  std::int64_t kind, bias, bias_stride, ld_aux, aux_stride;
  std::int64_t align_a, align_b, align_c, align_d, align_bias, align_aux;
  bool operator==(const LtKey& other) const;
};
struct LtKeyHash {
  std::size_t operator()(const LtKey& key) const;
};
// What cuBLASLt needs to run one shape: made once, kept by the context (gemm.cu).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // c serves C and D
  cublasLtMatmulAlgo_t algo{};
  bool usable = false;  // cuBLASLt had an algorithm for it
  void destroy();
};

struct Context::Impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  DeviceBuffer workspace;  // cuBLAS's and cuBLASLt's, from the device's pool
  std::unordered_map<LtKey, LtPlan, LtKeyHash> plans;
  GemmPaths paths;
};

inline cudaStream_t stream(Context& ctx) {
  return ctx.impl().stream;
}

// fp32 view of one stored element, and an fp32 value rounded into storage: the shared
// TED_HOST_DEVICE conversions of core/dtype.hpp, so the GPU rounds as the CPU backend does.
template <typename T>
__device__ __forceinline__ float load(T v) {
  return widen(v);
}
template <typename T>
__device__ __forceinline__ T store(float v) {
  return narrow<T>(v);
}

// N elements of T moved in one load or store; Pack<T> is 16 bytes of them (8 16-bit elements, 4
// fp32), what one thread moves at a time in the memory-bound kernels, which walk rows a pack at a
// time where the rows allow it (packable).
template <typename T, int N>
struct alignas(N * sizeof(T)) Chunk {
  static constexpr int kSize = N;
  T v[N];
};
template <typename T>
using Pack = Chunk<T, static_cast<int>(16 / sizeof(T))>;
template <typename T, int N>
__device__ __forceinline__ Chunk<T, N> load_pack(const T* p) {
  return *reinterpret_cast<const Chunk<T, N>*>(p);
}
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
  return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void store_pack(T* p, const Chunk<T, N>& pack) {
  *reinterpret_cast<Chunk<T, N>*>(p) = pack;
}
// Whether rows of `width` elements at each of these pointers start on 16-byte boundaries, so
// that they can be moved a Pack at a time (null pointers are not looked at).
template <typename T>
bool packable(int width, std::initializer_list<const void*> pointers) {
  if (width % Pack<T>::kSize != 0) return false;
  for (const void* p : pointers)
    if (p && reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
  return true;
}

constexpr int kThreads = 256;

inline unsigned blocks_for(std::size_t count, int threads = kThreads) {
  std::size_t blocks = (count + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > 65535u * 16u) blocks = 65535u * 16u;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks);
}

// The first pass of a deterministic sum: at most this many blocks, each writing its partial
// to its own slot (blocks never meet in an atomic, whose order would be the GPU's and would
// change the last bits from run to run); add_partials is the second pass.
constexpr unsigned kPartialBlocks = 1024;
inline unsigned partial_blocks(std::size_t count) {
  const unsigned blocks = blocks_for(count);
  return blocks < kPartialBlocks ? blocks : kPartialBlocks;
}
// *total += partials[0] + ... + partials[n - 1], in a fixed order (optimizer.cu).
void add_partials(Context& ctx, const double* partials, unsigned n, double* total);

// Threads for a kernel that gives one block a row of `width` elements and reduces over the
// block: the row rounded up to whole warps, at most kThreads, so a narrow row (a small model's
// hidden size, a short sequence) does not keep idle warps waiting at every barrier.
inline unsigned threads_for(int width) {
  const int warps = (width + 31) / 32;
  const int threads = 32 * (warps < 1 ? 1 : warps);
  return static_cast<unsigned>(threads < kThreads ? threads : kThreads);
}

// Threads for a block that walks a row of `width` elements `per` at a time (per thread and load).
inline unsigned row_threads(int width, int per) {
  return threads_for((width + per - 1) / per);
}

#define TED_GRID_STRIDE(i, count)                                                       \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; \
       i < (count); i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

// The launch's dynamic shared memory (its third launch argument), as T*.
template <typename T>
__device__ __forceinline__ T* dynamic_shared() {
  return reinterpret_cast<T*>(ted_dynamic_shared);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum (or max) over the block; every thread gets the result. blockDim.x a multiple of 32,
// at most 1024; `shared` holds 32 floats. Ends with a barrier, so it can be called again.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < warps; ++w) total += shared[w];
  __syncthreads();
  return total;
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float best = shared[0];
  for (int w = 1; w < warps; ++w) best = fmaxf(best, shared[w]);
  __syncthreads();
  return best;
}

constexpr int kRowChunk = 256;  // rows per partial sum in the column reductions

// Rows per chunk of a column reduction over `rows` rows: kRowChunk, or more where that would
// need more chunks than a grid's y dimension has (65535).
inline int row_chunk(int rows) {
  const int needed = static_cast<int>((static_cast<std::int64_t>(rows) + 65534) / 65535);
  return needed > kRowChunk ? needed : kRowChunk;
}

}  // namespace ted::kernels::cuda
