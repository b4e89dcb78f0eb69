// What the CUDA kernel sources share: the context's innards, fp32 loads and stores of the
// storage types (through the TED_HOST_DEVICE conversions of dtype.hpp, so the GPU rounds as
// the CPU backend does), launches and their sizes, dynamic shared memory and block
// reductions. Included only by .cu files.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ted/backend/cuda/launch.hpp"
#include "ted/core/dtype.hpp"
#include "ted/device/cuda_check.hpp"
#include "ted/kernels/cuda/kernels.hpp"

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

struct Context::Impl {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
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

#define TED_GRID_STRIDE(i, count)                                                       \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; \
       i < (count); i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

using ted::cuda::launch;  // launch<kernel>(grid, block, shared bytes, stream, args...)

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

}  // namespace ted::kernels::cuda
