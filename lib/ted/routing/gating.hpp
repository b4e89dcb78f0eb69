// MoE gating with DeepSpeed-MoE semantics (docs/algorithm.md section 2), on the S tokens of one
// gating group (one micro-batch on one rank):
//   probs = softmax(logits); choice 1 = argmax of the logits (not of probs, which can round
//   two near logits equal; an exact tie goes to the lower index); choice 2 = argmax of the other
//   logits (optionally plus Gumbel noise). Capacity C = ceil(k * cf * S / E) computed exactly,
//   at least min_capacity (also when S < min_capacity); dropless: C = the largest expert load
//   (the MoE layer then takes the largest over its expert group). Slots are filled round by
//   round: all first choices (by position, or by random priority with RTS), then the second
//   choices in the slots left, so first choices win. A choice that finds its expert full is
//   dropped.
//   top-1 weight = prob (not renormalised); top-2 weights = g_i k_i / (g_1 k_1 + g_2 k_2) with
//   k_i = 1 if choice i was kept (a token keeping one choice gets weight 1 there).
//   aux = E * sum_e mean_s(prob[s,e]) * mean_s(first choice of s is e), before drops, summed
//   in double. Where and why this differs from DeepSpeed-MoE: docs/algorithm.md,
//   "Differences from DeepSpeed-MoE's gating".
// Random draws are keyed by (seed, step, layer, global token index). The algorithm runs in a
// backend (Ops::route): kernels/cpu/gating.cpp is the reference, the CUDA backend makes the
// same choices.
// These are the routing types (namespace ted::routing) the model uses, declared here, below the
// backend line, because the kernel table (backend/ops.hpp) takes and fills them.
#pragma once

#include <cstdint>
#include <vector>

#include "ted/device/tensor.hpp"
#include "ted/routing/workload.hpp"

namespace ted::routing {

struct GateConfig {
  int experts = 4;
  int top_k = 1;
  double capacity_factor = 1.0;
  int min_capacity = 4;
  bool random_token_selection = false;  // RTS: random priority instead of position
  bool second_choice_noise = false;     // Gumbel noise on the logits that pick choice 2
  bool dropless = false;                // capacity = largest load; nothing dropped
  double aux_coeff = 0.01;
  Workload workload;  // learned (the gate's choices) or a forced workload (workload.hpp)
};

// Capacity of each expert for a group of `tokens` tokens (not dropless).
int expert_capacity(const GateConfig& config, int tokens);

struct RoutingKey {
  std::uint64_t seed = 0;
  std::int64_t step = 0;
  int layer = 0;
  std::int64_t first_token = 0;  // global index of the group's first token
  // A forced workload's choices, [tokens, top_k] in the routing backend's memory
  // (assign_experts); null: the gate's own.
  const std::int32_t* forced = nullptr;
};

// One gating group's routing, in the buffers of the backend that computed it (Ops::route): the
// same struct on every backend. M is the master type (fp32, or fp64 in the gradient checks).
template <typename M>
struct Routing {
  int tokens = 0;
  int experts = 0;
  int top_k = 1;
  int capacity = 0;                  // host value: it sizes the exchange buffers
  Tensor<M> probs;                   // [tokens, experts]
  Tensor<std::int32_t> expert;       // [tokens, top_k] chosen expert of each choice
  Tensor<std::int32_t> slot;         // [tokens, top_k] slot in that expert's buffer; -1 = dropped
  Tensor<M> gate_value;              // [tokens, top_k] prob of the chosen expert
  Tensor<M> weight;                  // [tokens, top_k] combine weight (0 when dropped)
  Tensor<std::int32_t> first_count;  // [experts] tokens whose first choice is e, before drops
  Tensor<M> aux;                     // [1] the group's aux loss
  // Host: the kept choices of each expert, which fill its slots 0 .. kept[e] - 1 (every routing
  // fills an expert's slots from 0 up), so the MoE layer can leave the empty slots out of the
  // experts' GEMMs. Empty when the backend does not report it (a GPU would have to wait for a
  // read-back); the experts then run on every slot.
  std::vector<std::int32_t> kept;
  DeviceBuffer workspace;  // the backend's scratch (priority keys, sort temporaries)
};

// What the trainer reads back of a routing: its aux loss and the choices it dropped.
struct RoutingStats {
  double aux = 0;
  int dropped = 0;
  std::vector<std::int64_t> load;  // [experts] choices routed to each, before drops
};

}  // namespace ted::routing
