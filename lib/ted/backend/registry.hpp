// The one place that knows which backends this build has. A backend is a device kind plus
// the communication library that moves its memory: "mpi" = host memory + MPI (the default),
// "nccl" = CUDA device memory + NCCL.
#pragma once

#include <memory>

#include "ted/backend/device.hpp"
#include "ted/comm/communicator.hpp"

namespace ted {

bool cuda_compiled();  // the CUDA backend was built (nvcc found at configure time)
bool nccl_compiled();  // the NCCL backend was built
int gpu_count();       // GPUs visible to this process; 0 without CUDA, driver or GPU

// GPU `ordinal` as a device. Throws ConfigError when CUDA was not compiled or the GPU is not
// visible.
std::unique_ptr<Device> make_gpu_device(int ordinal = 0);

// Throws ConfigError when the backend was not compiled, or needs a GPU and none is visible.
void require_backend(CommBackend backend);

// The device a backend's buffers live on. For nccl, GPU (local rank mod GPU count), where the
// local rank is this rank's index among the ranks of its node.
std::unique_ptr<Device> make_device(CommBackend backend);

// The world communicator of a backend (collective over MPI_COMM_WORLD). For nccl, `device`
// must be the device from make_device and outlive the communicator.
std::unique_ptr<Communicator> make_world_communicator(CommBackend backend, Device& device,
                                                      Ledger* ledger);

}  // namespace ted
