// CudnnAttention where there is no cuDNN to call (cudnn_attention.hpp): the emulated GPU, which
// runs the CUDA backend's own sources but not NVIDIA's closed kernels, and a build that found
// no cuDNN headers at configure time. Every shape is unsupported, with the reason.
#include "ted/core/error.hpp"
#include "ted/kernels/cuda/cudnn_attention.hpp"

namespace ted::kernels::cuda {

namespace {

const char* reason() {
#if TED_EMULATED_GPU
  return "the emulated GPU has no cuDNN (cuDNN's attention runs on a real GPU only)";
#else
  return "this build has no cuDNN (cudnn.h and cudnn-frontend were not found at configure time)";
#endif
}

}  // namespace

struct CudnnAttention::Impl {};

CudnnAttention::CudnnAttention(Device&) {}
CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::unsupported(DataType, int, int, int) {
  return reason();
}

void CudnnAttention::forward(DataType, const void*, void*, float*, int, int, int, int) {
  throw Error(std::string("cuDNN attention: ") + reason());
}

void CudnnAttention::backward(DataType, const void*, const void*, const float*, const void*, void*,
                              int, int, int, int) {
  throw Error(std::string("cuDNN attention: ") + reason());
}

std::string CudnnAttention::describe() {
  return std::string("cuDNN not used: ") + reason();
}

}  // namespace ted::kernels::cuda
