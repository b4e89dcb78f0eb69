// Kernel launches. Every kernel of the CUDA backend (kernels/cuda, and the device's fill in
// backend/cuda) starts through launch<kernel>(grid, block, shared bytes, stream, arguments...),
// in place of kernel<<<grid, block, shared, stream>>>(...): the one place that checks a launch
// and names the kernel when it fails. With TED_CUDA_DEBUG=1 it also waits for each kernel and
// checks how it ran, so an error is reported at the launch that caused it rather than at some
// later synchronisation. It lives with the kernels, so that they include nothing of backend/.
//
// It launches with CUDA 12's typed cudaLaunchKernelEx, which the emulated GPU of the tests
// implements as well (docs/emulated_gpu.md), so the kernel sources are the same for both.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

namespace ted::kernels::cuda {

// TED_CUDA_DEBUG=1 in the environment (read once): wait for and check every launch.
bool debug_launches();

// Throws ted::Error: the kernel, its configuration and the CUDA error; `ran`: the error came
// from running it (debug mode), not from starting it.
[[noreturn]] void launch_failed(const std::string& kernel, cudaError_t error, dim3 grid, dim3 block,
                                std::size_t shared_bytes, bool ran);

// "ns::kernel<float>" from the compiler's name of kernel_name<Kernel>.
std::string kernel_name_from(const char* pretty_function);

template <auto Kernel>
const std::string& kernel_name() {
  static const std::string name = kernel_name_from(__PRETTY_FUNCTION__);
  return name;
}

template <auto Kernel, typename... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaError_t rc = cudaLaunchKernelEx(&config, Kernel, std::forward<Args>(args)...);
  if (rc != cudaSuccess) {
    cudaGetLastError();  // a launch error is not sticky: clear it for the next call
    launch_failed(kernel_name<Kernel>(), rc, grid, block, shared_bytes, false);
  }
  if (debug_launches()) {
    rc = cudaStreamSynchronize(stream);
    if (rc == cudaSuccess) rc = cudaGetLastError();
    if (rc != cudaSuccess)
      launch_failed(kernel_name<Kernel>(), rc, grid, block, shared_bytes, true);
  }
}

}  // namespace ted::kernels::cuda
