#include "ted/projection/memory.hpp"

#include <algorithm>
#include <vector>

namespace ted::projection {

namespace {

// The sizes every part below reads, in elements unless named bytes. Bytes of an element:
// activations and weight copies (w), gradients (gw), master weights, Adam state and the kernels'
// fp32 statistics (mw: fp32 in mixed precision), token ids (iw).
struct Sizes {
  std::uint64_t w, mw, gw, iw = 4;
  std::uint64_t T, Ep, D, B, S, N, h, V, E, K, hl, Hl, X, fl;
  bool distributed;
  model::ExchangePlan x;         // the MoE layers' exchange (step.hpp)
  std::uint64_t full, sent;      // the dispatch buffer [E, Cp, h], what one rank sends of it
  std::uint64_t rows;            // what the local experts compute on
  std::uint64_t expert_hidden;   // their hidden activations
  std::uint64_t expert_scratch;  // their backward's hidden gradient (master type)
  ParameterParts parts;          // this rank's parameters
  std::uint64_t dense_mine, expert_mine, largest_mine;  // what this rank's optimizer updates
};

Sizes sizes_of(const StepShape& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  Sizes z;
  z.w = s.element_bytes();
  z.mw = s.master_bytes();
  z.gw = s.grad_bytes();
  z.T = s.layout.tensor;
  z.Ep = s.layout.expert;
  z.D = s.layout.data;
  z.distributed = s.layout.world_size() > 1;
  z.B = s.micro_batch;
  z.S = m.seq_len;
  z.N = z.B * z.S;
  z.h = m.hidden;
  z.V = m.vocab_rows(s.layout.tensor);  // the logits' columns on this rank
  z.E = m.gate.experts;
  z.K = m.gate.top_k;
  z.hl = z.h / z.T;
  z.Hl = m.heads / z.T;
  z.X = z.N * z.h;  // one [tokens, h] activation
  z.fl = m.ffn() / z.T;
  z.x = largest_exchange(s);  // dropless under a forced workload: the largest capacity
  const model::ExchangePlan& x = z.x;
  z.full = x.full_elements();
  z.sent = x.sent_elements();
  z.rows = x.split ? z.full : z.sent;
  z.expert_hidden = x.blocks() * static_cast<std::uint64_t>(x.expert_rows()) * x.f;
  // The experts' backward holds their hidden gradient (master type) for all blocks at once.
  // With the exchange in chunks (parallel.overlap) it does so per chunk, and over an expert
  // group on the CPU one block of a chunk at a time (model/moe.cpp, block_by_block).
  const std::uint64_t chunks = x.chunks, Cs = x.sent_capacity();
  const std::uint64_t chunk_rows = x.rows_per_sent_row() * ((Cs + chunks - 1) / chunks);
  z.expert_scratch = chunks == 1 ? z.expert_hidden
                     : z.Ep > 1  ? chunk_rows * x.f
                                 : z.E * chunk_rows * x.f;
  z.parts = parameter_parts(m, s.layout, x.split);
  const std::uint64_t dense_n = z.distributed && p.zero1 ? z.Ep * z.D : 1;
  const std::uint64_t expert_n =
      z.distributed && p.zero1 ? static_cast<std::uint64_t>(expert_data_ranks(s.layout, x.split))
                               : 1;
  z.dense_mine = z.parts.dense / dense_n;
  z.expert_mine = z.parts.expert / expert_n;
  z.largest_mine = std::max(z.dense_mine, z.expert_mine);
  return z;
}

// The activations' peak.
struct ActivationPeaks {
  std::uint64_t peak = 0;
  std::uint64_t saved = 0;  // what the model keeps for backward, at its largest
};

ActivationPeaks activation_peaks(const StepShape& s, const Sizes& z) {
  const auto& m = s.model;
  const std::uint64_t w = z.w, mw = z.mw, iw = z.iw, N = z.N, E = z.E, K = z.K, B = z.B, S = z.S,
                      X = z.X, hl = z.hl, Hl = z.Hl, V = z.V, fl = z.fl, full = z.full,
                      rows = z.rows, expert_hidden = z.expert_hidden,
                      expert_scratch = z.expert_scratch;
  // Replay the model's allocations in order (gpt.cpp, moe.cpp), in bytes, and keep the peak.
  struct Replay {
    std::uint64_t current = 0, peak = 0;
    void take(std::uint64_t n) { peak = std::max(peak, current += n); }
    void give(std::uint64_t n) { current -= n; }
  } a;
  // One gating group's routing (kept with the layer's activations): probs, gate values and
  // weights in the master type, experts and slots as int32, counts, the aux loss.
  const std::uint64_t routing = mw * (N * E + 2 * N * K + 1) + iw * (2 * N * K + E);
  // Attention keeps the probabilities [B, Hl, S, S] (materialised) or each row's log-sum-exp
  // [B, Hl, S] in the master type (fused); neither backward allocates on the device.
  const std::uint64_t attention = m.fused_attention() ? mw * B * Hl * S : w * B * Hl * S * S;
  auto block_forward = [&](bool moe) {  // returns what the block keeps (its internals)
    std::uint64_t kept = w * (X + N * 3 * hl + N * hl + X + X) + attention + mw * 4 * N;
    a.take(kept);
    if (moe) {
      a.take(mw * N * E);          // the gate's logits, freed when the layer returns
      a.take(routing + w * full);  // the routing; the dispatch buffer, until it has been sent:
      const bool packed = z.x.slicing || z.x.chunks > 1;  // packed into the send buffer, at once
      if (packed) a.give(w * full);
      a.take(w * (rows + 2 * expert_hidden));  // the experts' input, hidden, activated
      a.take(w * rows);  // the experts' partial output, freed when the layer returns
      a.take(w * full);  // returned
      a.give(w * rows + mw * N * E + (packed ? 0 : w * full));
      return kept + routing + w * (rows + 2 * expert_hidden + full);
    }
    a.take(w * 2 * N * fl);
    return kept + w * 2 * N * fl;
  };
  std::vector<std::uint64_t> internals(static_cast<std::size_t>(m.layers));
  a.take(iw * 2 * N);  // the batch's token and target ids
  a.take(w * X);       // the embedding output, block 0's input
  for (int l = 0; l < m.layers; ++l) {
    a.take(w * X);  // the block's output, the next block's input
    internals[static_cast<std::size_t>(l)] = block_forward(m.is_moe(l));
    if (m.checkpoint) a.give(internals[static_cast<std::size_t>(l)]);
  }
  a.take(w * X + mw * 2 * N);  // final LayerNorm
  a.take(w * N * V + mw * N);  // logits (backward turns them into their gradient in place),
                               // and each row's log-sum-exp
  // Kept for backward at the end of forward: the ids, the checkpoints (or every block's
  // activations) with the final LayerNorm's input, its output and statistics, the logits and
  // their log-sum-exp; then, checkpointed, block l's inputs up to l and its recomputed internals
  // (in the backward's replay below).
  std::uint64_t saved = iw * 2 * N + w * X * (m.layers + 2) + mw * 2 * N + w * N * V + mw * N;
  if (!m.checkpoint)
    for (std::uint64_t block : internals) saved += block;
  if (m.tie_embeddings) {  // the vocabulary-parallel cross-entropy's row statistics
    a.take(mw * 3 * N);
    a.give(mw * 3 * N);
  }
  a.take(w * X);                       // d_lnf
  a.give(w * N * V + mw * N + w * X);  // the head's backward done: logits, log-sum-exp, lnf
  a.take(w * X);                       // d_x
  a.give(w * X + w * X + mw * 2 * N);  // the final LayerNorm's backward done: d_lnf, its input
  a.take(w * X);                       // and statistics; d_prev
  for (int l = m.layers - 1; l >= 0; --l) {
    const bool moe = m.is_moe(l);
    if (m.checkpoint) {
      a.take(w * X);  // the recompute's output, dropped right after it
      internals[static_cast<std::size_t>(l)] = block_forward(moe);
      a.give(w * X);
      saved =
          std::max(saved, iw * 2 * N + w * X * (l + 1) + internals[static_cast<std::size_t>(l)]);
    }
    const std::uint64_t dropped = m.dropout > 0 ? w * X : 0;  // d_out through the FFN's mask
    a.take(dropped);
    a.take(w * X);  // d_ln2
    if (moe) {
      // d_returned, the combine weights' gradient, d_out, d_in, then inside the experts'
      // backward their hidden gradient (the CPU kernels hold it in the master type); after it
      // d_dispatched and the gate logits' gradient. All freed when the layer returns.
      const std::uint64_t held = w * (full + rows + rows) + mw * N * K;
      a.take(held);
      a.take(mw * expert_scratch);
      a.give(mw * expert_scratch);
      a.take(w * (full + N * E));
      a.give(held + w * (full + N * E));
    } else {
      a.take(w * N * fl);
      a.give(w * N * fl);
    }
    a.give(dropped);
    a.take(w * (X + N * hl));  // d_mid, d_att
    a.take(dropped);           // d_mid through the attention output's mask
    a.give(dropped);
    a.take(w * (3 * N * hl + X));  // d_qkv, d_ln1
    a.give(w * (X + X + N * hl + 3 * N * hl + X));
    a.give(internals[static_cast<std::size_t>(l)] + w * X);  // the block's activations, input
  }
  return {a.peak, saved};
}

// CAC: every MoE layer's all-to-all outputs (and the all-reduce outputs) until its backward,
// in elements.
std::uint64_t cac_stash(const StepShape& s, const Sizes& z) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  std::uint64_t stash = 0;
  if (p.cac && m.checkpoint) {
    for (int l = 0; l < m.layers; ++l) {
      bool moe = m.is_moe(l);
      if (moe) stash += 2 * z.sent;  // both all-to-all outputs (copies when Ep = 1)
      if (p.cac_all_reduce && z.T > 1) {
        stash += moe ? z.X : 2 * z.X;
        if (moe && z.x.split) stash += z.x.reduce_scatter ? z.sent : z.full;
      }
    }
  }
  return stash;
}

// The MoE exchange's communication buffers (forward and backward, in the storage type), bytes.
std::uint64_t exchange_buffers(const StepShape& s, const Sizes& z) {
  const auto& m = s.model;
  bool any_moe = false;
  for (int l = 0; l < m.layers; ++l) any_moe |= m.is_moe(l);
  if (!any_moe) return 0;
  const bool slicing = z.x.slicing;
  const std::uint64_t sent = z.sent;
  const std::uint64_t gather = slicing ? z.full : 0;  // the all-gather's rank-major temporary
  const bool stashed = s.parallel.cac && m.checkpoint;
  std::uint64_t fwd = (slicing || z.x.chunks > 1 ? sent : 0) /*send, packed*/ +
                      (stashed ? 0 : sent) /*received*/ + (slicing ? sent : 0) /*back*/ +
                      (stashed ? 0 : sent) /*returned*/ + gather;
  std::uint64_t bwd = 2 * sent /*d_slice, d_back*/ + gather;
  return z.w * std::max(fwd, bwd);
}

}  // namespace

MemoryEstimate step_memory(const StepShape& s) {
  const auto& p = s.parallel;
  const Sizes z = sizes_of(s);
  MemoryEstimate e;
  auto set = [&](MemoryCategory c, std::uint64_t bytes) {
    e.peak[static_cast<std::size_t>(c)] = bytes;
  };

  // Parameters (the weights the kernels read), gradients (master type, or 16-bit), Adam state (m
  // and v, and in mixed precision the fp32 master of the elements this rank updates), the
  // optimizer's temporary tile (master type).
  const bool mixed = z.w < z.mw;
  const std::uint64_t gradients = z.gw * (z.parts.dense + z.parts.expert);
  set(MemoryCategory::parameters, z.w * (z.parts.dense + z.parts.expert));
  set(MemoryCategory::gradients, gradients);
  set(MemoryCategory::optimizer_state, (mixed ? 3 : 2) * z.mw * (z.dense_mine + z.expert_mine));
  set(MemoryCategory::optimizer_temporaries,
      z.mw * (p.tile_elems > 0 ? std::min<std::uint64_t>(p.tile_elems, z.largest_mine)
                               : z.largest_mine));
  const ActivationPeaks a = activation_peaks(s, z);
  set(MemoryCategory::activations, a.peak);
  e.activations_saved = a.saved;
  set(MemoryCategory::cac_stash, z.w * cac_stash(s, z));
  // Communication buffers: the MoE exchange's and the optimizer's (its gradient shards in the
  // gradient type, then one part's updated weights).
  const std::uint64_t exchange = exchange_buffers(s, z);
  std::uint64_t optimizer = 0;
  if (z.distributed && p.zero1)
    optimizer = z.gw * (z.dense_mine + z.expert_mine) + z.w * z.largest_mine;
  set(MemoryCategory::communication, std::max(exchange, optimizer));

  for (auto bytes : e.peak) e.upper_bound += bytes;
  const std::uint64_t training = a.peak + e.of(MemoryCategory::cac_stash) + exchange,
                      stepping = e.of(MemoryCategory::optimizer_temporaries) + optimizer;
  e.total = e.of(MemoryCategory::parameters) + gradients + e.of(MemoryCategory::optimizer_state) +
            std::max(training, stepping);
  return e;
}

}  // namespace ted::projection
