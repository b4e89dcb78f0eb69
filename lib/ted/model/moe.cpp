#include "ted/model/moe.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

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

using Plan = ExchangePlan;

Plan make_plan(const MoeShape& shape, const MoeExchange& x, int capacity) {
  return exchange_plan(shape.experts, shape.hidden, shape.ffn_local, size_of(x.expert),
                       size_of(x.tensor), rank_of(x.tensor), x.switches, capacity);
}

// A chunk's own plan: the layer's, with the sent capacity cut to the chunk's rows.
Plan chunk_plan(const Plan& p, int rows) {
  Plan q = p;
  q.Cs = rows;
  q.Cp = p.slicing ? rows * p.T : rows;
  q.C = q.Cp;
  q.chunks = 1;
  return q;
}

// The buffers of the exchange hold their chunks one after the other, each [blocks, mult x rows
// of the chunk, width]: where chunk c starts.
std::size_t chunk_at(const Plan& k, int c, std::size_t blocks, int mult, int width) {
  return blocks * static_cast<std::size_t>(mult) * static_cast<std::size_t>(k.chunk_begin(c)) *
         static_cast<std::size_t>(width);
}

struct ChunkView {
  Plan q;                         // the chunk's plan
  int Rc;                         // its expert rows per block
  std::size_t at, at_rows, at_f;  // its start in sent-row, expert-row and hidden buffers
};

ChunkView view_of(const Plan& p, const Plan& k, int c, int mult) {
  const std::size_t blocks = p.blocks();
  return {chunk_plan(p, k.chunk_rows(c)), mult * k.chunk_rows(c), chunk_at(k, c, blocks, 1, p.h),
          chunk_at(k, c, blocks, mult, p.h), chunk_at(k, c, blocks, mult, p.f)};
}

template <typename T>
constexpr DataType dtype() {
  return dtype_of<T>::value;
}

template <typename T>
void copy(Device& device, T* dst, const T* src, std::size_t count) {
  device.copy(dst, src, count * sizeof(T));
}

// [blocks, pitch, h] -> [blocks, rows, h]: capacity rows first .. first + rows of every block.
template <typename T>
void take_rows(Device& device, const T* from, T* to, int first, int rows, int pitch, int h,
               std::size_t blocks) {
  const std::size_t row = static_cast<std::size_t>(h) * sizeof(T);
  device.copy_2d(to, rows * row, from + static_cast<std::size_t>(first) * h, pitch * row,
                 rows * row, blocks);
}

// [blocks, Cp, h] -> [blocks, Cs, h]: capacity rows t*Cs .. t*Cs + Cs of every block.
template <typename T>
void take_slice(Device& device, const T* full, T* slice, const Plan& p, std::size_t blocks) {
  take_rows(device, full, slice, p.t * p.Cs, p.Cs, p.Cp, p.h, blocks);
}

// [Tn, blocks, rows, h] (tensor-rank major, as all-gather lays it out) -> rows
// first + tt*stride .. + rows of a [blocks, pitch, h] buffer, for every tensor rank tt.
template <typename T>
void place_slices(Device& device, const T* ranks, T* to, int Tn, int rows, int first, int stride,
                  int pitch, int h, std::size_t blocks) {
  const std::size_t chunk = static_cast<std::size_t>(rows) * h;
  for (int tt = 0; tt < Tn; ++tt)
    device.copy_2d(
        to + (static_cast<std::size_t>(first) + static_cast<std::size_t>(tt) * stride) * h,
        static_cast<std::size_t>(pitch) * h * sizeof(T),
        ranks + static_cast<std::size_t>(tt) * blocks * chunk, chunk * sizeof(T), chunk * sizeof(T),
        blocks);
}

// [T, blocks, Cs, h] (tensor-rank major) <-> [blocks, Cp, h] (capacity slice tt at rows tt*Cs).
template <typename T>
void rank_major_to_full(Device& device, const T* ranks, T* full, const Plan& p,
                        std::size_t blocks) {
  place_slices(device, ranks, full, p.T, p.Cs, 0, p.Cs, p.Cp, p.h, blocks);
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

// The all-to-alls of a chunked exchange, per chunk: the dispatch (or, in backward, the first)
// and the return (the second) ones; the experts let those in flight progress.
struct InFlight {
  std::vector<std::unique_ptr<PendingCollective>> first, second;
  explicit InFlight(int chunks) : first(chunks), second(chunks) {}
  void progress() {
    for (auto* list : {&first, &second})
      for (auto& one : *list)
        if (one) one->progress();
  }
};

// Starts the all-to-all of `exchange`: a pending collective, or null when it is done (one
// process: a copy).
template <typename T>
std::unique_ptr<PendingCollective> exchange_start(Device& device, Communicator* expert,
                                                  const T* send, T* recv, std::size_t count,
                                                  int peers) {
  if (expert) return expert->all_to_all_start(send, recv, count, dtype<T>());
  copy(device, recv, send, count * static_cast<std::size_t>(peers));
  return nullptr;
}

void finish(std::unique_ptr<PendingCollective>& pending) {
  if (pending) pending->wait();
  pending.reset();
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

// A chunk's all-to-all output [blocks, rows, h] -> the experts' rows [blocks, Rc, h]: all-gathered
// in the tensor group when split experts share the slices, else as it came.
template <typename T>
void to_expert_rows(Device& device, Communicator* tensor, const T* arrived, T* rows, const Plan& p,
                    const ChunkView& v) {
  if (p.slicing && p.split)
    gather_slices(device, tensor, arrived, rows, v.q, p.blocks());
  else
    copy(device, rows, arrived, p.blocks() * v.Rc * p.h);
}

// Chunk c of an exchange's result back into the layer's [blocks, Cp, h] buffer: all-gathered
// in the tensor group when the all-to-alls carried slices (rows tt*Cs + begin(c) ...), else
// copied (rows begin(c) ...).
template <typename T>
void place_chunk(Device& device, Communicator* tensor, const T* chunk, T* full, const Plan& p,
                 const Plan& k, int c, std::size_t blocks) {
  const int rows = k.chunk_rows(c);
  if (!p.slicing) {
    const std::size_t row = static_cast<std::size_t>(p.h) * sizeof(T);
    device.copy_2d(full + static_cast<std::size_t>(k.chunk_begin(c)) * p.h, p.Cp * row, chunk,
                   rows * row, rows * row, blocks);
    return;
  }
  std::size_t count = blocks * rows * p.h;
  MemoryScope scope(device, MemoryCategory::communication);
  Tensor<T> ranks(device, count * static_cast<std::size_t>(p.T));
  tensor->all_gather(chunk, ranks.data(), count, dtype<T>());
  place_slices(device, ranks.data(), full, p.T, rows, k.chunk_begin(c), p.Cs, p.Cp, p.h, blocks);
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

// Where an all-to-all's outputs go, all chunks one after the other: under CAC the stash (the
// first forward keeps it, cac_stash; the recompute reads it and does not communicate), else a
// scratch buffer.
template <typename T>
T* exchange_output(Device& device, const MoeExchange& x, std::size_t count, Tensor<T>& stash,
                   Tensor<T>& scratch) {
  if (x.reuse_stash) {
    TED_CHECK(stash.size() == count, "CAC recompute without a stash of the forward's all-to-all");
    return stash.data();
  }
  MemoryScope scope(device,
                    x.keep_stash ? MemoryCategory::cac_stash : MemoryCategory::communication);
  Tensor<T>& into = x.keep_stash ? stash : scratch;
  into = Tensor<T>(device, count);
  return into.data();
}

// Whether the experts run one block at a time with a progress call after each, so that MPI
// moves the all-to-alls in flight meanwhile: a chunked exchange over an expert group, on the CPU
// (a GPU's transfers move by themselves). The memory model counts the scratch this way too.
bool block_by_block(const Plan& k, const MoeExchange& x, const Device& device) {
  return k.chunks > 1 && x.expert != nullptr && device.kind() == DeviceKind::cpu;
}

// Per block of this rank's expert rows [Ep sources, El local experts]: the slots that source's
// routing filled for that expert (Routing::kept), exchanged in the expert group over its
// control communicator (El ints per peer, host MPI, outside the ledger). The tensor ranks route
// the same tokens, so their counts agree. A source whose backend does not report its counts
// sends kEveryRow, and its blocks run on every row; the exchange itself happens whatever the
// ranks report, so that they always make the same calls. Empty when no block has a count (one
// source that reports none, or no control communicator): the experts then run on every row.
constexpr std::int32_t kEveryRow = std::numeric_limits<std::int32_t>::max();

template <typename M>
std::vector<std::int32_t> exchange_kept(const routing::Routing<M>& r, const MoeExchange& x) {
  if (!x.expert) return r.kept;  // one source: block b is expert b
  if (!x.expert_control) return {};
  std::vector<std::int32_t> mine = r.kept;
  if (mine.empty()) mine.assign(static_cast<std::size_t>(r.experts), kEveryRow);
  std::vector<std::int32_t> blocks(mine.size());
  x.expert_control->all_to_all(mine.data(), blocks.data(),
                               mine.size() / static_cast<std::size_t>(x.expert->size()),
                               DataType::i32);
  return blocks;
}

// The rows of each block of chunk c's expert rows that can hold tokens, as a prefix (an upper
// bound when a slice in between is empty). The chunk's rows are `mult` segments of k.chunk_rows(c);
// segment s holds capacity slots first + i, where first is k.chunk_begin(c) in the capacity slice
// the segment came from (DTD: slice s, gathered for split experts; whole experts: this rank's slice
// t), and a block's kept slots are 0 .. kept - 1. Empty when `kept` is.
std::vector<std::int32_t> used_rows(const std::vector<std::int32_t>& kept, const Plan& p,
                                    const Plan& k, int c, int mult) {
  std::vector<std::int32_t> used(kept.size(), 0);
  const int rows = k.chunk_rows(c);
  for (std::size_t b = 0; b < kept.size(); ++b)
    for (int s = 0; s < mult; ++s) {
      const int slice = p.slicing ? (p.split ? s : p.t) : 0;
      const long long first = static_cast<long long>(slice) * p.Cs + k.chunk_begin(c);
      const auto in_segment = static_cast<int>(std::clamp<long long>(kept[b] - first, 0, rows));
      if (in_segment > 0) used[b] = s * rows + in_segment;
    }
  return used;
}

const std::int32_t* or_null(const std::vector<std::int32_t>& v) {
  return v.empty() ? nullptr : v.data();
}

// The experts on one chunk, [Ep, El, R, h] -> partial outputs; `used` as Ops::experts_forward.
template <typename T>
void experts_forward_chunk(Ops<T>& ops, const MoeParams<T>& w, const T* in, T* hidden, T* act,
                           T* out, const Plan& p, int R, const std::int32_t* used, bool by_block,
                           InFlight& flight) {
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

template <typename T, typename M>
void experts_backward_chunk(Ops<T>& ops, const MoeParams<T>& w, const T* in, const T* hidden,
                            const T* act, const T* d_out, T* d_in, const MoeGrads<M>& g,
                            const Plan& p, int R, const std::int32_t* used, bool by_block,
                            InFlight& flight) {
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
int exchange_capacity(const MoeShape& shape, const routing::GateConfig& config,
                      const MoeExchange& x, int routed, const MoeActivations<T>& acts) {
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
routing::RoutingStats moe_forward(Ops<T>& ops, const T* x, T* y, const MoeShape& shape,
                                  const routing::GateConfig& config, const routing::RoutingKey& key,
                                  const MoeParams<T>& params, const MoeExchange& exchange_cfg,
                                  MoeActivations<T>& acts, bool read_stats) {
  using M = master_t<T>;
  Device& device = ops.device();
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  Tensor<M> logits(device, static_cast<std::size_t>(S) * E);
  ops.gate_logits(x, params.gate, logits.data(), S, h, E);
  // A forced workload's choices: worked out on the host from the key alone, so the recompute
  // and every layout get the same ones (routing/workload.hpp).
  routing::RoutingKey route_key = key;
  Tensor<std::int32_t> forced;
  if (config.workload.forced()) {
    std::vector<std::int32_t> choices(static_cast<std::size_t>(S) * config.top_k);
    routing::assign_experts(config.workload, E, config.top_k, key.seed, key.step, key.layer,
                            key.first_token, S, choices.data());
    forced = Tensor<std::int32_t>(device, choices.size());
    device.copy_from_host(forced.data(), choices.data(), choices.size() * sizeof(std::int32_t));
    route_key.forced = forced.data();
  }
  ops.route(logits.data(), S, config, route_key, acts.routing);
  acts.routing.capacity =
      exchange_capacity(shape, config, exchange_cfg, acts.routing.capacity, acts);
  const routing::Routing<M>& r = acts.routing;
  const Plan p = make_plan(shape, exchange_cfg, r.capacity);
  acts.plan = p;
  const std::size_t blocks = p.blocks();
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  acts.dispatched = Tensor<T>(device, full);
  ops.dispatch(x, r, acts.dispatched.data(), h, p.Cp);
  if (!exchange_cfg.reuse_stash) acts.block_kept = exchange_kept(r, exchange_cfg);

  // Dispatch exchange: [E, Cp, h] -> this rank's experts' [Ep, El, R, h], in chunks along the
  // sent capacity (one without overlap). Every buffer holds its chunks one after the other.
  const Plan& k = p;  // its chunks
  const int R = p.expert_rows();
  const int mult = p.slicing && p.split ? p.T : 1;  // expert rows per sent row
  Tensor<T> send;
  const T* to_send = acts.dispatched.data();
  if (p.slicing || k.chunks > 1) {
    MemoryScope scope(device, MemoryCategory::communication);
    send = Tensor<T>(device, sent);
    for (int c = 0; c < k.chunks; ++c)
      take_rows(device, acts.dispatched.data(), send.data() + chunk_at(k, c, blocks, 1, h),
                (p.slicing ? p.t * p.Cs : 0) + k.chunk_begin(c), k.chunk_rows(c), p.Cp, h, blocks);
    to_send = send.data();
  }
  Tensor<T> received;
  T* arrived = exchange_output(device, exchange_cfg, sent, acts.dispatch_stash, received);
  const std::size_t rows = blocks * R * h;
  acts.expert_in = Tensor<T>(device, rows);
  const std::size_t hidden_size = blocks * R * p.f;
  acts.hidden = Tensor<T>(device, hidden_size);
  acts.activated = Tensor<T>(device, hidden_size);
  Tensor<T> partial(device, rows);
  Tensor<T> back;  // the sent slice of the reduced output, when it is not `partial` itself
  if (p.slicing && p.split) {
    MemoryScope scope(device, MemoryCategory::communication);
    back = Tensor<T>(device, sent);
  }
  if (exchange_cfg.stash_reduction && exchange_cfg.keep_stash) {
    MemoryScope scope(device, MemoryCategory::cac_stash);
    acts.reduction_stash = Tensor<T>(device, p.reduce_scatter ? sent : full);
  }
  Tensor<T> returned_slices;
  T* came_back = exchange_output(device, exchange_cfg, sent, acts.return_stash, returned_slices);
  acts.returned = Tensor<T>(device, full);

  const bool communicate = !exchange_cfg.reuse_stash;
  InFlight flight(k.chunks);  // first: the dispatch all-to-alls, second: the returns
  auto start_dispatch = [&](int c) {
    const std::size_t at = chunk_at(k, c, blocks, 1, h);
    if (communicate)
      flight.first[c] = exchange_start(device, exchange_cfg.expert, to_send + at, arrived + at,
                                       blocks * k.chunk_rows(c) * h / p.Ep, p.Ep);
  };
  start_dispatch(0);
  std::size_t reduced_at = 0;  // where chunk c's tensor reduction sits in the reduction stash
  for (int c = 0; c < k.chunks; ++c) {
    if (c + 1 < k.chunks) start_dispatch(c + 1);
    finish(flight.first[c]);
    const ChunkView v = view_of(p, k, c, mult);
    const Plan& q = v.q;
    const int Rc = v.Rc;
    const std::size_t at = v.at, at_rows = v.at_rows, at_f = v.at_f;
    T* in = acts.expert_in.data() + at_rows;
    to_expert_rows(device, exchange_cfg.tensor, arrived + at, in, p, v);

    // Experts: W1 column-parallel, GeLU, W2 row-parallel (partial sums over the tensor group),
    // while the next chunk's dispatch and the earlier chunks' returns are in flight.
    T* out = partial.data() + at_rows;
    const auto used = acts.block_kept.empty() ? std::vector<std::int32_t>{}
                                              : used_rows(acts.block_kept, p, k, c, mult);
    experts_forward_chunk(ops, params, in, acts.hidden.data() + at_f, acts.activated.data() + at_f,
                          out, q, Rc, or_null(used), block_by_block(k, exchange_cfg, device),
                          flight);

    // Reduce over the tensor group and send back: [Ep, El, Rc, h] -> [E, rows, h]. Under CAC
    // with stash_reduction the forward keeps the reduced output and the recompute reuses it.
    auto reduce_or_reuse = [&](T* data, std::size_t count, auto&& reduce) {
      if (!exchange_cfg.stash_reduction) {
        reduce();
        return;
      }
      const std::size_t at_stash = reduced_at;
      reduced_at += count;
      if (exchange_cfg.reuse_stash) {
        TED_CHECK(acts.reduction_stash.size() >= reduced_at,
                  "CAC recompute without a reduction stash");
        copy(device, data, acts.reduction_stash.data() + at_stash, count);
        return;
      }
      reduce();
      if (exchange_cfg.keep_stash)
        copy(device, acts.reduction_stash.data() + at_stash, data, count);
    };
    // out rows of block b (local expert b mod El) += b2[expert].
    auto add_expert_bias = [&](T* rows_out, int block_rows) {
      ops.add_bias(rows_out, params.b2, static_cast<int>(blocks) * block_rows, h, block_rows, p.El);
    };
    const T* to_return = out;
    if (!p.split) {  // whole experts on my slice: nothing to reduce
      add_expert_bias(out, Rc);
    } else if (p.reduce_scatter) {
      reduce_or_reuse(back.data() + at, blocks * k.chunk_rows(c) * h, [&] {
        reduce_scatter_slices(device, exchange_cfg.tensor, out, back.data() + at, q, blocks);
      });
      add_expert_bias(back.data() + at, k.chunk_rows(c));
      to_return = back.data() + at;
    } else {
      const std::size_t count = blocks * q.Cp * h;
      reduce_or_reuse(out, count, [&] { tensor_all_reduce(exchange_cfg.tensor, out, count); });
      add_expert_bias(out, q.Cp);
      if (p.slicing) {
        take_slice(device, out, back.data() + at, q, blocks);
        to_return = back.data() + at;
      }
    }
    if (communicate)
      flight.second[c] = exchange_start(device, exchange_cfg.expert, to_return, came_back + at,
                                        blocks * k.chunk_rows(c) * h / p.Ep, p.Ep);
  }
  for (int c = 0; c < k.chunks; ++c) {
    finish(flight.second[c]);
    place_chunk(device, exchange_cfg.tensor, came_back + chunk_at(k, c, blocks, 1, h),
                acts.returned.data(), p, k, c, blocks);
  }

  ops.combine(acts.returned.data(), r, y, h, p.Cp);
  return read_stats ? ops.routing_stats(r) : routing::RoutingStats{};
}

template <typename T>
void moe_backward(Ops<T>& ops, const T* x, const T* dy, T* dx, const MoeShape& shape,
                  const MoeParams<T>& params, const MoeExchange& exchange_cfg,
                  const MoeActivations<T>& acts, master_t<T> aux_scale,
                  const MoeGrads<master_t<T>>& grads) {
  using M = master_t<T>;
  Device& device = ops.device();
  const routing::Routing<M>& r = acts.routing;
  const int S = shape.tokens, E = shape.experts, h = shape.hidden;
  const Plan p = make_plan(shape, exchange_cfg, r.capacity);
  const std::size_t blocks = p.blocks();
  const std::size_t full = blocks * p.Cp * h, sent = blocks * p.sent_capacity() * h;

  // Combine backward: gradient of each used slot, and of each combine weight.
  Tensor<T> d_returned(device, full);
  Tensor<M> d_weight(device, static_cast<std::size_t>(S) * r.top_k);
  ops.combine_backward(acts.returned.data(), dy, r, d_returned.data(), d_weight.data(), h, p.Cp);

  // Return exchange backward: my slice, all-to-all, then all-gather (the slice's gradient);
  // the experts' backward; the dispatch exchange backward: the column-parallel input gradient
  // summed over the tensor group, my slice, all-to-all back, all-gather. Chunked as the forward.
  const Plan& k = p;  // its chunks
  const int R = p.expert_rows();
  const int mult = p.slicing && p.split ? p.T : 1;
  Tensor<T> d_slice, d_back;  // each chunk's region carries both of its exchanges in turn
  {
    MemoryScope scope(device, MemoryCategory::communication);
    d_slice = Tensor<T>(device, sent);
    d_back = Tensor<T>(device, sent);
  }
  for (int c = 0; c < k.chunks; ++c)
    take_rows(device, d_returned.data(), d_slice.data() + chunk_at(k, c, blocks, 1, h),
              (p.slicing ? p.t * p.Cs : 0) + k.chunk_begin(c), k.chunk_rows(c), p.Cp, h, blocks);
  const std::size_t rows = blocks * R * h;
  Tensor<T> d_out(device, rows);
  Tensor<T> d_in(device, rows);
  InFlight flight(k.chunks);  // first: the return exchange's gradient, second: the dispatch's
  auto start_first = [&](int c) {
    const std::size_t at = chunk_at(k, c, blocks, 1, h);
    flight.first[c] = exchange_start(device, exchange_cfg.expert, d_slice.data() + at,
                                     d_back.data() + at, blocks * k.chunk_rows(c) * h / p.Ep, p.Ep);
  };
  start_first(0);
  for (int c = 0; c < k.chunks; ++c) {
    if (c + 1 < k.chunks) start_first(c + 1);
    finish(flight.first[c]);
    const ChunkView v = view_of(p, k, c, mult);
    const Plan& q = v.q;
    const int Rc = v.Rc;
    const std::size_t at = v.at, at_rows = v.at_rows, at_f = v.at_f;
    T* g_out = d_out.data() + at_rows;
    to_expert_rows(device, exchange_cfg.tensor, d_back.data() + at, g_out, p, v);

    T* g_in = d_in.data() + at_rows;
    const auto used = acts.block_kept.empty() ? std::vector<std::int32_t>{}
                                              : used_rows(acts.block_kept, p, k, c, mult);
    experts_backward_chunk(ops, params, acts.expert_in.data() + at_rows, acts.hidden.data() + at_f,
                           acts.activated.data() + at_f, g_out, g_in, grads, q, Rc, or_null(used),
                           block_by_block(k, exchange_cfg, device), flight);

    T* slice = d_slice.data() + at;  // chunk c's first exchange is done with it
    if (!p.split) {                  // whole experts: the slice's input gradient is complete
      copy(device, slice, g_in, blocks * Rc * h);
    } else if (p.reduce_scatter) {
      reduce_scatter_slices(device, exchange_cfg.tensor, g_in, slice, q, blocks);
    } else {
      tensor_all_reduce(exchange_cfg.tensor, g_in, blocks * q.Cp * h);
      if (p.slicing)
        take_slice(device, g_in, slice, q, blocks);
      else
        copy(device, slice, g_in, blocks * q.Cp * h);
    }
    flight.second[c] = exchange_start(device, exchange_cfg.expert, slice, d_back.data() + at,
                                      blocks * k.chunk_rows(c) * h / p.Ep, p.Ep);
  }
  Tensor<T> d_dispatched(device, full);
  for (int c = 0; c < k.chunks; ++c) {
    finish(flight.second[c]);
    place_chunk(device, exchange_cfg.tensor, d_back.data() + chunk_at(k, c, blocks, 1, h),
                d_dispatched.data(), p, k, c, blocks);
  }

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
  template routing::RoutingStats moe_forward<T>(Ops<T>&, const T*, T*, const MoeShape&,            \
                                                const routing::GateConfig&,                        \
                                                const routing::RoutingKey&, const MoeParams<T>&,   \
                                                const MoeExchange&, MoeActivations<T>&, bool);     \
  template void moe_backward<T>(Ops<T>&, const T*, const T*, T*, const MoeShape&,                  \
                                const MoeParams<T>&, const MoeExchange&, const MoeActivations<T>&, \
                                master_t<T>, const MoeGrads<master_t<T>>&);
TED_INSTANTIATE_MOE(float)
TED_INSTANTIATE_MOE(double)
TED_INSTANTIATE_MOE(Half)
TED_INSTANTIATE_MOE(BFloat16)

}  // namespace ted::model
