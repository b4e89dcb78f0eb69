#include "ted/projection/memory.hpp"

#include <algorithm>
#include <vector>

#include "ted/model/gating.hpp"

namespace ted::projection {

MemoryEstimate step_memory(const StepShape& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  const std::uint64_t w = s.element_bytes;
  const std::uint64_t T = s.layout.tensor, Ep = s.layout.expert, D = s.layout.data;
  const bool distributed = s.layout.world_size() > 1;
  const std::uint64_t B = s.micro_batch, S = m.seq_len, N = B * S, h = m.hidden;
  const std::uint64_t V = m.vocab, E = m.gate.experts, hl = h / T, Hl = m.heads / T;
  const std::uint64_t X = N * h;  // one [tokens, h] activation
  const bool split = p.split_experts || T == 1;
  const std::uint64_t fl = m.ffn() / T, expert_f = split ? fl : m.ffn();
  const bool slicing = (p.dtd || !split) && T > 1;
  const bool reduce_scatter = slicing && split && p.reduce_scatter;
  const std::uint64_t C = model::expert_capacity(m.gate, static_cast<int>(N));
  const std::uint64_t Cp = slicing ? (C + T - 1) / T * T : C, Cs = slicing ? Cp / T : Cp;
  const std::uint64_t full = E * Cp * h, sent = E * Cs * h;
  const std::uint64_t rows = split ? full : sent;  // what the local experts compute on
  const std::uint64_t expert_hidden = E * (split ? Cp : Cs) * expert_f;
  MemoryEstimate e;
  auto set = [&](MemoryCategory c, std::uint64_t elements) {
    e.peak[static_cast<std::size_t>(c)] = elements * w;
  };

  // Parameters, gradients, Adam state (m and v), the optimizer's temporary tile.
  const ParameterParts parts = parameter_parts(m, s.layout, split);
  const std::uint64_t dense_n = distributed && p.zero1 ? Ep * D : 1;
  const std::uint64_t expert_n = distributed && p.zero1 ? D : 1;
  const std::uint64_t dense_mine = parts.dense / dense_n, expert_mine = parts.expert / expert_n;
  set(MemoryCategory::parameters, parts.dense + parts.expert);
  set(MemoryCategory::gradients, parts.dense + parts.expert);
  // Adam's m and v; in mixed precision (16-bit elements) also the fp32 master weights, and the
  // optimizer's temporary is the fp32 upcast of the gradient.
  const bool mixed = w < 4;
  const std::uint64_t state_bytes = mixed ? 12 : 2 * w, temporary_bytes = mixed ? 4 : w;
  e.peak[static_cast<std::size_t>(MemoryCategory::optimizer_state)] =
      state_bytes * (dense_mine + expert_mine);
  std::uint64_t largest_mine = std::max(dense_mine, expert_mine);
  e.peak[static_cast<std::size_t>(MemoryCategory::optimizer_temporaries)] =
      temporary_bytes *
      (p.tile_elems > 0 ? std::min<std::uint64_t>(p.tile_elems, largest_mine) : largest_mine);

  // Activations: replay the model's allocations in order (gpt.cpp, moe.cpp) and keep the peak.
  struct Replay {
    std::uint64_t current = 0, peak = 0;
    void take(std::uint64_t n) { peak = std::max(peak, current += n); }
    void give(std::uint64_t n) { current -= n; }
  } a;
  auto block_forward = [&](bool moe) {  // returns what the block keeps (its internals)
    std::uint64_t kept = X + 2 * N + N * 3 * hl + B * Hl * S * S + N * hl + X + X + 2 * N;
    a.take(kept);
    if (moe) {
      const std::uint64_t moe_kept =
          full + rows + 2 * expert_hidden;  // dispatched, in, hidden, act
      a.take(moe_kept);
      a.take(rows);  // the experts' partial output, freed when the layer returns
      a.take(full);  // returned
      a.give(rows);
      return kept + moe_kept + full;
    }
    a.take(2 * N * fl);
    return kept + 2 * N * fl;
  };
  std::vector<std::uint64_t> internals(static_cast<std::size_t>(m.layers));
  a.take(X);  // the embedding output, block 0's input
  for (int l = 0; l < m.layers; ++l) {
    a.take(X);  // the block's output, the next block's input
    internals[static_cast<std::size_t>(l)] = block_forward(m.is_moe(l));
    if (m.checkpoint) a.give(internals[static_cast<std::size_t>(l)]);
  }
  a.take(X + 2 * N);  // final LayerNorm
  a.take(N * V);      // logits (freed at the end of forward)
  a.take(N * V);      // their gradient (kept for backward)
  a.give(N * V);
  a.take(3 * X);  // d_lnf, d_x, d_prev
  for (int l = m.layers - 1; l >= 0; --l) {
    const bool moe = m.is_moe(l);
    if (m.checkpoint) {
      a.take(X);  // the recompute's output, dropped right after it
      internals[static_cast<std::size_t>(l)] = block_forward(moe);
      a.give(X);
    }
    a.take(X);  // d_ln2
    if (moe) {  // d_returned, d_out, d_hidden, d_in, d_dispatched: freed when the layer returns
      a.take(full + rows + expert_hidden + rows + full);
      a.give(full + rows + expert_hidden + rows + full);
    } else {
      a.take(N * fl);
      a.give(N * fl);
    }
    a.take(X + N * hl + 3 * N * hl + X);  // d_mid, d_att, d_qkv, d_ln1
    a.give(X + X + N * hl + 3 * N * hl + X);
    a.give(internals[static_cast<std::size_t>(l)] + X);  // the block's activations and input
  }
  set(MemoryCategory::activations, a.peak);

  // CAC: every MoE layer's all-to-all outputs (and the all-reduce outputs) until its backward.
  std::uint64_t stash = 0;
  if (p.cac && m.checkpoint) {
    for (int l = 0; l < m.layers; ++l) {
      bool moe = m.is_moe(l);
      if (moe) stash += 2 * sent;  // both all-to-all outputs (copies when Ep = 1)
      if (p.cac_all_reduce && T > 1) {
        stash += moe ? X : 2 * X;
        if (moe && split) stash += reduce_scatter ? sent : full;
      }
    }
  }
  set(MemoryCategory::cac_stash, stash);

  // Communication buffers: the MoE exchange's (forward and backward) and the optimizer's.
  std::uint64_t exchange = 0;
  bool any_moe = false;
  for (int l = 0; l < m.layers; ++l) any_moe |= m.is_moe(l);
  if (any_moe) {
    const std::uint64_t gather = slicing ? full : 0;  // the all-gather's rank-major temporary
    const bool stashed = p.cac && m.checkpoint;
    std::uint64_t fwd = (slicing ? sent : 0) /*send*/ + (stashed ? 0 : sent) /*received*/ +
                        (slicing ? sent : 0) /*back*/ + (stashed ? 0 : sent) /*returned*/ + gather;
    std::uint64_t bwd = 2 * sent /*d_slice, d_back*/ + gather;
    exchange = std::max(fwd, bwd);
  }
  std::uint64_t optimizer = 0;
  if (distributed && p.zero1) optimizer = dense_mine + expert_mine + largest_mine;
  set(MemoryCategory::communication, std::max(exchange, optimizer));

  for (auto bytes : e.peak) e.total += bytes;
  return e;
}

}  // namespace ted::projection
