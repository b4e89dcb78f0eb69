#include "ted/model/moe.hpp"

#include <vector>

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/routing/workload.hpp"

namespace ted::model {

namespace {

const std::int32_t* or_null(const std::vector<std::int32_t>& v) {
  return v.empty() ? nullptr : v.data();
}

// What the routing step leaves alive until the layer's forward returns: the gate's logits and
// a forced workload's choices (their bytes count in the layer's peak).
template <typename T>
struct RouteScratch {
  Tensor<master_t<T>> logits;
  Tensor<std::int32_t> forced;
};

// Route: the gate's logits (fp32), each token's experts and capacity slots, and the capacity
// the expert group agrees on; the layer's exchange plan at that capacity. A forced workload's
// choices are worked out on the host from the key alone, so the recompute and every layout get
// the same ones (routing/workload.hpp).
template <typename T>
void route_tokens(Ops<T>& ops, const T* x, const MoeShape& shape, const routing::GateConfig& config,
                  const routing::RoutingKey& key, const T* gate, const ExchangeSetup& setup,
                  MoeActivations<T>& acts, RouteScratch<T>& scratch) {
  Device& device = ops.device();
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  scratch.logits = Tensor<master_t<T>>(device, static_cast<std::size_t>(S) * E);
  ops.gate_logits(x, gate, scratch.logits.data(), S, h, E);
  routing::RoutingKey route_key = key;
  if (config.workload.forced()) {
    std::vector<std::int32_t> choices(static_cast<std::size_t>(S) * config.top_k);
    routing::assign_experts(config.workload, E, config.top_k, key.seed, key.step, key.layer,
                            key.first_token, S, choices.data());
    scratch.forced = Tensor<std::int32_t>(device, choices.size());
    device.copy_from_host(scratch.forced.data(), choices.data(),
                          choices.size() * sizeof(std::int32_t));
    route_key.forced = scratch.forced.data();
  }
  ops.route(scratch.logits.data(), S, config, route_key, acts.routing);
  const ExchangePlan routed = setup.plan(E, h, shape.ffn, acts.routing.capacity);
  acts.routing.capacity =
      agreed_capacity(routed, setup, config.dropless, acts.dispatch_stash.size());
  acts.plan = routed.at_capacity(acts.routing.capacity);
}

// The forward's exchange buffers besides the activations, allocated in this order: what this
// rank sends (when it is not the dispatch buffer itself), the dispatch all-to-all's output
// (under CAC the stash), the experts' partial outputs, the sent slice of their reduction (when
// it is not `partial` itself), CAC's reduction stash, the return all-to-all's output. Packed
// into `send`, the dispatch buffer is released at once; sent as it is, once the exchange is done.
template <typename T>
struct ForwardBuffers {
  Tensor<T> send, received, partial, back, returned_slices;
  const T* to_send = nullptr;
  T* arrived = nullptr;
  T* came_back = nullptr;

  ForwardBuffers(Device& device, const ChunkPipeline<T>& pipe, const ExchangeSetup& setup,
                 Tensor<T>& dispatched, MoeActivations<T>& acts) {
    const ExchangePlan& p = pipe.plan();
    const std::size_t blocks = p.blocks(), full = blocks * p.Cp * p.h;
    const std::size_t sent = blocks * p.sent_capacity() * p.h,
                      rows = blocks * p.expert_rows() * p.h;
    to_send = dispatched.data();
    if (p.slicing || p.chunks > 1) {
      {
        MemoryScope scope(device, MemoryCategory::communication);
        send = Tensor<T>(device, sent);
      }
      pipe.pack(dispatched.data(), send.data());
      to_send = send.data();
      dispatched = Tensor<T>();
    }
    arrived = pipe.all_to_all_output(sent, acts.dispatch_stash, received);
    acts.expert_in = Tensor<T>(device, rows);
    acts.hidden = Tensor<T>(device, blocks * p.expert_rows() * p.f);
    acts.activated = Tensor<T>(device, blocks * p.expert_rows() * p.f);
    partial = Tensor<T>(device, rows);
    if (p.slicing && p.split) {
      MemoryScope scope(device, MemoryCategory::communication);
      back = Tensor<T>(device, sent);
    }
    if (setup.stash_reduction && setup.keep_stash) {
      MemoryScope scope(device, MemoryCategory::cac_stash);
      acts.reduction_stash = Tensor<T>(device, p.reduce_scatter ? sent : full);
    }
    came_back = pipe.all_to_all_output(sent, acts.return_stash, returned_slices);
    acts.returned = Tensor<T>(device, full);
  }
};

// The experts on one chunk, [Ep, El, R, h] -> partial outputs; `used` as Ops::experts_forward.
// Block by block (ChunkPipeline::block_by_block), each followed by a progress call.
template <typename T>
void experts_forward_chunk(Ops<T>& ops, const MoeParams<T>& w, const T* in, T* hidden, T* act,
                           T* out, const ExchangePlan& p, int R,
                           const std::vector<std::int32_t>& used_rows, bool by_block,
                           InFlight& flight) {
  const std::int32_t* used = or_null(used_rows);
  if (!by_block) {
    ops.experts_forward(in, w.w1, w.b1, w.w2, hidden, act, out, p.Ep, p.El, R, p.h, p.f, used);
    return;
  }
  const std::size_t rh = static_cast<std::size_t>(R) * p.h, rf = static_cast<std::size_t>(R) * p.f;
  const std::size_t hf = static_cast<std::size_t>(p.h) * p.f;
  for (std::size_t b = 0; b < p.blocks(); ++b) {
    const std::size_t le = b % static_cast<std::size_t>(p.El);
    ops.experts_forward(in + b * rh, w.w1 + le * hf, w.b1 + le * p.f, w.w2 + le * hf,
                        hidden + b * rf, act + b * rf, out + b * rh, 1, 1, R, p.h, p.f,
                        used ? used + b : nullptr);
    flight.progress();
  }
}

template <typename T>
void experts_backward_chunk(Ops<T>& ops, const MoeParams<T>& w, const T* in, const T* hidden,
                            const T* act, const T* d_out, T* d_in, const MoeGrads<T>& g,
                            const ExchangePlan& p, int R,
                            const std::vector<std::int32_t>& used_rows, bool by_block,
                            InFlight& flight) {
  const std::int32_t* used = or_null(used_rows);
  if (!by_block) {
    ops.experts_backward(in, w.w1, w.w2, hidden, act, d_out, d_in, g.w1, g.b1, g.w2, g.b2, p.Ep,
                         p.El, R, p.h, p.f, used);
    return;
  }
  const std::size_t rh = static_cast<std::size_t>(R) * p.h, rf = static_cast<std::size_t>(R) * p.f;
  const std::size_t hf = static_cast<std::size_t>(p.h) * p.f;
  for (std::size_t b = 0; b < p.blocks(); ++b) {  // sources in order for each expert, as one call
    const std::size_t le = b % static_cast<std::size_t>(p.El);
    ops.experts_backward(in + b * rh, w.w1 + le * hf, w.w2 + le * hf, hidden + b * rf, act + b * rf,
                         d_out + b * rh, d_in + b * rh, g.w1 + le * hf, g.b1 + le * p.f,
                         g.w2 + le * hf, g.b2 + le * p.h, 1, 1, R, p.h, p.f,
                         used ? used + b : nullptr);
    flight.progress();
  }
}

// A chunk's expert output on its way back: the partial sums `out` [Ep, El, Rc, h] reduced over
// the tensor group (all-reduce, or reduce-scatter into `back`), the bias b2 added, this rank's
// capacity slice taken when the all-to-alls carry slices. Returns the rows to send. Under CAC
// with stash_reduction the forward keeps the reduced output in `stash` (at `*stashed`, chunk
// after chunk) and the recompute takes it from there instead of reducing.
template <typename T>
const T* reduce_expert_output(Ops<T>& ops, const ChunkPipeline<T>& pipe, const ExchangeSetup& setup,
                              const T* b2, T* out, T* back, const ChunkView& v, Tensor<T>& stash,
                              std::size_t* stashed) {
  const ExchangePlan& p = pipe.plan();
  Device& device = ops.device();
  auto reduce_or_reuse = [&](T* data, std::size_t count, auto&& reduce) {
    if (!setup.stash_reduction) return reduce();
    const std::size_t at = *stashed;
    *stashed += count;
    if (setup.reuse_stash) {
      TED_CHECK(stash.size() >= *stashed, "CAC recompute without a reduction stash");
      return device.copy(data, stash.data() + at, count * sizeof(T));
    }
    reduce();
    if (setup.keep_stash) device.copy(stash.data() + at, data, count * sizeof(T));
  };
  // Rows of block b (local expert b mod El) += b2[expert].
  auto add_expert_bias = [&](T* rows, int block_rows) {
    ops.add_bias(rows, b2, static_cast<int>(p.blocks()) * block_rows, p.h, block_rows, p.El);
  };
  if (!p.split) {  // whole experts on my slice: nothing to reduce
    add_expert_bias(out, v.rows);
    return out;
  }
  T* slice = back + v.at;
  if (p.reduce_scatter) {
    reduce_or_reuse(slice, p.blocks() * p.chunk_rows(v.index) * p.h,
                    [&] { pipe.reduce_scatter(out, slice, v); });
    add_expert_bias(slice, p.chunk_rows(v.index));
    return slice;
  }
  const std::size_t count = p.blocks() * v.q.Cp * p.h;
  reduce_or_reuse(out, count, [&] { pipe.all_reduce(out, count); });
  add_expert_bias(out, v.q.Cp);
  if (!p.slicing) return out;
  pipe.take_slice(out, slice, v);
  return slice;
}

// The backward of the same step: the column-parallel input gradient `g_in` summed over the
// tensor group, this rank's slice of it in `slice`, ready to go back.
template <typename T>
const T* reduce_input_gradient(Device& device, const ChunkPipeline<T>& pipe, T* g_in, T* slice,
                               const ChunkView& v) {
  const ExchangePlan& p = pipe.plan();
  if (!p.split) {  // whole experts: the slice's input gradient is complete
    device.copy(slice, g_in, p.blocks() * v.rows * p.h * sizeof(T));
  } else if (p.reduce_scatter) {
    pipe.reduce_scatter(g_in, slice, v);
  } else {
    pipe.all_reduce(g_in, p.blocks() * v.q.Cp * p.h);
    if (p.slicing)
      pipe.take_slice(g_in, slice, v);
    else
      device.copy(slice, g_in, p.blocks() * v.q.Cp * p.h * sizeof(T));
  }
  return slice;
}

}  // namespace

template <typename T>
routing::RoutingStats moe_forward(Ops<T>& ops, const T* x, T* y, const MoeShape& shape,
                                  const routing::GateConfig& config, const routing::RoutingKey& key,
                                  const MoeParams<T>& params, const ExchangeSetup& setup,
                                  MoeActivations<T>& acts, bool read_stats) {
  Device& device = ops.device();
  const int h = shape.hidden;
  RouteScratch<T> route;
  route_tokens(ops, x, shape, config, key, params.gate, setup, acts, route);
  const ExchangePlan& p = acts.plan;

  // Dispatch: each kept choice's token into its expert's capacity slot, [E, Cp, h], and the
  // slots each source filled per expert shared in the expert group. The backward does not read
  // it (the dispatch's gradient needs only the routing): it lives until it has been sent.
  Tensor<T> dispatched(device, p.blocks() * p.Cp * h);
  ops.dispatch(x, acts.routing, dispatched.data(), h, p.Cp);
  if (!setup.reuse_stash)
    acts.block_kept = share_kept_counts(acts.routing.kept, acts.routing.experts, setup);

  // Experts, chunk by chunk: the dispatch all-to-all brings [Ep sources, El, R, h] here; W1
  // column-parallel, GeLU, W2 row-parallel (partial sums reduced over the tensor group) while
  // the next chunk's dispatch and the earlier chunks' returns are in flight; the return
  // all-to-all takes the outputs back to [E, Cp, h].
  const ChunkPipeline<T> pipe(device, setup, p);
  ForwardBuffers<T> b(device, pipe, setup, dispatched, acts);
  std::size_t stashed = 0;  // where the next chunk's tensor reduction goes in the stash
  pipe.run(
      !setup.reuse_stash, b.to_send, b.arrived, acts.expert_in.data(), b.came_back,
      [&] { return acts.returned.data(); },
      [&](const ChunkView& v, T* in, InFlight& flight) {
        T* out = b.partial.data() + v.at_rows;
        experts_forward_chunk(ops, params, in, acts.hidden.data() + v.at_f,
                              acts.activated.data() + v.at_f, out, v.q, v.rows,
                              used_rows(acts.block_kept, p, v), pipe.block_by_block(), flight);
        return reduce_expert_output(ops, pipe, setup, params.b2, out, b.back.data(), v,
                                    acts.reduction_stash, &stashed);
      });
  dispatched = Tensor<T>();

  // Combine: y[s] = sum over its kept choices of weight x the expert's output.
  ops.combine(acts.returned.data(), acts.routing, y, h, p.Cp);
  return read_stats ? ops.routing_stats(acts.routing) : routing::RoutingStats{};
}

template <typename T>
void moe_backward(Ops<T>& ops, const T* x, const T* dy, T* dx, const MoeShape& shape,
                  const MoeParams<T>& params, const ExchangeSetup& setup,
                  const MoeActivations<T>& acts, master_t<T> aux_scale, const MoeGrads<T>& grads) {
  using M = master_t<T>;
  Device& device = ops.device();
  const routing::Routing<M>& r = acts.routing;
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  const ExchangePlan& p = acts.plan;  // the forward's (or its recompute's)
  const ChunkPipeline<T> pipe(device, setup, p);
  const std::size_t blocks = p.blocks();
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  // Combine backward: gradient of each used slot, and of each combine weight.
  Tensor<T> d_returned(device, full);
  Tensor<M> d_weight(device, static_cast<std::size_t>(S) * r.top_k);
  ops.combine_backward(acts.returned.data(), dy, r, d_returned.data(), d_weight.data(), h, p.Cp);

  // The exchange backward, chunked as the forward: the return all-to-all's gradient (my slice,
  // all-to-all, all-gather: the slice's gradient), the experts' backward, the dispatch
  // all-to-all's (the column-parallel input gradient summed over the tensor group, my slice,
  // all-to-all back, all-gather). Each chunk's region of d_slice and d_back carries both of
  // its all-to-alls in turn.
  Tensor<T> d_slice, d_back;
  {
    MemoryScope scope(device, MemoryCategory::communication);
    d_slice = Tensor<T>(device, sent);
    d_back = Tensor<T>(device, sent);
  }
  pipe.pack(d_returned.data(), d_slice.data());
  const std::size_t rows = blocks * p.expert_rows() * h;
  Tensor<T> d_out(device, rows);
  Tensor<T> d_in(device, rows);
  Tensor<T> d_dispatched;  // allocated once the experts are done
  pipe.run(
      true, d_slice.data(), d_back.data(), d_out.data(), d_back.data(),
      [&] {
        d_dispatched = Tensor<T>(device, full);
        return d_dispatched.data();
      },
      [&](const ChunkView& v, T* g_out, InFlight& flight) {
        T* g_in = d_in.data() + v.at_rows;
        experts_backward_chunk(ops, params, acts.expert_in.data() + v.at_rows,
                               acts.hidden.data() + v.at_f, acts.activated.data() + v.at_f, g_out,
                               g_in, grads, v.q, v.rows, used_rows(acts.block_kept, p, v),
                               pipe.block_by_block(), flight);
        return reduce_input_gradient(device, pipe, g_in, d_slice.data() + v.at, v);
      });

  // Dispatch backward: each kept choice returns its slot's gradient to its token.
  ops.dispatch_backward(d_dispatched.data(), r, dx, h, p.Cp);

  // Gate backward: through the combine weights and the aux loss into the logits, then Wg.
  Tensor<T> d_logits(device, static_cast<std::size_t>(S) * E);
  ops.route_backward(r, d_weight.data(), aux_scale, d_logits.data());
  ops.linear_backward(x, params.gate, d_logits.data(), dx, grads.gate, nullptr, S, h, E);
}

double moe_forward_flops(const MoeShape& shape, const ExchangePlan& plan) {
  const int local_expert_rows = shape.experts * plan.expert_rows();
  double gate = 2.0 * shape.tokens * shape.hidden * shape.experts;
  double ffn = 2.0 * 2.0 * static_cast<double>(local_expert_rows) * shape.hidden * plan.f;
  return gate + ffn;
}

#define TED_INSTANTIATE_MOE(T)                                                                   \
  template routing::RoutingStats moe_forward<T>(Ops<T>&, const T*, T*, const MoeShape&,          \
                                                const routing::GateConfig&,                      \
                                                const routing::RoutingKey&, const MoeParams<T>&, \
                                                const ExchangeSetup&, MoeActivations<T>&, bool); \
  template void moe_backward<T>(Ops<T>&, const T*, const T*, T*, const MoeShape&,                \
                                const MoeParams<T>&, const ExchangeSetup&,                       \
                                const MoeActivations<T>&, master_t<T>, const MoeGrads<T>&);
TED_INSTANTIATE_MOE(float)
TED_INSTANTIATE_MOE(double)
TED_INSTANTIATE_MOE(Half)
TED_INSTANTIATE_MOE(BFloat16)

}  // namespace ted::model
