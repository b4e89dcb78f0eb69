// Per-element math shared by the CPU and CUDA backends (TED_HOST_DEVICE), so the CPU tests
// cover what the GPU runs.
#pragma once

#include <cmath>
#include <cstdint>

#include "ted/core/host_device.hpp"
#include "ted/core/random.hpp"

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

// Dropout as GPT-3 and Megatron place it: on the attention probabilities and on each sub-layer's
// output before the residual add. An element's mask is a pure function of (seed, step, site,
// global token, feature), never of a rank, a thread or a call order, so every layout, the
// recompute of a checkpointed block and every backend draw the same mask, and nothing is stored:
// the backward draws it again. Kept elements are scaled by 1 / (1 - p).
enum DropoutSite : std::int64_t {
  kAttentionProbsDropout = 0,   // feature: global head * seq + key position
  kAttentionOutputDropout = 1,  // feature: column of the attention block's output
  kFfnOutputDropout = 2,        // feature: column of the FFN's (or MoE layer's) output
  kDropoutSites = 3,
};

struct DropoutKey {
  double p = 0;  // the probability of dropping an element, in [0, 1); 0: nothing dropped
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  std::int64_t site = 0;         // layer * kDropoutSites + DropoutSite
  std::int64_t first_token = 0;  // the global index of the token of row (or query) 0
  int first_head = 0;            // attention: this rank's first head among all of them

  TED_HOST_DEVICE bool active() const { return p > 0; }
  // An element is kept when the top 32 bits of its draw are at or above this.
  TED_HOST_DEVICE std::uint32_t threshold() const {
    return static_cast<std::uint32_t>(p * 4294967296.0);
  }
  // What a kept element is multiplied by, in the compute type C.
  template <typename C>
  TED_HOST_DEVICE C scale() const {
    return static_cast<C>(1.0 / (1.0 - p));
  }
  // The draw of token row `row` (first_token + row), before the feature: one hash per row, one
  // mix per element.
  TED_HOST_DEVICE std::uint64_t row_key(std::int64_t row) const {
    return random::hash(seed, random::kDropout, static_cast<std::uint64_t>(step),
                        static_cast<std::uint64_t>(site),
                        static_cast<std::uint64_t>(first_token + row));
  }
  // Attention: the feature of (this rank's head `head`, key position j) among `seq` positions.
  TED_HOST_DEVICE std::uint64_t attention_feature(int head, int seq, int j) const {
    return static_cast<std::uint64_t>(first_head + head) * static_cast<std::uint64_t>(seq) +
           static_cast<std::uint64_t>(j);
  }
};

// Whether the element `feature` of the row whose key is `row_key` is kept.
TED_HOST_DEVICE inline bool dropout_keep(std::uint64_t row_key, std::uint64_t feature,
                                         std::uint32_t threshold) {
  return static_cast<std::uint32_t>(random::mix64(row_key ^ feature) >> 32) >= threshold;
}

// The element's factor: scale where kept, 0 where dropped.
template <typename C>
TED_HOST_DEVICE inline C dropout_factor(std::uint64_t row_key, std::uint64_t feature,
                                        std::uint32_t threshold, C scale) {
  return dropout_keep(row_key, feature, threshold) ? scale : C(0);
}

}  // namespace ted::kernels
