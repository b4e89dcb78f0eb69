#include "ted/model/exchange.hpp"

#include <algorithm>
#include <limits>

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

// A chunk's own plan: the layer's, with the sent capacity cut to the chunk's rows.
ExchangePlan chunk_plan(const ExchangePlan& p, int rows) {
  ExchangePlan q = p;
  q.Cs = rows;
  q.Cp = p.slicing ? rows * p.T : rows;
  q.C = q.Cp;
  q.chunks = 1;
  return q;
}

// The buffers of the exchange hold their chunks one after the other, each [blocks, mult x rows
// of the chunk, width]: where chunk c starts.
std::size_t chunk_at(const ExchangePlan& p, int c, int mult, int width) {
  return p.blocks() * static_cast<std::size_t>(mult) * static_cast<std::size_t>(p.chunk_begin(c)) *
         static_cast<std::size_t>(width);
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

// [T, blocks, Cs, h] (tensor-rank major) <- [blocks, Cp, h] (capacity slice tt at rows tt*Cs).
template <typename T>
void full_to_rank_major(Device& device, const T* full, T* ranks, const ExchangePlan& p,
                        std::size_t blocks) {
  const std::size_t chunk = static_cast<std::size_t>(p.Cs) * p.h;
  for (int tt = 0; tt < p.T; ++tt)
    device.copy_2d(ranks + static_cast<std::size_t>(tt) * blocks * chunk, chunk * sizeof(T),
                   full + static_cast<std::size_t>(tt) * chunk, p.Cp * p.h * sizeof(T),
                   chunk * sizeof(T), blocks);
}

// All-gather of capacity slices in the tensor group: [blocks, Cs, h] -> [blocks, Cp, h].
template <typename T>
void gather_slices(Device& device, Communicator* tensor, const T* slice, T* full,
                   const ExchangePlan& p, std::size_t blocks) {
  std::size_t count = blocks * p.Cs * p.h;
  MemoryScope scope(device, MemoryCategory::communication);
  Tensor<T> ranks(device, count * static_cast<std::size_t>(p.T));
  tensor->all_gather(slice, ranks.data(), count, dtype<T>());
  place_slices(device, ranks.data(), full, p.T, p.Cs, 0, p.Cs, p.Cp, p.h, blocks);
}

void finish(std::unique_ptr<PendingCollective>& pending) {
  if (pending) pending->wait();
  pending.reset();
}

constexpr std::int32_t kEveryRow = std::numeric_limits<std::int32_t>::max();

}  // namespace

ExchangePlan ExchangeSetup::plan(int experts, int hidden, int ffn, int capacity) const {
  return exchange_plan(experts, hidden, ffn, size_of(expert), size_of(tensor), rank_of(tensor),
                       switches, capacity);
}

int agreed_capacity(const ExchangePlan& routed, const ExchangeSetup& setup, bool dropless,
                    std::size_t stashed) {
  if (!dropless || !setup.expert) return routed.C;
  if (setup.reuse_stash) {  // the stash is [E, sent capacity, h]
    const auto sent = static_cast<int>(stashed / (static_cast<std::size_t>(routed.E) * routed.h));
    const int capacity = routed.slicing ? sent * routed.T : sent;
    TED_CHECK(capacity >= routed.C, "CAC recompute: the stash has fewer slots than the routing");
    return capacity;
  }
  TED_CHECK(setup.expert_control != nullptr,
            "dropless gating over an expert group needs its control communicator");
  int agreed = routed.C;
  setup.expert_control->all_reduce(&agreed, &agreed, 1, DataType::i32, ReduceOp::max);
  return agreed;
}

std::vector<std::int32_t> share_kept_counts(const std::vector<std::int32_t>& kept, int experts,
                                            const ExchangeSetup& setup) {
  if (!setup.expert) return kept;  // one source: block b is expert b
  if (!setup.expert_control) return {};
  std::vector<std::int32_t> mine = kept;
  if (mine.empty()) mine.assign(static_cast<std::size_t>(experts), kEveryRow);
  std::vector<std::int32_t> blocks(mine.size());
  setup.expert_control->all_to_all(mine.data(), blocks.data(),
                                   mine.size() / static_cast<std::size_t>(setup.expert->size()),
                                   DataType::i32);
  return blocks;
}

// The chunk's rows are `mult` segments of its sent rows; segment s holds capacity slots
// first + i, where first is the chunk's start in the capacity slice the segment came from (DTD:
// slice s, gathered for split experts; whole experts: this rank's slice t), and a block's kept
// slots are 0 .. kept - 1.
std::vector<std::int32_t> used_rows(const std::vector<std::int32_t>& kept, const ExchangePlan& p,
                                    const ChunkView& v) {
  if (kept.empty()) return {};
  std::vector<std::int32_t> used(kept.size(), 0);
  const int rows = p.chunk_rows(v.index), mult = p.rows_per_sent_row();
  for (std::size_t b = 0; b < kept.size(); ++b)
    for (int s = 0; s < mult; ++s) {
      const int slice = p.slicing ? (p.split ? s : p.t) : 0;
      const long long first = static_cast<long long>(slice) * p.Cs + p.chunk_begin(v.index);
      const auto in_segment = static_cast<int>(std::clamp<long long>(kept[b] - first, 0, rows));
      if (in_segment > 0) used[b] = s * rows + in_segment;
    }
  return used;
}

void InFlight::progress() {
  for (auto* list : {&first, &second})
    for (auto& one : *list)
      if (one) one->progress();
}

template <typename T>
ChunkPipeline<T>::ChunkPipeline(Device& device, const ExchangeSetup& setup,
                                const ExchangePlan& plan)
    : device_(device), setup_(setup), p_(plan) {}

template <typename T>
bool ChunkPipeline<T>::block_by_block() const {
  return p_.chunks > 1 && setup_.expert != nullptr && device_.kind() == DeviceKind::cpu;
}

template <typename T>
ChunkView ChunkPipeline<T>::view(int c) const {
  const int mult = p_.rows_per_sent_row();
  return {c,
          chunk_plan(p_, p_.chunk_rows(c)),
          mult * p_.chunk_rows(c),
          chunk_at(p_, c, 1, p_.h),
          chunk_at(p_, c, mult, p_.h),
          chunk_at(p_, c, mult, p_.f)};
}

template <typename T>
void ChunkPipeline<T>::pack(const T* full, T* sent) const {
  for (int c = 0; c < p_.chunks; ++c)
    take_rows(device_, full, sent + chunk_at(p_, c, 1, p_.h),
              (p_.slicing ? p_.t * p_.Cs : 0) + p_.chunk_begin(c), p_.chunk_rows(c), p_.Cp, p_.h,
              p_.blocks());
}

template <typename T>
T* ChunkPipeline<T>::all_to_all_output(std::size_t count, Tensor<T>& stash,
                                       Tensor<T>& scratch) const {
  if (setup_.reuse_stash) {
    TED_CHECK(stash.size() == count, "CAC recompute without a stash of the forward's all-to-all");
    return stash.data();
  }
  MemoryScope scope(device_,
                    setup_.keep_stash ? MemoryCategory::cac_stash : MemoryCategory::communication);
  Tensor<T>& into = setup_.keep_stash ? stash : scratch;
  into = Tensor<T>(device_, count);
  return into.data();
}

template <typename T>
void ChunkPipeline<T>::reduce_scatter(const T* partial, T* slice, const ChunkView& v) const {
  const ExchangePlan& q = v.q;
  const std::size_t blocks = p_.blocks(), count = blocks * q.Cs * q.h;
  MemoryScope scope(device_, MemoryCategory::communication);
  Tensor<T> ranks(device_, count * static_cast<std::size_t>(q.T));
  full_to_rank_major(device_, partial, ranks.data(), q, blocks);
  setup_.tensor->reduce_scatter(ranks.data(), slice, count, dtype<T>());
}

template <typename T>
void ChunkPipeline<T>::all_reduce(T* data, std::size_t count) const {
  if (setup_.tensor && setup_.tensor->size() > 1)
    setup_.tensor->all_reduce(data, data, count, dtype<T>());
}

template <typename T>
void ChunkPipeline<T>::take_slice(const T* full, T* slice, const ChunkView& v) const {
  take_rows(device_, full, slice, v.q.t * v.q.Cs, v.q.Cs, v.q.Cp, v.q.h, p_.blocks());
}

// An all-to-all in the expert group of chunk c's rows (a copy on one process): pending, or
// null when done.
template <typename T>
std::unique_ptr<PendingCollective> ChunkPipeline<T>::start(const T* send, T* recv, int c) const {
  const std::size_t count = p_.blocks() * p_.chunk_rows(c) * p_.h / p_.Ep;
  if (setup_.expert) return setup_.expert->all_to_all_start(send, recv, count, dtype<T>());
  copy(device_, recv, send, count * static_cast<std::size_t>(p_.Ep));
  return nullptr;
}

// A chunk's all-to-all output [blocks, rows, h] -> the experts' rows [blocks, Rc, h]:
// all-gathered in the tensor group when split experts share the slices, else as it came.
template <typename T>
void ChunkPipeline<T>::to_expert_rows(const T* arrived, T* rows, const ChunkView& v) const {
  if (p_.slicing && p_.split)
    gather_slices(device_, setup_.tensor, arrived, rows, v.q, p_.blocks());
  else
    copy(device_, rows, arrived, p_.blocks() * v.rows * p_.h);
}

// Chunk c of the second all-to-all's result back into the layer's [blocks, Cp, h] buffer:
// all-gathered in the tensor group when the all-to-alls carried slices (rows tt*Cs +
// begin(c) ...), else copied (rows begin(c) ...).
template <typename T>
void ChunkPipeline<T>::place_chunk(const T* chunk, T* full, int c) const {
  const int rows = p_.chunk_rows(c);
  const std::size_t blocks = p_.blocks();
  if (!p_.slicing) {
    const std::size_t row = static_cast<std::size_t>(p_.h) * sizeof(T);
    device_.copy_2d(full + static_cast<std::size_t>(p_.chunk_begin(c)) * p_.h, p_.Cp * row, chunk,
                    rows * row, rows * row, blocks);
    return;
  }
  std::size_t count = blocks * rows * p_.h;
  MemoryScope scope(device_, MemoryCategory::communication);
  Tensor<T> ranks(device_, count * static_cast<std::size_t>(p_.T));
  setup_.tensor->all_gather(chunk, ranks.data(), count, dtype<T>());
  place_slices(device_, ranks.data(), full, p_.T, rows, p_.chunk_begin(c), p_.Cs, p_.Cp, p_.h,
               blocks);
}

template <typename T>
void ChunkPipeline<T>::run(bool communicate, const T* send, T* arrived, T* expert_rows, T* back,
                           const std::function<T*()>& out, const ChunkWork& work) const {
  InFlight flight(p_.chunks);
  auto start_first = [&](int c) {
    const std::size_t at = chunk_at(p_, c, 1, p_.h);
    if (communicate) flight.first[c] = start(send + at, arrived + at, c);
  };
  start_first(0);
  for (int c = 0; c < p_.chunks; ++c) {
    if (c + 1 < p_.chunks) start_first(c + 1);
    finish(flight.first[c]);
    const ChunkView v = view(c);
    T* rows = expert_rows + v.at_rows;
    to_expert_rows(arrived + v.at, rows, v);
    const T* to_return = work(v, rows, flight);
    if (communicate) flight.second[c] = start(to_return, back + v.at, c);
  }
  T* full = out();
  for (int c = 0; c < p_.chunks; ++c) {
    finish(flight.second[c]);
    place_chunk(back + chunk_at(p_, c, 1, p_.h), full, c);
  }
}

template class ChunkPipeline<float>;
template class ChunkPipeline<double>;
template class ChunkPipeline<Half>;
template class ChunkPipeline<BFloat16>;

}  // namespace ted::model
