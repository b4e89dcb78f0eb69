// Check macros for CUDA, cuBLAS and NCCL calls: throw ted::Error naming the statement,
// file:line, MPI rank and CUDA device. Included only by CUDA sources: the CUDA backend, its
// kernels and the NCCL communicator.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "ted/core/error.hpp"

namespace ted::cuda {
inline std::string device_tag() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return "device ?";
  return "device " + std::to_string(device);
}
}  // namespace ted::cuda

#define TED_CHECK_CUDA(stmt)                                                                 \
  do {                                                                                       \
    cudaError_t ted_cuda_rc_ = (stmt);                                                       \
    if (ted_cuda_rc_ != cudaSuccess)                                                         \
      ::ted::throw_check_failure(                                                            \
          "CUDA", #stmt, __FILE__, __LINE__,                                                 \
          std::string(cudaGetErrorString(ted_cuda_rc_)) + ", " + ::ted::cuda::device_tag()); \
  } while (0)

#define TED_CHECK_NCCL(stmt)                                                                 \
  do {                                                                                       \
    ncclResult_t ted_nccl_rc_ = (stmt);                                                      \
    if (ted_nccl_rc_ != ncclSuccess)                                                         \
      ::ted::throw_check_failure(                                                            \
          "NCCL", #stmt, __FILE__, __LINE__,                                                 \
          std::string(ncclGetErrorString(ted_nccl_rc_)) + ", " + ::ted::cuda::device_tag()); \
  } while (0)
