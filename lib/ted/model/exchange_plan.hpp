// The plan of one MoE layer's exchange (docs/algorithm.md section 4), worked out once, here: how
// the capacity is padded and sliced over the tensor group, what each rank sends to its expert
// group, what its experts compute on, and how the exchange is cut into chunks for overlap. The
// model executes it (moe.cpp); the projection reads the same plan (projection/step.hpp) to count
// a step's collectives, GEMMs and buffers, so the two cannot drift apart.
//
// Names, per layer on one rank: E experts, El = E/Ep of them here, Ep expert ranks, T tensor
// ranks (t this rank's), h hidden, f the experts' FFN width here (f/T when the experts are split
// over the tensor group, else all of it), C the capacity the routing used, Cp the capacity the
// buffers hold (C padded to a multiple of T when the all-to-alls carry slices), Cs the capacity
// one rank sends (Cp/T when slicing, else Cp).
#pragma once

#include <algorithm>
#include <cstddef>

#include "ted/core/error.hpp"

namespace ted::model {

// The switches that shape the exchange (train::ParallelConfig's keys of the same names).
struct ExchangeSwitches {
  bool dtd = false;             // Duplicate Token Dropping: each tensor rank sends its slice
  bool reduce_scatter = false;  // the expert output's all-reduce + slice as one reduce-scatter
  bool split_experts = true;    // experts tensor-parallel (else whole experts on the slice)
  int overlap = 1;              // the exchange in this many chunks (at most one per sent row)
};

// Whether the experts are tensor-parallel over `tensor_ranks` (always on one tensor rank).
inline bool experts_split(const ExchangeSwitches& s, int tensor_ranks) {
  return s.split_experts || tensor_ranks == 1;
}

struct ExchangePlan {
  int E = 1, El = 1, Ep = 1, T = 1, t = 0, h = 0, f = 0;
  int C = 0, Cp = 0, Cs = 0;
  bool slicing = false;         // on a real tensor group the all-to-alls carry slice t only
  bool split = true;            // experts tensor-parallel (else whole experts on the slice)
  bool reduce_scatter = false;  // the expert output reduce-scattered (slicing and split)
  int overlap = 1;              // the chunks asked for (ExchangeSwitches::overlap)
  int chunks = 1;               // the overlap asked for, at most one per sent capacity row

  // The same layer's plan at another capacity (the dropless capacity the expert group agrees on).
  ExchangePlan at_capacity(int capacity) const {
    ExchangePlan p = *this;
    p.C = capacity;
    p.Cp = slicing ? (capacity + T - 1) / T * T : capacity;
    p.Cs = slicing ? p.Cp / T : p.Cp;
    p.chunks = std::max(1, std::min(overlap, p.sent_capacity()));
    return p;
  }

  std::size_t blocks() const { return static_cast<std::size_t>(Ep) * El; }  // = E
  int sent_capacity() const { return slicing ? Cs : Cp; }
  // What the experts compute on per block and source rank: the whole padded capacity when split
  // (the all-gather rebuilds it), this rank's slice when not.
  int expert_rows() const { return split ? Cp : sent_capacity(); }  // R
  // Expert rows per sent row: T when the experts see every tensor rank's slice.
  int rows_per_sent_row() const { return slicing && split ? T : 1; }
  // Chunk c carries sent-capacity rows [chunk_begin(c), chunk_begin(c + 1)) of every block.
  int chunk_begin(int c) const {
    return static_cast<int>(static_cast<long long>(sent_capacity()) * c / chunks);
  }
  int chunk_rows(int c) const { return chunk_begin(c + 1) - chunk_begin(c); }
  // The rows of one source's block the experts compute when the backend leaves the empty
  // capacity slots out (moe.cpp's used_rows summed over the chunks), the routing having filled
  // slots 0 .. kept - 1: all of them when split (the gather rebuilds the capacity), those in
  // this rank's slice when not. A backend that computes every slot computes expert_rows().
  int used_rows(int kept) const {
    if (split || !slicing) return std::min(kept, expert_rows());
    return std::clamp(kept - t * Cs, 0, Cs);
  }
  // Elements of one [E, rows, h] buffer: the dispatch buffer (Cp rows), what one rank sends (Cs).
  std::size_t full_elements() const { return blocks() * static_cast<std::size_t>(Cp) * h; }
  std::size_t sent_elements() const {
    return blocks() * static_cast<std::size_t>(sent_capacity()) * h;
  }
};

// The plan of a layer of `experts` experts of FFN width `ffn` (f, the whole: the plan takes this
// rank's share) on hidden size `hidden`, for tensor rank `tensor_rank` of `tensor_ranks` and
// `expert_ranks` expert ranks, at a routing capacity of `capacity`.
inline ExchangePlan exchange_plan(int experts, int hidden, int ffn, int expert_ranks,
                                  int tensor_ranks, int tensor_rank, const ExchangeSwitches& s,
                                  int capacity) {
  ExchangePlan p;
  p.E = experts;
  p.Ep = expert_ranks;
  p.El = experts / expert_ranks;
  p.T = tensor_ranks;
  p.t = tensor_rank;
  p.h = hidden;
  p.split = experts_split(s, p.T);
  p.f = p.split ? ffn / p.T : ffn;
  p.slicing = (s.dtd || !p.split) && p.T > 1;
  p.reduce_scatter = p.slicing && p.split && s.reduce_scatter;
  p.overlap = s.overlap;
  return p.at_capacity(capacity);
}

// ConfigError when the switches contradict each other: the one place this rule is written
// (the model's layout check and the experiments' system names both ask it).
inline void check_exchange_switches(const ExchangeSwitches& s) {
  if (s.reduce_scatter && !s.dtd)
    throw ConfigError("the reduce-scatter switch works on DTD's slices: turn dtd on with it");
}

}  // namespace ted::model
