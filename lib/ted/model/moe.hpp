// One MoE FFN layer on the tokens of one gating group (docs/algorithm.md section 4):
// gate logits x Wg -> routing -> dispatch buffer [E, C, h] (gathered by slot, empty slots 0)
// -> exchange to the experts -> per expert: GeLU(X W1 + b1) W2 + b2 -> exchange back ->
// combine y[s] = sum_k w_k * out[e_k, slot_k].
//
// Exchange (MoeExchange; every step is the identity on one process):
//   all-to-all in the expert group: this rank's E/Ep experts receive [Ep sources, E/Ep, C, h];
//   experts tensor-parallel over T: W1 column-parallel (f/T), W2 row-parallel, the partial
//   outputs all-reduced in the tensor group;
//   DTD: before each all-to-all rank t keeps capacity slice t (C padded to a multiple of T), and
//   an all-gather in the tensor group rebuilds the full buffer after it;
//   reduce_scatter (with DTD): the expert output's all-reduce-then-slice is one reduce-scatter;
//   split_experts = false: the experts are not tensor-parallel; each tensor rank sends its
//   capacity slice (as DTD) and runs whole experts on it, with no tensor reduction; the
//   all-gather after the return all-to-all rebuilds the buffer (the expert gradients then differ
//   across the tensor group and must be summed there);
//   CAC: the forward keeps both all-to-all outputs (the stash) and the checkpoint recompute
//   takes them from there instead of communicating again;
//   dropless: the all-to-alls move equal blocks, so the expert group agrees on one capacity,
//   the largest of its routings' (as DeepSpeed-MoE does), over its host control communicator.
// Backward mirrors it: an all-to-all's gradient is an all-to-all, an all-gather's is taking
// one's slice, a slice's is an all-gather, and the column-parallel input gradient is
// all-reduced (or reduce-scattered) in the tensor group.
#pragma once

#include "ted/backend/ops.hpp"
#include "ted/comm/communicator.hpp"
#include "ted/device/tensor.hpp"
#include "ted/model/exchange_plan.hpp"
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

template <typename M>
struct MoeGrads {  // in the master type
  M* gate;
  M* w1;
  M* b1;
  M* w2;
  M* b2;
};

// The exchange's communicators carry device buffers (comm/communicator.hpp), except
// expert_control.
struct MoeExchange {
  Communicator* expert = nullptr;  // all-to-alls (size Ep); null: Ep = 1
  Communicator* tensor = nullptr;  // expert tensor parallelism and DTD (size T); null: T = 1
  // DTD, reduce-scatter, split experts and the overlap's chunks (exchange_plan.hpp). Overlap:
  // every collective of the exchange in chunks along the capacity each rank sends; chunk c's
  // experts run while chunk c + 1's dispatch all-to-all and the earlier chunks' returns are in
  // flight (nonblocking; on the CPU the experts run one block at a time and let MPI progress in
  // between). The same bytes in n times the calls; buffers hold the chunks one after the other,
  // so memory is as without overlap.
  ExchangeSwitches switches;
  bool keep_stash = false;       // CAC, first forward: keep the all-to-all outputs
  bool reuse_stash = false;      // CAC, recompute: use them instead of communicating
  bool stash_reduction = false;  // CAC also keeps the expert output's tensor reduction
  // The expert group's host MPI communicator (TedGroups::control), outside the ledger: for the
  // dropless capacity the group agrees on, and for the slots each routing filled per expert, so
  // the experts leave the empty ones out. Needed with `expert` and dropless; without it the
  // experts run on every slot.
  Communicator* expert_control = nullptr;
};

template <typename T>
struct MoeActivations {
  routing::Routing<master_t<T>> routing;
  ExchangePlan plan;     // the layer's exchange at the routing's capacity
  Tensor<T> dispatched;  // [E, Cp, h]
  // [Ep, E/Ep, R, h] what this rank's experts compute on (R = Cp, or Cp/T unsplit)
  Tensor<T> expert_in;
  Tensor<T> hidden;           // [Ep, E/Ep, R, f/T] before GeLU
  Tensor<T> activated;        // [Ep, E/Ep, R, f/T]
  Tensor<T> returned;         // [E, Cp, h] expert outputs back at the tokens' rank
  Tensor<T> dispatch_stash;   // CAC: the dispatch all-to-all's output
  Tensor<T> return_stash;     // CAC: the return all-to-all's output
  Tensor<T> reduction_stash;  // CAC with stash_reduction: the tensor-reduced expert output
  // Host, one per block of expert_in: the slots its source's routing filled for its expert (the
  // expert group exchanges them over expert_control), so the experts leave the empty ones out.
  // A source whose backend does not report them (Routing::kept) sends "every row", and one
  // process without counts leaves this empty: those rows are all computed. CAC keeps it with
  // the stash, as the recompute does not communicate.
  std::vector<std::int32_t> block_kept;
};

struct MoeShape {
  int tokens;
  int hidden;
  int ffn_local;  // f / T (f when experts are not split)
  int experts;    // E, all of them
};

// Overwrites y [tokens, h]; fills acts. Returns the group's routing statistics (aux loss and
// dropped choices) when `read_stats` (a read-back that waits for the device; the checkpoint
// recompute, which already has them, skips it), else zeros.
template <typename T>
routing::RoutingStats moe_forward(Ops<T>& ops, const T* x, T* y, const MoeShape& shape,
                                  const routing::GateConfig& config, const routing::RoutingKey& key,
                                  const MoeParams<T>& params, const MoeExchange& exchange,
                                  MoeActivations<T>& acts, bool read_stats = true);

// Accumulates into dx and the gradients; aux_scale multiplies d aux (aux_coeff x loss scale).
template <typename T>
void moe_backward(Ops<T>& ops, const T* x, const T* dy, T* dx, const MoeShape& shape,
                  const MoeParams<T>& params, const MoeExchange& exchange,
                  const MoeActivations<T>& acts, master_t<T> aux_scale,
                  const MoeGrads<master_t<T>>& grads);

// GEMM FLOPs of this rank's share of the layer's forward (backward is twice this).
double moe_forward_flops(const MoeShape& shape, int local_expert_rows);

}  // namespace ted::model
