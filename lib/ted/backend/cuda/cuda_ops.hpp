// The CUDA backend's kernel table (backend/ops.hpp): the kernels of kernels/cuda on one GPU's
// stream, for fp32, bf16 and fp16 storage (no fp64). Made by the registry for a CUDA device.
#pragma once

#include <memory>

#include "ted/backend/ops.hpp"

namespace ted::cuda {

template <typename T>
std::unique_ptr<Ops<T>> make_cuda_ops(Device& device);

}  // namespace ted::cuda
