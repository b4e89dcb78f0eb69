// The time of one optimizer step on a cluster, from first principles (every assumption is
// printed in the projection's .assumptions.txt sidecar, ted_project.cpp):
//
// Compute, per rank:
//  - GEMMs, shape by shape (forward, the two backward GEMMs of each, the recompute): the tile
//    waves of the device's compute units at the large-shape rate, each tile paying the
//    k_overhead of its inner loop, or the GEMM's bytes over the memory bandwidth if that is
//    longer (so narrow GEMMs left after tensor splitting, and the attention's head-sized ones,
//    run below the large-shape rate);
//  - memory-bound work, bytes over the memory bandwidth: LayerNorm, GeLU, residual adds, the
//    materialised attention softmax (as the Megatron of the paper's time ran it), routing and
//    the permutation copies of the MoE exchange, the loss, gradient accumulation;
//  - the optimizer step: the gradient norm, the gradient copy into the temporary (the spike;
//    one tile at a time with tiles), Adam, and the write of the 16-bit weights.
// Communication, per collective kind: for each group of the kind, each level its messages cross
// (a device's own link, the socket link, the node's network injection) is shared by every
// group of the kind that crosses it at the same time, and the slowest level sets the time; an
// all-to-all spanning nodes pays a latency per peer. The slowest group of the kind counts (the
// step waits for it). Ranks fill nodes in order, tensor fastest (process_grid.hpp).
// Nothing overlaps, except with parallel.overlap = N: the MoE exchange in n = min(N, sent
// capacity) chunks is a pipeline, each chunk's all-to-alls in flight while another chunk's
// experts compute, with one chunk to fill it and one to drain it. Per MoE layer and pass whose
// exchange communicates (forward, a recompute without CAC, backward), with a the pass's
// all-to-all time (its n calls' latencies included) and b its experts' GEMM time, the step
// takes a + b - (n - 1)/n x min(a, b): that much all-to-all time is hidden.
#pragma once

#include <array>

#include "ted/comm/ledger.hpp"
#include "ted/projection/cluster.hpp"
#include "ted/projection/traffic.hpp"

namespace ted::projection {

struct StepTime {
  double gemm = 0;                                      // s
  double memory_bound = 0;                              // element-wise passes, s
  double optimizer = 0;                                 // the optimizer step's memory-bound work, s
  std::array<double, kCollectiveOpCount> collective{};  // s per CollectiveOp
  double compute = 0;                                   // gemm + memory_bound + optimizer
  double communication = 0;                             // sum of `collective`
  double overlap_hidden = 0;  // all-to-all time hidden behind the experts (taken off collective)
  double total() const { return compute + communication; }
  double of(CollectiveOp op) const { return collective[static_cast<std::size_t>(op)]; }
};

// GEMM FLOPs of one optimizer step on one rank (forward, backward = twice the forward, and the
// recompute). Equal to what the model counts it ran (tested).
double step_flops(const StepShape& shape);
// The time of one GEMM on a device of `cluster` with elements of `element_bytes`.
double gemm_time(const GemmShape& gemm, const Cluster& cluster, double element_bytes);
// The GEMM time of one step on one rank, all micro-batches, one device to itself: the forward
// (twice with checkpointing), backward's input and weight gradients, and with fused attention
// the scores Q K^T once more in backward (FlashAttention-2 recomputes them tile by tile).
double gemm_seconds(const StepShape& shape, const Cluster& cluster);

// Bytes the element-wise passes of one step move on one rank (reads + writes), and the bytes
// of its optimizer step.
double memory_bound_bytes(const StepShape& shape);
double optimizer_bytes(const StepShape& shape);

// The model FLOPs of one step of the whole job (all ranks), the numerator of % of peak as the
// field counts it (Narayanan et al., SC'21): per token and layer 24 h^2 + 4 S h forward for
// attention and a dense FFN, an MoE FFN as top_k dense FFNs plus the gate's 2 h E, the LM head
// 2 h V; backward twice the forward; with activation checkpointing the blocks' forward once
// more (the LM head is not recomputed).
// Capacity padding, dropped tokens and the recompute's collectives do not count.
double model_flops(const StepShape& shape);

StepTime step_time(const StepShape& shape, const Cluster& cluster);

// % of peak of a step that takes `seconds`: model_flops / (seconds x G x peak_flops) x 100.
double percent_of_peak(const StepShape& shape, const Cluster& cluster, double seconds);

// The time of `calls` collectives of one kind in the groups of one kind, with `bytes_sent` by
// each rank in all of them (the traffic model's per-rank totals). With whole_experts the
// expert-data groups are the T x D ranks that hold the same experts
// (ProcessGrid::expert_replica_members).
double collective_time(CollectiveOp op, GroupKind group, const Traffic& traffic,
                       const Layout& layout, const Cluster& cluster, bool whole_experts = false);

}  // namespace ted::projection
