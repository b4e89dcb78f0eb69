// exp for the CPU kernels' hot loops (the attention softmax, GeLU): a branch-free, call-free
// form the compiler vectorises, where std::exp is one library call per element. fp32 uses
// Cephes' expf (range reduction by ln 2, a degree-6 polynomial; relative error ~1e-7, within
// fp32 rounding of std::exp); fp64 keeps std::exp, so the gradient checks see the exact function.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace ted::kernels::cpu {

inline float exp_approx(float x) {
  // Clamped to what a normal float holds: below, results are under 2^-126 (~1e-38, nothing
  // next to a softmax sum of at least 1); above, ~1.6e38 stands for overflow (tanh saturates).
  x = std::min(std::max(x, -87.33654f), 88.0f);
  float n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23), vectorisable
  float r = x - n * 0.693359375f;       // ln 2 in two parts keeps r exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;  // 2^n
  return y * std::bit_cast<float>(bits);
}

inline double exp_approx(double x) {
  return std::exp(x);
}

// exp for the shared per-element math (kernels/elementwise.hpp) on the CPU.
struct FastExp {
  template <typename T>
  T operator()(T x) const {
    return exp_approx(x);
  }
};

}  // namespace ted::kernels::cpu
