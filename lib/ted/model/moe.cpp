#include "ted/model/moe.hpp"

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"

namespace ted::model {

namespace {

int size_of(const Communicator* comm) {
  return comm ? comm->size() : 1;
}
int rank_of(const Communicator* comm) {
  return comm ? comm->rank() : 0;
}

// Geometry of one layer's exchange.
struct Plan {
  int E, El, Ep, T, t, h, f, C, Cp, Cs;
  bool slicing;  // on a real tensor group, the all-to-alls carry capacity slice t only
  bool split;    // experts tensor-parallel (else whole experts on the slice)
  bool reduce_scatter;
  std::size_t blocks() const { return static_cast<std::size_t>(Ep) * El; }  // = E
  int sent_capacity() const { return slicing ? Cs : Cp; }
  int expert_rows() const { return split ? Cp : sent_capacity(); }  // R
};

Plan make_plan(const MoeShape& shape, const MoeExchange& x, int capacity) {
  Plan p{};
  p.E = shape.experts;
  p.Ep = size_of(x.expert);
  p.El = p.E / p.Ep;
  p.T = size_of(x.tensor);
  p.t = rank_of(x.tensor);
  p.h = shape.hidden;
  p.f = shape.ffn_local;
  p.C = capacity;
  p.split = x.split_experts || p.T == 1;
  p.slicing = (x.dtd || !p.split) && p.T > 1;
  p.reduce_scatter = p.slicing && p.split && x.reduce_scatter;
  p.Cp = p.slicing ? (capacity + p.T - 1) / p.T * p.T : capacity;
  p.Cs = p.slicing ? p.Cp / p.T : p.Cp;
  return p;
}

template <typename T>
constexpr DataType dtype() {
  return dtype_of<T>::value;
}

template <typename T>
void copy(Device& device, T* dst, const T* src, std::size_t count) {
  device.copy(dst, src, count * sizeof(T));
}

// [blocks, Cp, h] -> [blocks, Cs, h]: capacity rows t*Cs .. t*Cs + Cs of every block.
template <typename T>
void take_slice(Device& device, const T* full, T* slice, const Plan& p, std::size_t blocks) {
  const std::size_t row = static_cast<std::size_t>(p.h) * sizeof(T);
  device.copy_2d(slice, p.Cs * row, full + static_cast<std::size_t>(p.t) * p.Cs * p.h, p.Cp * row,
                 p.Cs * row, blocks);
}

// [T, blocks, Cs, h] (tensor-rank major, as all-gather and reduce-scatter lay it out)
// <-> [blocks, Cp, h] (capacity slice tt at rows tt*Cs).
template <typename T>
void rank_major_to_full(Device& device, const T* ranks, T* full, const Plan& p,
                        std::size_t blocks) {
  const std::size_t chunk = static_cast<std::size_t>(p.Cs) * p.h;
  for (int tt = 0; tt < p.T; ++tt)
    device.copy_2d(full + static_cast<std::size_t>(tt) * chunk, p.Cp * p.h * sizeof(T),
                   ranks + static_cast<std::size_t>(tt) * blocks * chunk, chunk * sizeof(T),
                   chunk * sizeof(T), blocks);
}

template <typename T>
void full_to_rank_major(Device& device, const T* full, T* ranks, const Plan& p,
                        std::size_t blocks) {
  const std::size_t chunk = static_cast<std::size_t>(p.Cs) * p.h;
  for (int tt = 0; tt < p.T; ++tt)
    device.copy_2d(ranks + static_cast<std::size_t>(tt) * blocks * chunk, chunk * sizeof(T),
                   full + static_cast<std::size_t>(tt) * chunk, p.Cp * p.h * sizeof(T),
                   chunk * sizeof(T), blocks);
}

// All-to-all in the expert group of `count` elements per peer (a copy on one process).
template <typename T>
void exchange(Device& device, Communicator* expert, const T* send, T* recv, std::size_t count,
              int peers) {
  if (expert)
    expert->all_to_all(send, recv, count, dtype<T>());
  else
    copy(device, recv, send, count * static_cast<std::size_t>(peers));
}

// All-gather of capacity slices in the tensor group: [blocks, Cs, h] -> [blocks, Cp, h].
template <typename T>
void gather_slices(Device& device, Communicator* tensor, const T* slice, T* full, const Plan& p,
                   std::size_t blocks) {
  std::size_t count = blocks * p.Cs * p.h;
  MemoryScope scope(device, MemoryCategory::communication);
  Tensor<T> ranks(device, count * static_cast<std::size_t>(p.T));
  tensor->all_gather(slice, ranks.data(), count, dtype<T>());
  rank_major_to_full(device, ranks.data(), full, p, blocks);
}

// Reduce-scatter of [blocks, Cp, h] partial sums in the tensor group -> my [blocks, Cs, h].
template <typename T>
void reduce_scatter_slices(Device& device, Communicator* tensor, const T* full, T* slice,
                           const Plan& p, std::size_t blocks) {
  std::size_t count = blocks * p.Cs * p.h;
  MemoryScope scope(device, MemoryCategory::communication);
  Tensor<T> ranks(device, count * static_cast<std::size_t>(p.T));
  full_to_rank_major(device, full, ranks.data(), p, blocks);
  tensor->reduce_scatter(ranks.data(), slice, count, dtype<T>());
}

template <typename T>
void tensor_all_reduce(Communicator* tensor, T* data, std::size_t count) {
  if (tensor && tensor->size() > 1) tensor->all_reduce(data, data, count, dtype<T>());
}

// An all-to-all of the exchange, or under CAC its stash: the first forward keeps the output
// (cac_stash), the recompute reads it instead of communicating. Returns where the data is;
// `scratch` holds it when there is no stash.
template <typename T>
const T* all_to_all_or_stash(Device& device, const MoeExchange& x, const T* send, std::size_t count,
                             int peers, Tensor<T>& stash, Tensor<T>& scratch) {
  if (x.reuse_stash) {
    TED_CHECK(stash.size() == count, "CAC recompute without a stash of the forward's all-to-all");
    return stash.data();
  }
  MemoryScope scope(device,
                    x.keep_stash ? MemoryCategory::cac_stash : MemoryCategory::communication);
  scratch = Tensor<T>(device, count);
  exchange(device, x.expert, send, scratch.data(), count / static_cast<std::size_t>(peers), peers);
  if (!x.keep_stash) return scratch.data();
  stash = std::move(scratch);
  return stash.data();
}

// Under CAC the recompute's all-to-all outputs come from the stash, [E, sent capacity, h], and
// so does their capacity: the forward's (padded to a multiple of T when sliced, which plans to
// itself), found without communicating.
template <typename T>
int stashed_capacity(const MoeShape& shape, const MoeExchange& x, int routed,
                     const MoeActivations<T>& acts) {
  const std::size_t row = static_cast<std::size_t>(shape.experts) * shape.hidden;
  const auto sent = static_cast<int>(acts.dispatch_stash.size() / row);
  const int capacity = make_plan(shape, x, routed).slicing ? sent * size_of(x.tensor) : sent;
  TED_CHECK(capacity >= routed, "CAC recompute: the stash has fewer slots than the routing");
  return capacity;
}

// The capacity the exchange's buffers are sized by, the same on every member of the expert
// group, whose all-to-alls move equal blocks. With drops it follows from the config alone.
// Dropless, each routing took its own largest load, so the group agrees on the largest; a
// larger capacity only adds empty slots, so every routing stands as it is. The tensor ranks
// route the same tokens, and their expert groups hold the same micro-batches, so every expert
// group of a tensor group agrees on the same value and DTD's slices line up.
template <typename T>
int exchange_capacity(const MoeShape& shape, const GateConfig& config, const MoeExchange& x,
                      int routed, const MoeActivations<T>& acts) {
  if (!config.dropless || !x.expert) return routed;
  if (x.reuse_stash) return stashed_capacity(shape, x, routed, acts);
  TED_CHECK(x.expert_control != nullptr,
            "dropless gating over an expert group needs its control communicator");
  int agreed = routed;
  x.expert_control->all_reduce(&agreed, &agreed, 1, DataType::i32, ReduceOp::max);
  return agreed;
}

}  // namespace

template <typename T>
RoutingStats moe_forward(Ops<T>& ops, const T* x, T* y, const MoeShape& shape,
                         const GateConfig& config, const RoutingKey& key,
                         const MoeParams<T>& params, const MoeExchange& exchange_cfg,
                         MoeActivations<T>& acts, bool read_stats) {
  using M = master_t<T>;
  Device& device = ops.device();
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  Tensor<M> logits(device, static_cast<std::size_t>(S) * E);
  ops.gate_logits(x, params.gate, logits.data(), S, h, E);
  ops.route(logits.data(), S, config, key, acts.routing);
  acts.routing.capacity =
      exchange_capacity(shape, config, exchange_cfg, acts.routing.capacity, acts);
  const Routing<M>& r = acts.routing;
  const Plan p = make_plan(shape, exchange_cfg, r.capacity);
  acts.padded_capacity = p.Cp;
  const std::size_t blocks = p.blocks();
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  acts.dispatched = Tensor<T>(device, full);
  ops.dispatch(x, r, acts.dispatched.data(), h, p.Cp);

  // Dispatch exchange: [E, Cp, h] -> this rank's experts' [Ep, El, Cp, h].
  Tensor<T> send;
  const T* to_send = acts.dispatched.data();
  if (p.slicing) {
    MemoryScope scope(device, MemoryCategory::communication);
    send = Tensor<T>(device, sent);
    take_slice(device, acts.dispatched.data(), send.data(), p, blocks);
    to_send = send.data();
  }
  Tensor<T> received;
  const T* arrived =
      all_to_all_or_stash(device, exchange_cfg, to_send, sent, p.Ep, acts.dispatch_stash, received);
  const int R = p.expert_rows();
  const std::size_t rows = blocks * R * h;
  acts.expert_in = Tensor<T>(device, rows);
  if (p.slicing && p.split)
    gather_slices(device, exchange_cfg.tensor, arrived, acts.expert_in.data(), p, blocks);
  else
    copy(device, acts.expert_in.data(), arrived, rows);

  // Experts: W1 column-parallel, GeLU, W2 row-parallel (partial sums over the tensor group).
  const std::size_t hidden_size = blocks * R * p.f;
  acts.hidden = Tensor<T>(device, hidden_size);
  acts.activated = Tensor<T>(device, hidden_size);
  Tensor<T> partial(device, rows);
  ops.experts_forward(acts.expert_in.data(), params.w1, params.b1, params.w2, acts.hidden.data(),
                      acts.activated.data(), partial.data(), p.Ep, p.El, R, h, p.f);

  // Reduce over the tensor group and send back: [Ep, El, Cx, h] -> [E, Cx, h]. Under CAC with
  // stash_reduction the forward keeps the reduced output and the recompute reuses it.
  auto reduce_or_reuse = [&](T* data, std::size_t count, auto&& reduce) {
    if (exchange_cfg.stash_reduction && exchange_cfg.reuse_stash) {
      TED_CHECK(acts.reduction_stash.size() == count, "CAC recompute without a reduction stash");
      copy(device, data, acts.reduction_stash.data(), count);
      return;
    }
    reduce();
    if (exchange_cfg.stash_reduction && exchange_cfg.keep_stash) {
      MemoryScope scope(device, MemoryCategory::cac_stash);
      acts.reduction_stash = Tensor<T>(device, count);
      copy(device, acts.reduction_stash.data(), data, count);
    }
  };
  // out rows of block b (local expert b mod El) += b2[expert].
  auto add_expert_bias = [&](T* out, int block_rows) {
    ops.add_bias(out, params.b2, static_cast<int>(blocks) * block_rows, h, block_rows, p.El);
  };
  Tensor<T> back;
  const T* to_return = partial.data();
  if (!p.split) {  // whole experts on my slice: nothing to reduce
    add_expert_bias(partial.data(), R);
  } else if (p.reduce_scatter) {
    {
      MemoryScope scope(device, MemoryCategory::communication);
      back = Tensor<T>(device, sent);
    }
    reduce_or_reuse(back.data(), sent, [&] {
      reduce_scatter_slices(device, exchange_cfg.tensor, partial.data(), back.data(), p, blocks);
    });
    add_expert_bias(back.data(), p.Cs);
    to_return = back.data();
  } else {
    reduce_or_reuse(partial.data(), full,
                    [&] { tensor_all_reduce(exchange_cfg.tensor, partial.data(), full); });
    add_expert_bias(partial.data(), p.Cp);
    if (p.slicing) {
      MemoryScope scope(device, MemoryCategory::communication);
      back = Tensor<T>(device, sent);
      take_slice(device, partial.data(), back.data(), p, blocks);
      to_return = back.data();
    }
  }
  Tensor<T> returned_slices;
  const T* came_back = all_to_all_or_stash(device, exchange_cfg, to_return, sent, p.Ep,
                                           acts.return_stash, returned_slices);
  acts.returned = Tensor<T>(device, full);
  if (p.slicing)
    gather_slices(device, exchange_cfg.tensor, came_back, acts.returned.data(), p, blocks);
  else
    copy(device, acts.returned.data(), came_back, full);

  ops.combine(acts.returned.data(), r, y, h, p.Cp);
  return read_stats ? ops.routing_stats(r) : RoutingStats{};
}

template <typename T>
void moe_backward(Ops<T>& ops, const T* x, const T* dy, T* dx, const MoeShape& shape,
                  const MoeParams<T>& params, const MoeExchange& exchange_cfg,
                  const MoeActivations<T>& acts, master_t<T> aux_scale,
                  const MoeGrads<master_t<T>>& grads) {
  using M = master_t<T>;
  Device& device = ops.device();
  const Routing<M>& r = acts.routing;
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  const Plan p = make_plan(shape, exchange_cfg, r.capacity);
  const std::size_t blocks = p.blocks();
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  // Combine backward: gradient of each used slot, and of each combine weight.
  Tensor<T> d_returned(device, full);
  Tensor<M> d_weight(device, static_cast<std::size_t>(S) * r.top_k);
  ops.combine_backward(acts.returned.data(), dy, r, d_returned.data(), d_weight.data(), h, p.Cp);

  // Return exchange backward: my slice, all-to-all, then all-gather (the slice's gradient).
  Tensor<T> d_slice, d_back;
  {
    MemoryScope scope(device, MemoryCategory::communication);
    d_slice = Tensor<T>(device, sent);
    d_back = Tensor<T>(device, sent);
  }
  if (p.slicing)
    take_slice(device, d_returned.data(), d_slice.data(), p, blocks);
  else
    copy(device, d_slice.data(), d_returned.data(), full);
  exchange(device, exchange_cfg.expert, d_slice.data(), d_back.data(), sent / p.Ep, p.Ep);
  const int R = p.expert_rows();
  const std::size_t rows = blocks * R * h;
  Tensor<T> d_out(device, rows);
  if (p.slicing && p.split)
    gather_slices(device, exchange_cfg.tensor, d_back.data(), d_out.data(), p, blocks);
  else
    copy(device, d_out.data(), d_back.data(), rows);

  // Experts backward.
  Tensor<T> d_in(device, rows);
  ops.experts_backward(acts.expert_in.data(), params.w1, params.w2, acts.hidden.data(),
                       acts.activated.data(), d_out.data(), d_in.data(), grads.w1, grads.b1,
                       grads.w2, grads.b2, p.Ep, p.El, R, h, p.f);

  // Dispatch exchange backward: sum the column-parallel input gradient over the tensor group,
  // my slice, all-to-all back, all-gather.
  if (!p.split) {  // whole experts: the slice's input gradient is complete
    copy(device, d_slice.data(), d_in.data(), rows);
  } else if (p.reduce_scatter) {
    reduce_scatter_slices(device, exchange_cfg.tensor, d_in.data(), d_slice.data(), p, blocks);
  } else {
    tensor_all_reduce(exchange_cfg.tensor, d_in.data(), full);
    if (p.slicing)
      take_slice(device, d_in.data(), d_slice.data(), p, blocks);
    else
      copy(device, d_slice.data(), d_in.data(), full);
  }
  exchange(device, exchange_cfg.expert, d_slice.data(), d_back.data(), sent / p.Ep, p.Ep);
  Tensor<T> d_dispatched(device, full);
  if (p.slicing)
    gather_slices(device, exchange_cfg.tensor, d_back.data(), d_dispatched.data(), p, blocks);
  else
    copy(device, d_dispatched.data(), d_back.data(), full);

  // Dispatch backward: each kept choice returns its slot's gradient to its token.
  ops.dispatch_backward(d_dispatched.data(), r, dx, h, p.Cp);

  // Gate backward: through the combine weights and the aux loss into the logits, then Wg.
  Tensor<T> d_logits(device, static_cast<std::size_t>(S) * E);
  ops.route_backward(r, d_weight.data(), aux_scale, d_logits.data());
  ops.linear_backward(x, params.gate, d_logits.data(), dx, grads.gate, nullptr, S, h, E);
}

double moe_forward_flops(const MoeShape& shape, int local_expert_rows) {
  double gate = 2.0 * shape.tokens * shape.hidden * shape.experts;
  double ffn = 2.0 * 2.0 * static_cast<double>(local_expert_rows) * shape.hidden * shape.ffn_local;
  return gate + ffn;
}

#define TED_INSTANTIATE_MOE(T)                                                                     \
  template RoutingStats moe_forward<T>(Ops<T>&, const T*, T*, const MoeShape&, const GateConfig&,  \
                                       const RoutingKey&, const MoeParams<T>&, const MoeExchange&, \
                                       MoeActivations<T>&, bool);                                  \
  template void moe_backward<T>(Ops<T>&, const T*, const T*, T*, const MoeShape&,                  \
                                const MoeParams<T>&, const MoeExchange&, const MoeActivations<T>&, \
                                master_t<T>, const MoeGrads<master_t<T>>&);
TED_INSTANTIATE_MOE(float)
TED_INSTANTIATE_MOE(double)
TED_INSTANTIATE_MOE(Half)
TED_INSTANTIATE_MOE(BFloat16)

}  // namespace ted::model
