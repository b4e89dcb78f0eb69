// The CUDA device: one GPU, its memory (stream-ordered, from the device's pool) and one stream
// on which the backend queues work. Declared here, below the communicators that queue on its
// stream; made by the CUDA backend (backend/cuda/cuda_device.cu).
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "ted/device/device.hpp"

namespace ted::cuda {

// The GPUs visible to this process: 0 when there is none or no driver at all; UnusableGpu when
// the runtime reports any other error (a driver older than the runtime).
int device_count();
std::unique_ptr<Device> make_cuda_device(int ordinal);
// The stream of a device made by make_cuda_device, or of a wrapper around one (kernels and
// communicators queue their work on it).
cudaStream_t stream_of(Device& device);

// What identifies a GPU across processes (its UUID, in hex) and whether its compute mode lets
// only one process use it.
struct GpuIdentity {
  std::string uuid;
  std::string name;
  bool exclusive_process = false;
};
GpuIdentity gpu_identity(int ordinal);

// Waits for the device and returns the memory its pool keeps to the GPU. Called before
// libraries take GPU memory of their own (cuBLAS, NCCL) and when a device goes away.
void release_cached_memory(Device& device);

}  // namespace ted::cuda
