// The gating algorithm of routing/gating.hpp on host arrays: the CPU backend's route and its
// backward, and the reference the CUDA backend's routing is tested against. T is the compute
// type (float, or double in the gradient checks); d_logits is written in T.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ted/routing/gating.hpp"

namespace ted::kernels::cpu {

// The arrays of one routing (routing::Routing's buffers in host memory); T const: read-only.
template <typename T>
struct RoutingArrays {
  using Index = std::conditional_t<std::is_const_v<T>, const std::int32_t, std::int32_t>;
  T* probs;               // [tokens, experts]
  Index* expert;          // [tokens, top_k]
  Index* slot;            // [tokens, top_k]
  T* gate_value;          // [tokens, top_k]
  T* weight;              // [tokens, top_k]
  Index* first_count;     // [experts]
  T* aux;                 // [1]
  Index* kept = nullptr;  // [experts] kept choices of each expert (slots 0 .. kept - 1), or null
};

// Fills `out` and returns the capacity.
template <typename T>
int route(const T* logits, int tokens, const routing::GateConfig& config,
          const routing::RoutingKey& key, const RoutingArrays<T>& out);

// d_logits [tokens, experts] (overwritten) from d_weight [tokens, top_k] and aux_scale * d aux.
template <typename T>
void route_backward(const RoutingArrays<const T>& routing, int tokens, int experts, int top_k,
                    const T* d_weight, T aux_scale, T* d_logits);

}  // namespace ted::kernels::cpu
