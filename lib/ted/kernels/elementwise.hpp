// Per-element math shared by the CPU and CUDA backends (TED_HOST_DEVICE), so the CPU tests
// cover what the GPU runs.
#pragma once

#include <cmath>

#include "ted/core/host_device.hpp"

namespace ted::kernels {

// The exp the functions below use by default. The CPU kernels pass their vectorisable one
// (kernels/cpu/vector_math.hpp) instead, so their loops compile to SIMD code.
struct StdExp {
  template <typename T>
  TED_HOST_DEVICE T operator()(T x) const {
    return std::exp(x);
  }
};

// tanh through one exp: 1 - 2 / (1 + e^{2u}). Cheaper than std::tanh on the CPU; saturates
// to +/-1 correctly (e^{2u} overflows to inf -> 1, underflows to 0 -> -1).
template <typename T, typename Exp = StdExp>
TED_HOST_DEVICE inline T tanh_via_exp(T u, Exp exp = {}) {
  return T(1) - T(2) / (T(1) + exp(T(2) * u));
}

// GeLU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T, typename Exp = StdExp>
TED_HOST_DEVICE inline T gelu(T x, Exp exp = {}) {
  const T k = T(0.7978845608028654);  // sqrt(2/pi)
  T inner = k * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + tanh_via_exp(inner, exp));
}

// d gelu / dx.
template <typename T, typename Exp = StdExp>
TED_HOST_DEVICE inline T gelu_grad(T x, Exp exp = {}) {
  const T k = T(0.7978845608028654);
  T x2 = x * x;
  T inner = k * (x + T(0.044715) * x2 * x);
  T t = tanh_via_exp(inner, exp);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3 * 0.044715) * x2);
}

}  // namespace ted::kernels
