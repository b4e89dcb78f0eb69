// One MoE FFN layer on the tokens of one gating group (TED.md section 4, single process):
// gate logits x Wg -> routing -> dispatch buffer [E, C, h] (gathered by slot, empty slots 0)
// -> per expert: GeLU(X W1 + b1) W2 + b2 -> combine y[s] = sum_k w_k * out[e_k, slot_k].
// The dispatch buffer is the one TED's all-to-alls will move; its layout is kept for them.
#pragma once

#include "ted/backend/tensor.hpp"
#include "ted/model/gating.hpp"

namespace ted::model {

template <typename T>
struct MoeParams {
  const T* gate;  // [h, E]
  const T* w1;    // [E, h, f]
  const T* b1;    // [E, f]
  const T* w2;    // [E, f, h]
  const T* b2;    // [E, h]
};

template <typename T>
struct MoeGrads {
  T* gate;
  T* w1;
  T* b1;
  T* w2;
  T* b2;
};

template <typename T>
struct MoeActivations {
  Routing<T> routing;
  Tensor<T> dispatched;  // [E, C, h]
  Tensor<T> hidden;      // [E, C, f] before GeLU
  Tensor<T> activated;   // [E, C, f]
  Tensor<T> expert_out;  // [E, C, h]
};

// Overwrites y [tokens, h]; fills acts. Returns the group's aux loss.
template <typename T>
T moe_forward(Device& device, const T* x, T* y, int tokens, int h, int f, const GateConfig& config,
              const RoutingKey& key, const MoeParams<T>& params, MoeActivations<T>& acts);

// Accumulates into dx and the gradients; aux_scale multiplies d aux (aux_coeff x loss scale).
template <typename T>
void moe_backward(Device& device, const T* x, const T* dy, T* dx, int tokens, int h, int f,
                  const MoeParams<T>& params, const MoeActivations<T>& acts, T aux_scale,
                  const MoeGrads<T>& grads);

// GEMM FLOPs of the layer's forward for a routing of capacity C (backward is twice this).
double moe_forward_flops(int tokens, int h, int f, int experts, int capacity);

}  // namespace ted::model
