// exp for the CPU kernels' hot loops (the attention softmax, GeLU): a branch-free, call-free
// form the compiler vectorises, where std::exp is one library call per element. fp32 uses
// Cephes' expf (range reduction by ln 2, a degree-6 polynomial; relative error ~1e-7, within
// fp32 rounding of std::exp); fp64 keeps std::exp, so the gradient checks see the exact function.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

// The fp32 loops the step spends its element-wise time in are compiled three times, for
// x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, and the loader picks the best
// this CPU runs (GCC's target_clones, an ifunc): the build stays portable (a binary built on a
// login node runs on any compute node) while the loops run 8 or 16 floats wide. The baseline
// build (SSE2) leaves these loops scalar: GeLU forward and backward measured 40 and 57 ms over
// 4M elements there, 2.3 and 2.9 ms with the AVX-512 clone.
// Built with TED_AVX512_CLONES=OFF (TED_NO_AVX512_CLONES), the AVX-512 copy is left out.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#ifdef TED_NO_AVX512_CLONES
#define TED_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TED_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
#else
#define TED_VECTOR_CLONES
#endif

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

// Row kernels of the fused attention's online softmax and its backward. The fp32 ones are
// compiled with TED_VECTOR_CLONES (vector_math.cpp) and reduce in 16 lanes, then the lanes in
// a fixed order: a sum differs from the serial loop's by rounding, never with the thread count.
// Other types use the serial loops below (the gradient checks run them in fp64).
float row_max(const float* x, int n);               // n >= 1
float exp_shift_sum(float* x, int n, float shift);  // x = exp(x - shift); returns the sum
void scale_row(float* x, int n, float factor);      // x *= factor
void softmax_grad_row(const float* p, float* dp, int n, float delta, float scale);
// dp = p (dp - delta) scale

template <typename T>
T row_max(const T* x, int n) {
  T m = x[0];
  for (int c = 1; c < n; ++c) m = std::max(m, x[c]);
  return m;
}
template <typename T>
T exp_shift_sum(T* x, int n, T shift) {
  T sum = 0;
  for (int c = 0; c < n; ++c) sum += x[c] = exp_approx(x[c] - shift);
  return sum;
}
template <typename T>
void scale_row(T* x, int n, T factor) {
  for (int c = 0; c < n; ++c) x[c] *= factor;
}
template <typename T>
void softmax_grad_row(const T* p, T* dp, int n, T delta, T scale) {
  for (int c = 0; c < n; ++c) dp[c] = p[c] * (dp[c] - delta) * scale;
}

}  // namespace ted::kernels::cpu
