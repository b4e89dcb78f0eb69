#include "ted/kernels/cpu/vector_math.hpp"

namespace ted::kernels::cpu {
namespace {

constexpr int kLanes = 16;  // one AVX-512 register of floats, two AVX2 ones

}  // namespace

TED_VECTOR_CLONES float row_max(const float* x, int n) {
  float lanes[kLanes];
  for (int k = 0; k < kLanes; ++k) lanes[k] = x[0];
  int c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] = std::max(lanes[k], x[c + k]);
  float m = lanes[0];
  for (int k = 1; k < kLanes; ++k) m = std::max(m, lanes[k]);
  for (; c < n; ++c) m = std::max(m, x[c]);
  return m;
}

TED_VECTOR_CLONES float exp_shift_sum(float* x, int n, float shift) {
  float lanes[kLanes] = {};
  int c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += x[c + k] = exp_approx(x[c + k] - shift);
  float sum = 0;
  for (; c < n; ++c) sum += x[c] = exp_approx(x[c] - shift);
  for (int k = 0; k < kLanes; ++k) sum += lanes[k];
  return sum;
}

TED_VECTOR_CLONES void scale_row(float* x, int n, float factor) {
  for (int c = 0; c < n; ++c) x[c] *= factor;
}

TED_VECTOR_CLONES void softmax_grad_row(const float* p, float* dp, int n, float delta,
                                        float scale) {
  for (int c = 0; c < n; ++c) dp[c] = p[c] * (dp[c] - delta) * scale;
}

}  // namespace ted::kernels::cpu
