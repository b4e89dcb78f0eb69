// The MoE layer's exchange (docs/algorithm.md section 4): how the dispatch buffer's tokens reach
// this rank's experts and how their outputs come back, executing the layer's ExchangePlan
// (exchange_plan.hpp). moe.cpp reads as its steps on top of it; everything here is the identity
// on one process.
//
//   the groups        ExchangeSetup: the expert group (its all-to-alls), the tensor group (DTD's
//                     gathers, the experts' tensor reductions) and the expert group's host
//                     control communicator, with the switches and CAC's use of the stash
//   one all-to-all    all_to_all_start (a PendingCollective; InFlight holds the chunks' ones)
//   the slices        DTD: before each all-to-all rank t keeps capacity slice t (C padded to a
//                     multiple of T) and an all-gather in the tensor group rebuilds the full
//                     buffer after it; the expert output's all-reduce + slice, or reduce-scatter
//   the pipeline      ChunkPipeline::run: per chunk of the sent capacity, its first all-to-all,
//                     the gather to the experts' rows, a callback that runs the chunk's experts
//                     and returns what goes back, its second all-to-all; then every chunk placed
//                     in the layer's [E, Cp, h] buffer. With parallel.overlap > 1 the next
//                     chunk's first all-to-all and the earlier chunks' second ones are in flight
//                     while the experts run (the same bytes in n times the calls; buffers hold
//                     the chunks one after the other, so memory is as without overlap)
//   the agreements    over the expert group's control communicator, outside the ledger: the
//                     dropless capacity (agreed_capacity) and the slots each routing filled per
//                     expert (share_kept_counts), so the experts leave the empty ones out
//
// Split experts (TED): W1 column-parallel (f/T), W2 row-parallel, partial outputs reduced in the
// tensor group. Unsplit (split_experts = false): each tensor rank sends its capacity slice (as
// DTD) and runs whole experts on it, with no tensor reduction; the all-gather after the return
// all-to-all rebuilds the buffer. CAC: the first forward keeps both all-to-alls' outputs (the
// stash) and the checkpoint recompute reads them instead of communicating.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ted/comm/communicator.hpp"
#include "ted/device/tensor.hpp"
#include "ted/model/exchange_plan.hpp"

namespace ted::model {

// What the exchange runs over. The communicators carry device buffers, except expert_control.
struct ExchangeSetup {
  Communicator* expert = nullptr;  // all-to-alls (size Ep); null: Ep = 1
  Communicator* tensor = nullptr;  // tensor parallelism (experts', DTD) (size T); null: T = 1
  // The expert group's host MPI communicator (TedGroups::control), outside the ledger: for the
  // dropless capacity the group agrees on, and for the slots each routing filled per expert.
  // Needed with `expert` and dropless; without it the experts run on every slot.
  Communicator* expert_control = nullptr;
  ExchangeSwitches switches;     // DTD, reduce-scatter, split experts, the overlap's chunks
  bool keep_stash = false;       // CAC, first forward: keep the all-to-all outputs
  bool reuse_stash = false;      // CAC, recompute: use them instead of communicating
  bool stash_reduction = false;  // CAC also keeps the expert output's tensor reduction

  // The plan of a layer of `experts` experts of FFN width `ffn` (f, whole) on `hidden` over
  // these groups, at a routing capacity of `capacity` (this rank's tensor rank).
  ExchangePlan plan(int experts, int hidden, int ffn, int capacity) const;
};

// The capacity the exchange's buffers are sized by, the same on every member of the expert
// group, whose all-to-alls move equal blocks; `routed` is the layer's plan at the routing's
// capacity. With drops it is the routing's. Dropless, each routing took its own largest load, so
// the group agrees on the largest; a larger capacity only adds empty slots, so every routing
// stands as it is. The tensor ranks route the same tokens, and their expert groups hold the same
// micro-batches, so every expert group of a tensor group agrees on the same value and DTD's
// slices line up. Under CAC the recompute finds the forward's from its stash of `stashed`
// elements, without communicating.
int agreed_capacity(const ExchangePlan& routed, const ExchangeSetup& setup, bool dropless,
                    std::size_t stashed);

// Per block of this rank's expert rows [Ep sources, El local experts]: the slots that source's
// routing filled for that expert (`kept`, Routing::kept, [E]), shared in the expert group over
// its control communicator (El ints per peer). The tensor ranks route the same tokens, so
// their counts agree. A source whose backend does not report its counts sends "every row", and
// its blocks run on every row; the all-to-all happens whatever the ranks report, so that they
// always make the same calls. Empty when no block has a count (one source that reports none,
// or no control communicator): the experts then run on every row.
std::vector<std::int32_t> share_kept_counts(const std::vector<std::int32_t>& kept, int experts,
                                            const ExchangeSetup& setup);

// One chunk of the exchange: its own plan (the layer's, with the sent capacity cut to the
// chunk's rows), its expert rows per block, and where it starts in the buffers of sent rows,
// of expert rows and of the experts' hidden activations.
struct ChunkView {
  int index = 0;
  ExchangePlan q;
  int rows = 0;  // Rc: expert rows per block
  std::size_t at = 0, at_rows = 0, at_f = 0;
};

// The rows of each block of a chunk's expert rows that can hold tokens, as a prefix (an upper
// bound when a slice in between is empty), from the blocks' kept slots (share_kept_counts).
// Empty when `kept` is.
std::vector<std::int32_t> used_rows(const std::vector<std::int32_t>& kept, const ExchangePlan& p,
                                    const ChunkView& v);

// The all-to-alls in flight, per chunk: the first (dispatch; in backward the return's gradient)
// and the second ones. The experts call progress() between blocks so that MPI moves them.
struct InFlight {
  std::vector<std::unique_ptr<PendingCollective>> first, second;
  explicit InFlight(int chunks) : first(chunks), second(chunks) {}
  void progress();
};

// The exchange of one layer at one plan, on one device.
template <typename T>
class ChunkPipeline {
 public:
  ChunkPipeline(Device& device, const ExchangeSetup& setup, const ExchangePlan& plan);

  const ExchangePlan& plan() const { return p_; }
  // Whether the experts run one block at a time with a progress call after each, so that MPI
  // moves the all-to-alls in flight meanwhile: a chunked exchange over an expert group, on the
  // CPU (a GPU's transfers move by themselves). The memory model counts the scratch this way.
  bool block_by_block() const;

  // [E, Cp, h] -> what this rank sends, every chunk's rows one after the other: capacity rows
  // of its slice when slicing, chunk by chunk.
  void pack(const T* full, T* sent) const;
  // Where an all-to-all's outputs go, all chunks one after the other: under CAC the stash (the
  // first forward keeps it; the recompute reads it), else `scratch`.
  T* all_to_all_output(std::size_t count, Tensor<T>& stash, Tensor<T>& scratch) const;

  // The tensor group's reduction of a chunk's partial expert outputs `partial` [blocks, Cp_c, h]:
  // reduce-scatter into this rank's slice `slice` [blocks, Cs_c, h].
  void reduce_scatter(const T* partial, T* slice, const ChunkView& v) const;
  // All-reduce in place (nothing on one tensor rank).
  void all_reduce(T* data, std::size_t count) const;
  // [blocks, Cp_c, h] -> this rank's capacity slice [blocks, Cs_c, h].
  void take_slice(const T* full, T* slice, const ChunkView& v) const;

  // What a chunk's work gets: the chunk, its expert rows [Ep, El, Rc, h] as they arrived (and
  // were gathered), and the all-to-alls in flight. It returns the chunk's rows to send back, in
  // the sent layout ([blocks, sent rows of the chunk, h]).
  using ChunkWork = std::function<const T*(const ChunkView&, T* expert_rows, InFlight&)>;
  // The pipeline: per chunk c, its first all-to-all (send -> arrived, when `communicate`), the
  // gather of what arrived into `expert_rows` (the chunk's region), work, the second all-to-all
  // (-> back); then every chunk of `back` placed into the [E, Cp, h] buffer that `out` gives
  // (called once, after the last chunk's work: a buffer allocated only then). send, arrived and
  // back hold the chunks in the sent layout, one after the other.
  void run(bool communicate, const T* send, T* arrived, T* expert_rows, T* back,
           const std::function<T*()>& out, const ChunkWork& work) const;

 private:
  ChunkView view(int c) const;
  std::unique_ptr<PendingCollective> start(const T* send, T* recv, int c) const;
  void to_expert_rows(const T* arrived, T* rows, const ChunkView& v) const;
  void place_chunk(const T* chunk, T* full, int c) const;

  Device& device_;
  const ExchangeSetup& setup_;
  ExchangePlan p_;
};

}  // namespace ted::model
