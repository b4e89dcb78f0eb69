// The TED process grid (docs/algorithm.md section 3): G = T x Ep x D ranks, tensor fastest.
// Rank r has coordinates t = r mod T, e = (r / T) mod Ep, d = r / (T * Ep), and four groups:
//   tensor          (size T)       same (e, d)  - Megatron all-reduces
//   expert          (size Ep)      same (t, d)  - the MoE all-to-alls
//   expert_data     (size D)       same (t, e)  - expert gradients are reduced here
//   nonexpert_data  (size Ep * D)  same t       - non-expert gradients are reduced here
// and, for experts whole on every tensor rank, their replicas (size T * D, same e), over which
// those experts' gradients are reduced in place of the expert-data group.
// Pure arithmetic, no MPI: tests check every factorisation of every G.
#pragma once

#include <string>
#include <vector>

#include "ted/comm/ledger.hpp"

namespace ted {

struct Layout {
  int tensor = 1;  // T
  int expert = 1;  // Ep
  int data = 1;    // D
  int world_size() const { return tensor * expert * data; }
  std::string to_string() const;  // "T=2 Ep=4 D=2"
};

// Completes a layout for `world_size` ranks. `data` = 0 means "whatever is left":
// D = G / (T * Ep). Throws ConfigError, naming the numbers, when a size is zero or negative,
// or when the layout does not multiply to (or divide) the world size.
Layout resolve_layout(int world_size, int tensor, int expert, int data);

struct GridCoords {
  int tensor;  // t
  int expert;  // e
  int data;    // d
};

class ProcessGrid {
 public:
  ProcessGrid(int world_size, Layout layout);  // throws ConfigError if they do not match

  const Layout& layout() const { return layout_; }
  int world_size() const { return world_size_; }

  GridCoords coords(int rank) const;
  int rank_of(GridCoords coords) const;

  // Members of `rank`'s group of that kind, in increasing world rank (= their index order).
  std::vector<int> group_members(int rank, GroupKind kind) const;
  int group_size(GroupKind kind) const;
  // Which of the disjoint groups of that kind `rank` is in (0 .. world_size/group_size - 1).
  int group_color(int rank, GroupKind kind) const;
  // `rank`'s index inside its group of that kind.
  int group_index(int rank, GroupKind kind) const;

  // Experts whole on every tensor rank (parallel.split_experts false, T > 1): the ranks that
  // hold the same experts are those of the same e, T x D of them (DeepSpeed's expert
  // data-parallel group for such experts). Their expert part is reduced and sharded over these
  // ranks, which the ledger records as the expert-data group. Members in increasing world rank.
  std::vector<int> expert_replica_members(int rank) const;
  int expert_replica_color(int rank) const { return coords(rank).expert; }

 private:
  void check_rank(int rank) const;
  int world_size_;
  Layout layout_;
};

// Every layout (T, Ep, D) with T * Ep * D = world_size, T fastest-varying.
std::vector<Layout> all_layouts(int world_size);

}  // namespace ted
