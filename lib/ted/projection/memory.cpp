#include "ted/projection/memory.hpp"

#include <algorithm>
#include <vector>

#include "ted/routing/gating.hpp"

namespace ted::projection {

MemoryEstimate step_memory(const StepShape& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  // Bytes of an element: activations and weight copies (w), gradients, master weights, Adam
  // state and the kernels' fp32 statistics (mw: fp32 in mixed precision), token ids (iw).
  const std::uint64_t w = s.element_bytes, mw = s.master_bytes(), gw = s.grad_bytes(), iw = 4;
  const std::uint64_t T = s.layout.tensor, Ep = s.layout.expert, D = s.layout.data;
  const bool distributed = s.layout.world_size() > 1;
  const std::uint64_t B = s.micro_batch, S = m.seq_len, N = B * S, h = m.hidden;
  const std::uint64_t V = m.vocab, E = m.gate.experts, K = m.gate.top_k, hl = h / T,
                      Hl = m.heads / T;
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
  // The experts' backward holds their hidden gradient (master type) for all blocks at once.
  // With the exchange in chunks (parallel.overlap) it does so per chunk, and over an expert
  // group on the CPU one block of a chunk at a time (model/moe.cpp, block_by_block).
  const std::uint64_t chunks = std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(static_cast<std::uint64_t>(p.overlap), Cs));
  const std::uint64_t chunk_rows = (slicing && split ? T : 1) * ((Cs + chunks - 1) / chunks);
  const std::uint64_t expert_scratch = chunks == 1 ? expert_hidden
                                       : Ep > 1    ? chunk_rows * expert_f
                                                   : E * chunk_rows * expert_f;
  MemoryEstimate e;
  auto set = [&](MemoryCategory c, std::uint64_t bytes) {
    e.peak[static_cast<std::size_t>(c)] = bytes;
  };

  // Parameters (the weights the kernels read), gradients (master type, or 16-bit), Adam state
  // (m and v, and in mixed precision the fp32 master of the elements this rank updates), the
  // optimizer's temporary tile (master type).
  const ParameterParts parts = parameter_parts(m, s.layout, split);
  const std::uint64_t dense_n = distributed && p.zero1 ? Ep * D : 1;
  const std::uint64_t expert_n = distributed && p.zero1 ? D : 1;
  const std::uint64_t dense_mine = parts.dense / dense_n, expert_mine = parts.expert / expert_n;
  const std::uint64_t largest_mine = std::max(dense_mine, expert_mine);
  const bool mixed = w < mw;
  set(MemoryCategory::parameters, w * (parts.dense + parts.expert));
  // 16-bit gradients: the kernels accumulate one group's gradients of a micro-batch in an fp32
  // stage (model/params.hpp), one group at a time: the head (final LayerNorm, LM head), each
  // block, the embeddings.
  const bool staging = s.storage_gradients();
  std::vector<std::uint64_t> block_stage(static_cast<std::size_t>(m.layers), 0);
  const std::uint64_t head_stage = staging ? mw * (2 * h + h * V) : 0;
  const std::uint64_t embedding_stage = staging ? mw * (V * h + S * h) : 0;
  std::uint64_t largest_stage = std::max(head_stage, embedding_stage);
  for (int l = 0; l < m.layers && staging; ++l) {
    const ParameterParts block = block_parameters(m, s.layout, split, l);
    block_stage[static_cast<std::size_t>(l)] = mw * (block.dense + block.expert);
    largest_stage = std::max(largest_stage, block_stage[static_cast<std::size_t>(l)]);
  }
  const std::uint64_t gradients = gw * (parts.dense + parts.expert);
  set(MemoryCategory::gradients, gradients + largest_stage);
  set(MemoryCategory::optimizer_state, (mixed ? 3 : 2) * mw * (dense_mine + expert_mine));
  set(MemoryCategory::optimizer_temporaries,
      mw * (p.tile_elems > 0 ? std::min<std::uint64_t>(p.tile_elems, largest_mine) : largest_mine));

  // Activations: replay the model's allocations in order (gpt.cpp, moe.cpp), in bytes, and
  // keep the peak; and the peak of the activations with the gradient stage open beside them.
  struct Replay {
    std::uint64_t current = 0, peak = 0, staged = 0, peak_staged = 0;
    void take(std::uint64_t n) {
      peak = std::max(peak, current += n);
      peak_staged = std::max(peak_staged, current + staged);
    }
    void give(std::uint64_t n) { current -= n; }
    void stage(std::uint64_t n) {  // opens (n > 0) or closes (0) a gradient stage
      staged = n;
      peak_staged = std::max(peak_staged, current + staged);
    }
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
      a.take(mw * N * E);  // the gate's logits, freed when the layer returns
      const std::uint64_t moe_kept =
          routing + w * (full + rows + 2 * expert_hidden + full);  // + dispatched, in, hidden,
      a.take(routing + w * (full + rows + 2 * expert_hidden));     // act ... returned
      a.take(w * rows);  // the experts' partial output, freed when the layer returns
      a.take(w * full);  // returned
      a.give(w * rows + mw * N * E);
      return kept + moe_kept;
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
  a.stage(head_stage);
  a.take(w * 3 * X);  // d_lnf, d_x, d_prev
  a.stage(0);
  for (int l = m.layers - 1; l >= 0; --l) {
    const bool moe = m.is_moe(l);
    if (m.checkpoint) {
      a.take(w * X);  // the recompute's output, dropped right after it
      internals[static_cast<std::size_t>(l)] = block_forward(moe);
      a.give(w * X);
    }
    a.stage(block_stage[static_cast<std::size_t>(l)]);
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
    a.take(w * (X + N * hl + 3 * N * hl + X));  // d_mid, d_att, d_qkv, d_ln1
    a.give(w * (X + X + N * hl + 3 * N * hl + X));
    a.stage(0);
    a.give(internals[static_cast<std::size_t>(l)] + w * X);  // the block's activations, input
  }
  a.stage(embedding_stage);
  a.stage(0);
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
  set(MemoryCategory::cac_stash, w * stash);

  // Communication buffers: the MoE exchange's (forward and backward, in the storage type) and
  // the optimizer's (its gradient shards in the gradient type, then one part's updated weights).
  std::uint64_t exchange = 0;
  bool any_moe = false;
  for (int l = 0; l < m.layers; ++l) any_moe |= m.is_moe(l);
  if (any_moe) {
    const std::uint64_t gather = slicing ? full : 0;  // the all-gather's rank-major temporary
    const bool stashed = p.cac && m.checkpoint;
    std::uint64_t fwd = (slicing || chunks > 1 ? sent : 0) /*send, packed*/ +
                        (stashed ? 0 : sent) /*received*/ + (slicing ? sent : 0) /*back*/ +
                        (stashed ? 0 : sent) /*returned*/ + gather;
    std::uint64_t bwd = 2 * sent /*d_slice, d_back*/ + gather;
    exchange = w * std::max(fwd, bwd);
  }
  std::uint64_t optimizer = 0;
  if (distributed && p.zero1) optimizer = gw * (dense_mine + expert_mine) + w * largest_mine;
  set(MemoryCategory::communication, std::max(exchange, optimizer));

  for (auto bytes : e.peak) e.upper_bound += bytes;
  // The gradient stages belong to the training phase (a.peak_staged), not to the persistent state.
  const std::uint64_t training = a.peak_staged + e.of(MemoryCategory::cac_stash) + exchange,
                      stepping = e.of(MemoryCategory::optimizer_temporaries) + optimizer;
  e.total = e.of(MemoryCategory::parameters) + gradients + e.of(MemoryCategory::optimizer_state) +
            std::max(training, stepping);
  return e;
}

}  // namespace ted::projection
