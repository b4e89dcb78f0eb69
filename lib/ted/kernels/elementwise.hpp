// Per-element math shared by the CPU and CUDA backends (TED_HOST_DEVICE), so the CPU tests
// cover what the GPU runs.
#pragma once

#include <cmath>

#include "ted/core/host_device.hpp"

namespace ted::kernels {

// GeLU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
TED_HOST_DEVICE inline T gelu(T x) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  T inner = k * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + std::tanh(inner));
}

// d gelu / dx.
template <typename T>
TED_HOST_DEVICE inline T gelu_grad(T x) {
  const T k = T(0.7978845608028654);
  T x2 = x * x;
  T inner = k * (x + T(0.044715) * x2 * x);
  T t = std::tanh(inner);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x2);
}

}  // namespace ted::kernels
