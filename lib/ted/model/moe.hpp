// One MoE FFN layer on the tokens of one gating group (docs/algorithm.md section 4), in four
// steps: route (gate logits x Wg -> each token's experts and capacity slots), dispatch (the
// tokens into the buffer [E, C, h], empty slots 0), the experts (carried there and back by the
// exchange, exchange.hpp: per expert GeLU(X W1 + b1) W2 + b2), combine
// (y[s] = sum_k w_k * out[e_k, slot_k]). Backward mirrors it: an all-to-all's gradient is an
// all-to-all, an all-gather's is taking one's slice, a slice's is an all-gather, and the
// column-parallel input gradient is all-reduced (or reduce-scattered) in the tensor group.
#pragma once

#include "ted/backend/ops.hpp"
#include "ted/comm/communicator.hpp"
#include "ted/device/tensor.hpp"
#include "ted/model/exchange.hpp"
#include "ted/routing/gating.hpp"

namespace ted::model {

template <typename T>
struct MoeParams {  // this rank's experts: E/Ep of them, each with f/T of the FFN width
  const T* gate;    // [h, E] (all experts: the gate is computed redundantly)
  const T* w1;      // [E/Ep, h, f/T]
  const T* b1;      // [E/Ep, f/T]
  const T* w2;      // [E/Ep, f/T, h]
  const T* b2;      // [E/Ep, h]
};

template <typename T>
struct MoeGrads {  // where the kernels add them (core/grad_out.hpp)
  GradOut<T> gate;
  GradOut<T> w1;
  GradOut<T> b1;
  GradOut<T> w2;
  GradOut<T> b2;
};

template <typename T>
struct MoeActivations {
  routing::Routing<master_t<T>> routing;
  ExchangePlan plan;  // the layer's exchange at the routing's capacity
  // [Ep, E/Ep, R, h] what this rank's experts compute on (R = Cp, or Cp/T unsplit)
  Tensor<T> expert_in;
  Tensor<T> hidden;           // [Ep, E/Ep, R, f/T] before GeLU
  Tensor<T> activated;        // [Ep, E/Ep, R, f/T]
  Tensor<T> returned;         // [E, Cp, h] expert outputs back at the tokens' rank
  Tensor<T> dispatch_stash;   // CAC: the dispatch all-to-all's output
  Tensor<T> return_stash;     // CAC: the return all-to-all's output
  Tensor<T> reduction_stash;  // CAC with stash_reduction: the tensor-reduced expert output
  // Host, one per block of expert_in: the slots its source's routing filled for its expert
  // (share_kept_counts, over the expert group's control communicator), so the experts leave the
  // empty ones out. A source whose backend does not report them (Routing::kept) sends "every row",
  // and one process without counts leaves this empty: those rows are all computed. CAC keeps it
  // with the stash, as the recompute does not communicate.
  std::vector<std::int32_t> block_kept;
};

struct MoeShape {
  int tokens;
  int hidden;
  int ffn;      // f, the FFN width (the exchange's plan takes this rank's share)
  int experts;  // E, all of them
};

// Overwrites y [tokens, h]; fills acts. Returns the group's routing statistics (aux loss and
// dropped choices) when `read_stats` (a read-back that waits for the device; the checkpoint
// recompute, which already has them, skips it), else zeros.
template <typename T>
routing::RoutingStats moe_forward(Ops<T>& ops, const T* x, T* y, const MoeShape& shape,
                                  const routing::GateConfig& config, const routing::RoutingKey& key,
                                  const MoeParams<T>& params, const ExchangeSetup& setup,
                                  MoeActivations<T>& acts, bool read_stats = true);

// Accumulates into dx and the gradients; aux_scale multiplies d aux (aux_coeff x loss scale).
template <typename T>
void moe_backward(Ops<T>& ops, const T* x, const T* dy, T* dx, const MoeShape& shape,
                  const MoeParams<T>& params, const ExchangeSetup& setup,
                  const MoeActivations<T>& acts, master_t<T> aux_scale, const MoeGrads<T>& grads);

// GEMM FLOPs of this rank's share of the layer's forward at its plan (backward is twice this;
// unsplit experts compute on their tensor rank's capacity slice only).
double moe_forward_flops(const MoeShape& shape, const ExchangePlan& plan);

}  // namespace ted::model
