// The launch helper's out-of-line parts (kernels/cuda/launch.hpp): the debug switch, the kernel's
// name and the error a failed launch throws.
#include "ted/kernels/cuda/launch.hpp"

#include <cstdlib>
#include <string>

#include "ted/core/error.hpp"
#include "ted/device/cuda_check.hpp"

namespace ted::kernels::cuda {

bool debug_launches() {
  static const bool on = [] {
    const char* value = std::getenv("TED_CUDA_DEBUG");
    return value && *value && std::string(value) != "0";
  }();
  return on;
}

std::string kernel_name_from(const char* pretty_function) {
  const std::string text(pretty_function);
  std::size_t at = text.find("Kernel = ");
  if (at == std::string::npos) return text;
  at += 9;
  return text.substr(at, text.find_first_of(";]", at) - at);
}

void launch_failed(const std::string& kernel, cudaError_t error, dim3 grid, dim3 block,
                   std::size_t shared_bytes, bool ran) {
  auto dims = [](dim3 d) {
    return std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z);
  };
  throw Error("CUDA: kernel " + kernel + " (grid " + dims(grid) + ", block " + dims(block) + ", " +
              std::to_string(shared_bytes) + " bytes of dynamic shared memory) " +
              (ran ? "failed while running: " : "was refused: ") + cudaGetErrorString(error) +
              ", " + ted::cuda::device_tag());
}

}  // namespace ted::kernels::cuda
