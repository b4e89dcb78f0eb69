// The compute half of the time model (time.hpp): GEMMs shape by shape, the memory-bound
// passes, the optimizer step, and the model FLOPs of % of peak.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "ted/projection/time.hpp"
#include "ted/routing/gating.hpp"

namespace ted::projection {

namespace {

// The sizes the counts below use, for one micro-batch on one rank; the MoE layers' from the
// exchange plan (step.hpp).
struct Dims {
  double T, B, S, N, h, hl, Hl, dh, fl, E, Ep, K, V, expert_f, expert_rows;
  double full, sent;  // the dispatch buffer E x Cp x h, and what one rank sends of it
  bool split, slicing;
};

Dims dims_of(const StepShape& s) {
  const auto& m = s.model;
  const model::ExchangePlan x = exchange_of(s);
  Dims d{};
  d.T = s.layout.tensor;
  d.B = s.micro_batch;
  d.S = m.seq_len;
  d.N = d.B * d.S;
  d.h = m.hidden;
  d.hl = d.h / d.T;
  d.Hl = static_cast<double>(m.heads) / d.T;
  d.dh = d.hl / d.Hl;
  d.fl = m.ffn() / d.T;
  d.E = m.gate.experts;
  d.Ep = s.layout.expert;
  d.K = m.gate.top_k;
  // The logits' columns on this rank: the whole vocabulary, or the tied embedding's slice.
  d.V = m.vocab_rows(s.layout.tensor);
  d.split = x.split;
  d.slicing = x.slicing;
  d.expert_f = x.f;
  d.expert_rows = d.Ep * x.expert_rows();
  d.full = static_cast<double>(x.full_elements());
  d.sent = static_cast<double>(x.sent_elements());
  return d;
}

double forward_passes(const StepShape& s) {
  return s.model.checkpoint ? 2.0 : 1.0;
}

}  // namespace

double step_flops(const StepShape& s) {
  double forward = 0;
  for (const auto& g : forward_gemms(s)) forward += g.flops();
  return forward * (forward_passes(s) + 2.0) * s.micro_batches;
}

double gemm_time(const GemmShape& g, const Cluster& c, double w) {
  const auto& q = c.gemm;
  const double tiles = std::ceil(g.m / q.tile_m) * std::ceil(g.n / q.tile_n) * g.count;
  const double waves = std::ceil(tiles / q.units);
  const double per_unit = c.sustained_flops / q.units;
  const double compute = waves * 2 * q.tile_m * q.tile_n * (g.k + q.k_overhead) / per_unit;
  const double bytes = w * (g.m * g.k + g.k * g.n + g.m * g.n) * g.count;
  return std::max(compute, bytes / c.memory_bandwidth);
}

double gemm_seconds(const StepShape& s, const Cluster& c) {
  const double w = static_cast<double>(s.element_bytes());
  // Under a forced workload each micro-batch's GEMMs on the loaded rank (step_load), else one
  // micro-batch's, every one the same.
  const StepLoad load = step_load(s);
  double step = 0;
  for (int micro = 0; micro < (load.forced ? s.micro_batches : 1); ++micro) {
    double forward = 0, backward = 0;
    for (const auto& g : load.forced ? forward_gemms(s, load, micro) : forward_gemms(s)) {
      // Backward: the input gradient [m, k] = dC B^T and the weight gradient [k, n] = A^T dC.
      const GemmShape input_gradient{g.m, g.k, g.n, g.count};
      const GemmShape weight_gradient{g.k, g.n, g.m, g.count};
      backward += gemm_time(input_gradient, c, w) + gemm_time(weight_gradient, c, w);
      forward += gemm_time(g, c, w);
    }
    if (s.model.fused_attention()) {
      const Dims d = dims_of(s);
      backward += s.model.layers * gemm_time({d.S, d.S, d.dh, d.B * d.Hl}, c, w);
    }
    if (s.einsum_dispatch) {
      // DeepSpeed's einsums on every tensor rank, over the micro-batch's N tokens and the
      // E x C slots (the paper's capacity, not the rank's slice): dispatch "sec,sm->ecm" and
      // combine "sec,ecm->sm" forward; backward the dispatch's input gradient (its mask takes
      // none) and the combine's two (the expert output's, the gate weights').
      // Under a forced workload at the loaded group's capacity of each layer.
      const Dims d = dims_of(s);
      for (int l = 0; l < s.model.layers; ++l) {
        if (!s.model.is_moe(l)) continue;
        const double slots =
            load.forced
                ? static_cast<double>(
                      exchange_of(
                          s,
                          load.micro[static_cast<std::size_t>(micro)][static_cast<std::size_t>(l)]
                              .capacity)
                          .full_elements()) /
                      d.h
                : d.full / d.h;
        forward += gemm_time({slots, d.h, d.N}, c, w) + gemm_time({d.N, d.h, slots}, c, w);
        backward += gemm_time({d.N, d.h, slots}, c, w) + gemm_time({slots, d.h, d.N}, c, w) +
                    gemm_time({d.N, slots, d.h}, c, w);
      }
    }
    step += backward + forward * forward_passes(s);
  }
  return load.forced ? step : step * s.micro_batches;
}

// Element touches (reads + writes) of each element-wise pass, forward and backward; a backward
// reads what its forward read and the incoming gradient and writes the outgoing one.
double memory_bound_bytes(const StepShape& s) {
  const auto& m = s.model;
  const Dims d = dims_of(s);
  const double w = static_cast<double>(s.element_bytes()),
               mw = static_cast<double>(s.master_bytes());
  const double X = d.N * d.h;
  const double scores = d.B * d.Hl * d.S * d.S;  // one layer's attention probabilities
  const StepLoad load = step_load(s);
  double forward = 0, backward = 0;  // in bytes, per micro-batch
  auto pass = [&](double fwd_touches, double bwd_touches, double bytes) {
    forward += fwd_touches * bytes;
    backward += bwd_touches * bytes;
  };
  double layers_fwd = 0;  // the blocks' forward, which the recompute runs again
  for (int l = 0; l < m.layers; ++l) {
    const double f0 = forward;
    pass(2, 3, w * X);  // LayerNorm 1: read x, write y | read x, dy, write dx
    if (s.model.fused_attention()) {
      // FlashAttention-2 keeps the scores on chip: read q, k, v, write o and each row's
      // log-sum-exp | read q, k, v, o, do, write dq, dk, dv; and the softmax work on each
      // score, counted as one touch of it where it lives (forward: the exponential; backward:
      // the exponential again and dS), at the element-wise rate.
      pass(4, 8, w * d.N * d.hl);
      pass(1, 2, w * scores);
    } else {
      pass(2, 3, w * scores);  // scale, causal mask, softmax (fused) | its backward
    }
    pass(3, 3, w * X);  // bias (+ dropout) + residual after the projection
    if (m.dropout > 0) {
      // Dropout: the masks are drawn again, not stored; the backward takes each sub-layer's
      // output gradient through its mask (read, write), and the materialised attention writes
      // the dropped probabilities for P V (and again for dV); the fused one drops on chip.
      pass(0, 4, w * X);
      if (!s.model.fused_attention()) pass(2, 2, w * scores);
    }
    pass(2, 3, w * X);  // LayerNorm 2
    if (m.is_moe(l)) {
      pass(2, 3, mw * d.N * d.E);  // gate softmax and top-k over the fp32 logits
      // The exchange's buffer and the experts' hidden rows: a micro-batch's, or under a forced
      // workload their mean over the micro-batches on the loaded rank.
      double full = d.full, hidden = (d.E / d.Ep) * d.expert_rows * d.expert_f;
      if (load.forced) {
        full = hidden = 0;
        for (const auto& layers : load.micro) {
          const MoeLayerLoad& moe = layers[static_cast<std::size_t>(l)];
          full += static_cast<double>(exchange_of(s, moe.capacity).full_elements());
          for (int rows : moe.expert_rows) hidden += rows * d.expert_f;
        }
        full /= s.micro_batches;
        hidden /= s.micro_batches;
      }
      if (s.einsum_dispatch) {
        // DeepSpeed's gating builds the masks over [N, E x C]: the fp32 combine weights
        // written, read into the boolean dispatch mask (1 byte), both cast to the storage type
        // for the einsums (gemm_seconds) | the weights' gradient cast back to fp32 and summed
        // over the slots into the gates'. The einsums write the buffer and the combined rows.
        const double sec = d.N * (full / d.h);
        pass(1, 0, sec * (mw + (mw + 1) + (1 + w) + (mw + w)));
        pass(0, 1, sec * ((w + mw) + mw));
        pass(1, 1, w * X);  // the combined rows into the residual
      } else {
        // Dispatch: tokens copied into the capacity buffer, the DTD slice and the all-gather's
        // reordering, the return slice, and the combine reading the returned rows.
        pass(1, 1, w * (d.N * d.K * d.h + full));
        pass(1, 1, w * (full + d.N * d.K * d.h + X));  // combine into the residual
      }
      if (d.slicing) pass(4, 4, w * full);  // slice and rebuild, on both sides of the experts
      pass(2, 3, w * hidden);               // bias + GeLU inside the experts
    } else {
      pass(2, 3, w * d.N * d.fl);  // bias + GeLU
      pass(3, 3, w * X);           // bias + residual
    }
    layers_fwd += forward - f0;
  }
  pass(2, 3, w * X);          // final LayerNorm
  pass(2, 2, w * d.N * d.V);  // the loss: log-sum-exp over the logits | its gradient
  const double recompute = m.checkpoint ? layers_fwd : 0;
  // Weight gradients accumulate into their buffers once per micro-batch (read and write every
  // element of this rank's gradients, in the master type or 16-bit).
  const ParameterParts parts = parameter_parts(m, s.layout, d.split);
  const double gw = static_cast<double>(s.grad_bytes());
  const double accumulate = 2 * gw * static_cast<double>(parts.dense + parts.expert);
  return (forward + recompute + backward + accumulate) * s.micro_batches;
}

double optimizer_bytes(const StepShape& s) {
  const auto& p = s.parallel;
  const bool distributed = s.layout.world_size() > 1;
  const bool split = model::experts_split(p.exchange(), s.layout.tensor);
  const ParameterParts parts = parameter_parts(s.model, s.layout, split);
  const double dense_n = distributed && p.zero1 ? s.layout.expert * s.layout.data : 1;
  const double expert_n = distributed && p.zero1 ? expert_data_ranks(s.layout, split) : 1;
  const double mine =
      static_cast<double>(parts.dense) / dense_n + static_cast<double>(parts.expert) / expert_n;
  const double w = static_cast<double>(s.element_bytes()),
               mw = static_cast<double>(s.master_bytes());
  const double gw = static_cast<double>(s.grad_bytes());
  const bool mixed = w < mw;
  // Per element of this rank's shard: the norm reads the gradient (in its type); the temporary
  // copy reads it and writes the copy (fp32, unscaled, clipped); Adam reads the copy, m, v (and
  // the fp32 master in mixed precision) and writes them back; the kernels' weights are written
  // in their type.
  const double state = (mixed ? 3 : 2) * mw;
  const double per_element = gw + (gw + mw) + (mw + 2 * state) + w;
  // Zeroing every gradient of the rank for the next step.
  const double zero = gw * static_cast<double>(parts.dense + parts.expert);
  return per_element * mine + zero;
}

double model_flops(const StepShape& s) {
  const auto& m = s.model;
  const double S = m.seq_len, h = m.hidden, E = m.gate.experts, K = m.gate.top_k;
  double blocks = 0;  // per token, forward
  for (int l = 0; l < m.layers; ++l) {
    blocks += 8 * h * h + 4 * S * h;  // qkv, projection, scores and probabilities x V
    const double ffn = 4 * h * static_cast<double>(m.ffn());
    blocks += m.is_moe(l) ? K * ffn + 2 * h * E : ffn;
  }
  const double tokens =
      static_cast<double>(s.micro_batch) * s.micro_batches * S * s.layout.expert * s.layout.data;
  // The LM head is outside the checkpointed blocks: forward and backward only.
  return (blocks * (forward_passes(s) + 2.0) + 2 * h * m.vocab * 3.0) * tokens;
}

double percent_of_peak(const StepShape& s, const Cluster& c, double seconds) {
  return model_flops(s) / (seconds * s.layout.world_size() * c.peak_flops) * 100;
}

namespace {

// The all-to-all time the overlap pipeline hides (time.hpp): per MoE layer, micro-batch and
// pass whose exchange communicates, (n - 1)/n x min(its all-to-all time, its experts' GEMMs).
double overlap_hidden(const StepShape& s, const Cluster& c, double all_to_all, double share) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  if (p.overlap <= 1 || s.layout.expert <= 1 || all_to_all <= 0) return 0;
  const Dims d = dims_of(s);
  const double n = exchange_of(s).chunks;
  double moe_layers = 0;
  for (int l = 0; l < m.layers; ++l) moe_layers += m.is_moe(l) ? 1 : 0;
  if (n <= 1 || moe_layers == 0) return 0;
  const double forwards = m.checkpoint && !p.cac ? 2 : 1;  // forward passes that communicate
  const double passes = (forwards + 1) * moe_layers * s.micro_batches;
  const double a = all_to_all / passes;
  const double w = static_cast<double>(s.element_bytes()), local = d.E / d.Ep;
  const GemmShape fc1{d.expert_rows, d.expert_f, d.h, local},
      fc2{d.expert_rows, d.h, d.expert_f, local};
  double forward = 0, backward = 0;
  for (const auto& g : {fc1, fc2}) {
    forward += gemm_time(g, c, w) / share;
    backward +=
        (gemm_time({g.m, g.k, g.n, g.count}, c, w) + gemm_time({g.k, g.n, g.m, g.count}, c, w)) /
        share;
  }
  return (n - 1) / n * moe_layers * s.micro_batches *
         (forwards * std::min(a, forward) + std::min(a, backward));
}

}  // namespace

StepTime step_time(const StepShape& s, const Cluster& c) {
  StepTime t;
  // CPU nodes: ranks beyond the cores time-share them.
  const int ranks = s.layout.world_size();
  const double share = c.core_share(std::min(ranks, c.devices_per_node), ranks);
  t.gemm = gemm_seconds(s, c) / share;
  t.memory_bound = memory_bound_bytes(s) / c.memory_bandwidth / share;
  t.optimizer = optimizer_bytes(s) / c.memory_bandwidth / share;
  t.compute = t.gemm + t.memory_bound + t.optimizer;

  // A call's time depends on its size (latencies, and messages too small to fill a link), so
  // the plan's collectives are timed size by size: the calls of each (op, group, bytes).
  std::map<std::tuple<int, int, std::uint64_t, std::uint64_t>, Traffic> sized;
  for (const PlannedCollective& x : step_collectives(s)) {
    Traffic& y =
        sized[{static_cast<int>(x.op), static_cast<int>(x.group), x.bytes_sent, x.bytes_recv}];
    y.calls += x.calls;
    y.bytes_sent += x.calls * x.bytes_sent;
    y.bytes_recv += x.calls * x.bytes_recv;
  }
  for (const auto& [key, x] : sized) {
    if (!x.calls) continue;
    const auto op = static_cast<CollectiveOp>(std::get<0>(key));
    t.collective[static_cast<std::size_t>(op)] += collective_time(
        op, static_cast<GroupKind>(std::get<1>(key)), x, s.layout, c, !exchange_of(s).split);
  }
  const double hidden =
      overlap_hidden(s, c, t.collective[static_cast<std::size_t>(CollectiveOp::all_to_all)], share);
  t.collective[static_cast<std::size_t>(CollectiveOp::all_to_all)] -= hidden;
  t.overlap_hidden = hidden;
  for (double seconds : t.collective) t.communication += seconds;
  return t;
}

}  // namespace ted::projection
