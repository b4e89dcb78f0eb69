// cuDNN's fused causal attention (scaled dot-product attention, forward and backward: the
// flash-attention kernels PyTorch runs on Hopper) on the suite's layout: qkv [batch*seq, 3h]
// with head j's q, k, v at columns j*d of each third, out [batch*seq, h], and each row's
// log-sum-exp of its scaled scores in lse [batch, heads, seq] (cuDNN's softmax statistics), so
// it is a drop-in for the suite's own FlashAttention-2 kernel (flash_attention.cuh).
//
// Built where cuDNN's C++ graph API (cudnn-frontend, header-only) and cudnn.h are found at
// configure time (TED_HAVE_CUDNN); it loads libcudnn.so.9 when first asked, so a binary runs on
// a machine without cuDNN and says why it is not used. Elsewhere (the emulated GPU, a build
// without the headers) every shape is unsupported, with the reason. Plain C++, no CUDA headers.
//
// One graph per shape and direction, built once (cuDNN picks and compiles its kernel then) and
// kept. TED_CUDNN=0 in the environment turns it off (the suite's own kernel runs instead).
#pragma once

#include <memory>
#include <string>

#include "ted/core/dtype.hpp"
#include "ted/device/device.hpp"

namespace ted::kernels::cuda {

class CudnnAttention {
 public:
  explicit CudnnAttention(Device& device);  // a CUDA device; loads nothing yet
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Empty when cuDNN runs causal attention over `seq` positions and `heads` heads of width
  // h / heads in this storage type here; otherwise why not (built without cuDNN, not found at
  // run time, fp32, a head width cuDNN does not take, a graph cuDNN would not build).
  std::string unsupported(DataType dtype, int seq, int heads, int h);
  // As flash_attention_forward / _backward of the kernel table (d_qkv overwritten). Only for a
  // shape that unsupported() accepted.
  void forward(DataType dtype, const void* qkv, void* out, float* lse, int batch, int seq,
               int heads, int h);
  void backward(DataType dtype, const void* qkv, const void* out, const float* lse,
                const void* d_out, void* d_qkv, int batch, int seq, int heads, int h);

  // "cuDNN 9.19.0 (frontend 1.32.0)" where it loads, else why it does not.
  static std::string describe();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ted::kernels::cuda
