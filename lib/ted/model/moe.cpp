#include "ted/model/moe.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/kernels/cpu/layers.hpp"

namespace ted::model {

namespace cpu = ted::kernels::cpu;

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

// [blocks, Cp, h] -> [blocks, Cs, h]: capacity rows t*Cs .. t*Cs + Cs of every block.
template <typename T>
void take_slice(const T* full, T* slice, const Plan& p, std::size_t blocks) {
  const std::size_t row = static_cast<std::size_t>(p.h);
  for (std::size_t b = 0; b < blocks; ++b)
    std::memcpy(slice + b * p.Cs * row,
                full + (b * p.Cp + static_cast<std::size_t>(p.t) * p.Cs) * row,
                static_cast<std::size_t>(p.Cs) * row * sizeof(T));
}

// [T, blocks, Cs, h] (tensor-rank major, as all-gather and reduce-scatter lay it out)
// <-> [blocks, Cp, h] (capacity slice tt at rows tt*Cs).
template <typename T>
void rank_major_to_full(const T* ranks, T* full, const Plan& p, std::size_t blocks) {
  const std::size_t row = static_cast<std::size_t>(p.h), chunk = p.Cs * row;
  for (int tt = 0; tt < p.T; ++tt)
    for (std::size_t b = 0; b < blocks; ++b)
      std::memcpy(full + (b * p.Cp + static_cast<std::size_t>(tt) * p.Cs) * row,
                  ranks + (static_cast<std::size_t>(tt) * blocks + b) * chunk, chunk * sizeof(T));
}

template <typename T>
void full_to_rank_major(const T* full, T* ranks, const Plan& p, std::size_t blocks) {
  const std::size_t row = static_cast<std::size_t>(p.h), chunk = p.Cs * row;
  for (int tt = 0; tt < p.T; ++tt)
    for (std::size_t b = 0; b < blocks; ++b)
      std::memcpy(ranks + (static_cast<std::size_t>(tt) * blocks + b) * chunk,
                  full + (b * p.Cp + static_cast<std::size_t>(tt) * p.Cs) * row, chunk * sizeof(T));
}

// All-to-all in the expert group of `count` elements per peer (a copy on one process).
template <typename T>
void exchange(Communicator* expert, const T* send, T* recv, std::size_t count, int peers) {
  if (expert)
    expert->all_to_all(send, recv, count, dtype<T>());
  else
    std::memcpy(recv, send, count * static_cast<std::size_t>(peers) * sizeof(T));
}

// All-gather of capacity slices in the tensor group: [blocks, Cs, h] -> [blocks, Cp, h].
template <typename T>
void gather_slices(Device& device, Communicator* tensor, const T* slice, T* full, const Plan& p,
                   std::size_t blocks) {
  std::size_t count = blocks * p.Cs * p.h;
  MemoryScope scope(device, MemoryCategory::communication);
  Tensor<T> ranks(device, count * static_cast<std::size_t>(p.T));
  tensor->all_gather(slice, ranks.data(), count, dtype<T>());
  rank_major_to_full(ranks.data(), full, p, blocks);
}

// Reduce-scatter of [blocks, Cp, h] partial sums in the tensor group -> my [blocks, Cs, h].
template <typename T>
void reduce_scatter_slices(Device& device, Communicator* tensor, const T* full, T* slice,
                           const Plan& p, std::size_t blocks) {
  std::size_t count = blocks * p.Cs * p.h;
  MemoryScope scope(device, MemoryCategory::communication);
  Tensor<T> ranks(device, count * static_cast<std::size_t>(p.T));
  full_to_rank_major(full, ranks.data(), p, blocks);
  tensor->reduce_scatter(ranks.data(), slice, count, dtype<T>());
}

template <typename T>
void tensor_all_reduce(Communicator* tensor, T* data, std::size_t count) {
  if (tensor && tensor->size() > 1) tensor->all_reduce(data, data, count, dtype<T>());
}

// out rows of block b (local expert b mod El) += b2[expert].
template <typename T>
void add_expert_bias(T* out, const T* b2, const Plan& p, std::size_t blocks, int rows) {
  for (std::size_t b = 0; b < blocks; ++b) {
    const T* bias = b2 + (b % static_cast<std::size_t>(p.El)) * p.h;
    for (int r = 0; r < rows; ++r) {
      T* row = out + (b * rows + static_cast<std::size_t>(r)) * p.h;
      for (int j = 0; j < p.h; ++j) row[j] += bias[j];
    }
  }
}

}  // namespace

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
  exchange(x.expert, send, scratch.data(), count / static_cast<std::size_t>(peers), peers);
  if (!x.keep_stash) return scratch.data();
  stash = std::move(scratch);
  return stash.data();
}

template <typename T>
T moe_forward(Device& device, const T* x, T* y, const MoeShape& shape, const GateConfig& config,
              const RoutingKey& key, const MoeParams<T>& params, const MoeExchange& exchange_cfg,
              MoeActivations<T>& acts) {
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  std::vector<T> logits(static_cast<std::size_t>(S) * E);
  cpu::linear_forward<T>(x, params.gate, nullptr, logits.data(), S, h, E);
  acts.routing = route(logits.data(), S, config, key);
  const Routing<T>& r = acts.routing;
  const Plan p = make_plan(shape, exchange_cfg, r.capacity);
  acts.padded_capacity = p.Cp;
  const std::size_t blocks = p.blocks(), K = static_cast<std::size_t>(r.top_k);
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  acts.dispatched = zeros<T>(device, full);
  for (int s = 0; s < S; ++s)
    for (std::size_t k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      std::size_t row = static_cast<std::size_t>(r.expert[index]) * p.Cp + r.slot[index];
      std::copy(x + static_cast<std::size_t>(s) * h, x + static_cast<std::size_t>(s + 1) * h,
                acts.dispatched.data() + row * h);
    }

  // Dispatch exchange: [E, Cp, h] -> this rank's experts' [Ep, El, Cp, h].
  Tensor<T> send;
  const T* to_send = acts.dispatched.data();
  if (p.slicing) {
    MemoryScope scope(device, MemoryCategory::communication);
    send = Tensor<T>(device, sent);
    take_slice(acts.dispatched.data(), send.data(), p, blocks);
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
    std::memcpy(acts.expert_in.data(), arrived, rows * sizeof(T));

  // Experts: W1 column-parallel, GeLU, W2 row-parallel (partial sums over the tensor group).
  const std::size_t hidden_size = blocks * R * p.f;
  acts.hidden = Tensor<T>(device, hidden_size);
  acts.activated = Tensor<T>(device, hidden_size);
  Tensor<T> partial(device, rows);
  for (std::size_t b = 0; b < blocks; ++b) {
    std::size_t le = b % static_cast<std::size_t>(p.El);
    cpu::linear_forward<T>(acts.expert_in.data() + b * R * h, params.w1 + le * h * p.f,
                           params.b1 + le * p.f, acts.hidden.data() + b * R * p.f, R, h, p.f);
    cpu::gelu_forward<T>(acts.hidden.data() + b * R * p.f, acts.activated.data() + b * R * p.f,
                         static_cast<std::int64_t>(R) * p.f);
    cpu::linear_forward<T>(acts.activated.data() + b * R * p.f, params.w2 + le * p.f * h, nullptr,
                           partial.data() + b * R * h, R, p.f, h);
  }

  // Reduce over the tensor group and send back: [Ep, El, Cx, h] -> [E, Cx, h]. Under CAC with
  // stash_reduction the forward keeps the reduced output and the recompute reuses it.
  auto reduce_or_reuse = [&](T* data, std::size_t count, auto&& reduce) {
    if (exchange_cfg.stash_reduction && exchange_cfg.reuse_stash) {
      TED_CHECK(acts.reduction_stash.size() == count, "CAC recompute without a reduction stash");
      std::copy(acts.reduction_stash.data(), acts.reduction_stash.data() + count, data);
      return;
    }
    reduce();
    if (exchange_cfg.stash_reduction && exchange_cfg.keep_stash) {
      MemoryScope scope(device, MemoryCategory::cac_stash);
      acts.reduction_stash = Tensor<T>(device, count);
      std::copy(data, data + count, acts.reduction_stash.data());
    }
  };
  Tensor<T> back;
  const T* to_return = partial.data();
  if (!p.split) {  // whole experts on my slice: nothing to reduce
    add_expert_bias(partial.data(), params.b2, p, blocks, R);
  } else if (p.reduce_scatter) {
    {
      MemoryScope scope(device, MemoryCategory::communication);
      back = Tensor<T>(device, sent);
    }
    reduce_or_reuse(back.data(), sent, [&] {
      reduce_scatter_slices(device, exchange_cfg.tensor, partial.data(), back.data(), p, blocks);
    });
    add_expert_bias(back.data(), params.b2, p, blocks, p.Cs);
    to_return = back.data();
  } else {
    reduce_or_reuse(partial.data(), full,
                    [&] { tensor_all_reduce(exchange_cfg.tensor, partial.data(), full); });
    add_expert_bias(partial.data(), params.b2, p, blocks, p.Cp);
    if (p.slicing) {
      MemoryScope scope(device, MemoryCategory::communication);
      back = Tensor<T>(device, sent);
      take_slice(partial.data(), back.data(), p, blocks);
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
    std::memcpy(acts.returned.data(), came_back, full * sizeof(T));

  std::fill(y, y + static_cast<std::size_t>(S) * h, T(0));
  for (int s = 0; s < S; ++s)
    for (std::size_t k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      const T* out = acts.returned.data() +
                     (static_cast<std::size_t>(r.expert[index]) * p.Cp + r.slot[index]) * h;
      T w = r.weight[index];
      T* row = y + static_cast<std::size_t>(s) * h;
      for (int j = 0; j < h; ++j) row[j] += w * out[j];
    }
  return r.aux;
}

template <typename T>
void moe_backward(Device& device, const T* x, const T* dy, T* dx, const MoeShape& shape,
                  const MoeParams<T>& params, const MoeExchange& exchange_cfg,
                  const MoeActivations<T>& acts, T aux_scale, const MoeGrads<T>& grads) {
  const Routing<T>& r = acts.routing;
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  const Plan p = make_plan(shape, exchange_cfg, r.capacity);
  const std::size_t blocks = p.blocks(), K = static_cast<std::size_t>(r.top_k);
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  // Combine backward: gradient of each used slot, and of each combine weight.
  Tensor<T> d_returned = zeros<T>(device, full);
  std::vector<T> d_weight(static_cast<std::size_t>(S) * K, T(0));
  for (int s = 0; s < S; ++s)
    for (std::size_t k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      std::size_t row = static_cast<std::size_t>(r.expert[index]) * p.Cp + r.slot[index];
      const T* g = dy + static_cast<std::size_t>(s) * h;
      const T* out = acts.returned.data() + row * h;
      T* d = d_returned.data() + row * h;
      T w = r.weight[index], dot = 0;
      for (int j = 0; j < h; ++j) {
        d[j] = w * g[j];
        dot += g[j] * out[j];
      }
      d_weight[index] = dot;
    }

  // Return exchange backward: my slice, all-to-all, then all-gather (the slice's gradient).
  Tensor<T> d_slice, d_back;
  {
    MemoryScope scope(device, MemoryCategory::communication);
    d_slice = Tensor<T>(device, sent);
    d_back = Tensor<T>(device, sent);
  }
  if (p.slicing)
    take_slice(d_returned.data(), d_slice.data(), p, blocks);
  else
    std::memcpy(d_slice.data(), d_returned.data(), full * sizeof(T));
  exchange(exchange_cfg.expert, d_slice.data(), d_back.data(), sent / p.Ep, p.Ep);
  const int R = p.expert_rows();
  const std::size_t rows = blocks * R * h;
  Tensor<T> d_out(device, rows);
  if (p.slicing && p.split)
    gather_slices(device, exchange_cfg.tensor, d_back.data(), d_out.data(), p, blocks);
  else
    std::memcpy(d_out.data(), d_back.data(), rows * sizeof(T));

  // Experts backward.
  Tensor<T> d_hidden(device, blocks * R * p.f), d_in = zeros<T>(device, rows);
  for (std::size_t b = 0; b < blocks; ++b) {
    std::size_t le = b % static_cast<std::size_t>(p.El);
    T* dh = d_hidden.data() + b * R * p.f;
    std::fill(dh, dh + static_cast<std::size_t>(R) * p.f, T(0));
    cpu::linear_backward<T>(acts.activated.data() + b * R * p.f, params.w2 + le * p.f * h,
                            d_out.data() + b * R * h, dh, grads.w2 + le * p.f * h,
                            grads.b2 + le * h, R, p.f, h);
    cpu::gelu_backward<T>(acts.hidden.data() + b * R * p.f, dh, dh,
                          static_cast<std::int64_t>(R) * p.f);
    cpu::linear_backward<T>(acts.expert_in.data() + b * R * h, params.w1 + le * h * p.f, dh,
                            d_in.data() + b * R * h, grads.w1 + le * h * p.f, grads.b1 + le * p.f,
                            R, h, p.f);
  }

  // Dispatch exchange backward: sum the column-parallel input gradient over the tensor group,
  // my slice, all-to-all back, all-gather.
  if (!p.split) {  // whole experts: the slice's input gradient is complete
    std::memcpy(d_slice.data(), d_in.data(), rows * sizeof(T));
  } else if (p.reduce_scatter) {
    reduce_scatter_slices(device, exchange_cfg.tensor, d_in.data(), d_slice.data(), p, blocks);
  } else {
    tensor_all_reduce(exchange_cfg.tensor, d_in.data(), full);
    if (p.slicing)
      take_slice(d_in.data(), d_slice.data(), p, blocks);
    else
      std::memcpy(d_slice.data(), d_in.data(), full * sizeof(T));
  }
  exchange(exchange_cfg.expert, d_slice.data(), d_back.data(), sent / p.Ep, p.Ep);
  Tensor<T> d_dispatched(device, full);
  if (p.slicing)
    gather_slices(device, exchange_cfg.tensor, d_back.data(), d_dispatched.data(), p, blocks);
  else
    std::memcpy(d_dispatched.data(), d_back.data(), full * sizeof(T));

  // Dispatch backward: each kept choice returns its slot's gradient to its token.
  for (int s = 0; s < S; ++s)
    for (std::size_t k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      const T* d = d_dispatched.data() +
                   (static_cast<std::size_t>(r.expert[index]) * p.Cp + r.slot[index]) * h;
      T* row = dx + static_cast<std::size_t>(s) * h;
      for (int j = 0; j < h; ++j) row[j] += d[j];
    }

  // Gate backward: through the combine weights and the aux loss into the logits, then Wg.
  std::vector<T> d_logits(static_cast<std::size_t>(S) * E);
  route_backward(r, d_weight.data(), aux_scale, d_logits.data());
  cpu::linear_backward<T>(x, params.gate, d_logits.data(), dx, grads.gate, nullptr, S, h, E);
}

double moe_forward_flops(const MoeShape& shape, int local_expert_rows) {
  double gate = 2.0 * shape.tokens * shape.hidden * shape.experts;
  double ffn = 2.0 * 2.0 * static_cast<double>(local_expert_rows) * shape.hidden * shape.ffn_local;
  return gate + ffn;
}

#define TED_INSTANTIATE_MOE(T)                                                                     \
  template T moe_forward<T>(Device&, const T*, T*, const MoeShape&, const GateConfig&,             \
                            const RoutingKey&, const MoeParams<T>&, const MoeExchange&,            \
                            MoeActivations<T>&);                                                   \
  template void moe_backward<T>(Device&, const T*, const T*, T*, const MoeShape&,                  \
                                const MoeParams<T>&, const MoeExchange&, const MoeActivations<T>&, \
                                T, const MoeGrads<T>&);
TED_INSTANTIATE_MOE(float)
TED_INSTANTIATE_MOE(double)

}  // namespace ted::model
