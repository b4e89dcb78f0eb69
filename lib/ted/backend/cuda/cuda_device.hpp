// The CUDA device: one GPU, its memory (stream-ordered, from the device's pool) and one stream
// on which the backend queues work.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "ted/backend/device.hpp"

namespace ted::cuda {

int device_count();  // 0 when there is no GPU or no driver, never throws
std::unique_ptr<Device> make_cuda_device(int ordinal);
// The stream of a device made by make_cuda_device, or of a wrapper around one (kernels and
// communicators queue their work on it).
cudaStream_t stream_of(Device& device);

}  // namespace ted::cuda
