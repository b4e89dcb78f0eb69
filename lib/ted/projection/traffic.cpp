#include "ted/projection/traffic.hpp"

#include <algorithm>

#include "ted/routing/gating.hpp"

namespace ted::projection {

namespace {

std::uint64_t padded(std::uint64_t size, std::uint64_t multiple) {
  return (size + multiple - 1) / multiple * multiple;
}

class Recorder {
 public:
  explicit Recorder(std::size_t width) : width_(width) {}
  // Counts follow ledger.hpp: `count` elements per rank (all_reduce: the buffer).
  void all_reduce(GroupKind g, std::uint64_t count, std::uint64_t times = 1) {
    add(CollectiveOp::all_reduce, g, times, count, count);
  }
  void all_gather(GroupKind g, int n, std::uint64_t count_per_rank, std::uint64_t times = 1) {
    add(CollectiveOp::all_gather, g, times, count_per_rank, count_per_rank * n);
  }
  void reduce_scatter(GroupKind g, int n, std::uint64_t count_per_rank, std::uint64_t times = 1) {
    add(CollectiveOp::reduce_scatter, g, times, count_per_rank * n, count_per_rank);
  }
  void all_to_all(GroupKind g, std::uint64_t total, std::uint64_t times = 1) {
    add(CollectiveOp::all_to_all, g, times, total, total);
  }
  StepTraffic result() const { return traffic_; }

 private:
  void raw(CollectiveOp op, GroupKind g, std::uint64_t times, std::uint64_t sent_bytes,
           std::uint64_t recv_bytes) {
    Traffic& t = traffic_[static_cast<std::size_t>(op)][static_cast<std::size_t>(g)];
    t.calls += times;
    t.bytes_sent += times * sent_bytes;
    t.bytes_recv += times * recv_bytes;
  }
  void add(CollectiveOp op, GroupKind g, std::uint64_t times, std::uint64_t sent,
           std::uint64_t recv) {
    raw(op, g, times, sent * width_, recv * width_);
  }
  std::size_t width_;
  StepTraffic traffic_{};
};

}  // namespace

ParameterParts block_parameters(const model::ModelConfig& m, const Layout& layout,
                                bool split_experts, int layer) {
  const std::uint64_t h = m.hidden, f = m.ffn(), T = layout.tensor, E = m.gate.experts;
  const std::uint64_t El = E / layout.expert, fl = split_experts ? f / T : f;
  ParameterParts block;
  block.dense += 4 * h;                      // two LayerNorms
  block.dense += h * 3 * h / T + 3 * h / T;  // qkv (column-parallel)
  block.dense += h / T * h + h;              // proj (row-parallel) and its bias
  if (m.is_moe(layer)) {
    block.dense += h * E;  // gate (replicated)
    block.expert += El * (h * fl + fl + fl * h + h);
  } else {
    block.dense += h * (f / T) + f / T + (f / T) * h + h;  // fc1, fc2 and biases
  }
  return block;
}

ParameterParts parameter_parts(const model::ModelConfig& m, const Layout& layout,
                               bool split_experts) {
  const std::uint64_t h = m.hidden, V = m.vocab;
  ParameterParts parts;
  parts.dense = V * h + static_cast<std::uint64_t>(m.seq_len) * h;  // the embeddings
  for (int l = 0; l < m.layers; ++l) {
    const ParameterParts block = block_parameters(m, layout, split_experts, l);
    parts.dense += block.dense;
    parts.expert += block.expert;
  }
  parts.dense += 2 * h + h * V;  // final LayerNorm, LM head
  return {padded(parts.dense, static_cast<std::uint64_t>(layout.expert) * layout.data),
          padded(parts.expert, static_cast<std::uint64_t>(layout.data))};
}

StepTraffic step_traffic(const StepShape& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  const int T = s.layout.tensor, Ep = s.layout.expert, D = s.layout.data;
  const bool distributed = s.layout.world_size() > 1;  // the trainer uses groups at all
  const std::uint64_t micro = static_cast<std::uint64_t>(s.micro_batches);
  const std::uint64_t N = static_cast<std::uint64_t>(s.micro_batch) * m.seq_len;
  const std::uint64_t h = m.hidden, E = m.gate.experts;
  const bool checkpoint = m.checkpoint;
  const bool recompute_all_to_all = checkpoint && !p.cac;
  const bool recompute_reductions = checkpoint && !p.cac_all_reduce;
  Recorder r(s.element_bytes);
  const auto tensor = GroupKind::tensor, expert = GroupKind::expert;

  // Capacity of a micro-batch's gating group, padded when the all-to-alls carry slices.
  const std::uint64_t C = model::expert_capacity(m.gate, static_cast<int>(N));
  const bool split = p.split_experts || T == 1;
  const bool slicing = (p.dtd || !split) && T > 1;
  const bool reduce_scatter = slicing && split && p.reduce_scatter;
  const std::uint64_t Cp = slicing ? (C + T - 1) / T * T : C;
  const std::uint64_t sliced = slicing ? Cp / T : Cp;

  for (int l = 0; l < m.layers; ++l) {
    const bool moe = m.is_moe(l);
    // Attention: the projection's all-reduce forward (and in the recompute), the qkv input
    // gradient's backward; the dense FFN the same for fc2 and fc1.
    const std::uint64_t row_parallel = moe ? 1 : 2;
    if (T > 1) {
      r.all_reduce(tensor, N * h, micro * row_parallel * (recompute_reductions ? 2 : 1));
      r.all_reduce(tensor, N * h, micro * row_parallel);
    }
    if (!moe) continue;
    const std::uint64_t forwards = checkpoint ? 2 : 1;
    // With overlap every collective of the exchange runs once per chunk of the sent capacity
    // (model/moe.cpp: at most one chunk per row), each carrying its rows' share.
    const std::uint64_t chunks =
        std::max<std::uint64_t>(1, std::min<std::uint64_t>(p.overlap, sliced));
    for (std::uint64_t c = 0; c < chunks; ++c) {
      const std::uint64_t rows = sliced * (c + 1) / chunks - sliced * c / chunks;
      const std::uint64_t chunk_sent = E * rows * h,
                          chunk_full = slicing ? chunk_sent * T : chunk_sent;
      // All-to-alls: dispatch and return in each forward (not again under CAC), and in backward.
      if (Ep > 1)
        r.all_to_all(expert, chunk_sent, micro * ((recompute_all_to_all ? 2 : 1) * 2 + 2));
      if (T == 1) continue;
      // DTD all-gathers rebuild the capacity after each all-to-all (also in the recompute); with
      // unsplit experts only the return side gathers.
      const std::uint64_t gathers_per_pass = slicing ? (split ? 2 : 1) : 0;
      r.all_gather(tensor, T, chunk_sent, micro * gathers_per_pass * (forwards + 1));
      if (!split) continue;
      // The expert output's tensor reduction (forward, recompute) and the input gradient's.
      const std::uint64_t forward_reductions = recompute_reductions ? forwards : 1;
      if (reduce_scatter)
        r.reduce_scatter(tensor, T, chunk_sent, micro * (forward_reductions + 1));
      else
        r.all_reduce(tensor, chunk_full, micro * (forward_reductions + 1));
    }
  }
  if (!distributed) return r.result();

  // Gradients, in their type (the master type, or 16-bit: grad_bytes): unsplit experts summed
  // over the tensor group, then each part over its data group (reduce-scatter + all-gather of
  // the updated weights, in the storage type, with ZeRO-1; else all-reduce). The step's scalars
  // (losses, norm, overflow flag) go over the host control communicators, which the ledger does
  // not record.
  const ParameterParts parts = parameter_parts(m, s.layout, split);
  Recorder g(s.grad_bytes());
  if (!split) g.all_reduce(tensor, parts.expert);
  const std::pair<GroupKind, std::pair<std::uint64_t, int>> data_parts[] = {
      {GroupKind::nonexpert_data, {parts.dense, Ep * D}},
      {GroupKind::expert_data, {parts.expert, D}}};
  for (const auto& [group, part] : data_parts) {
    auto [size, n] = part;
    if (p.zero1) {
      g.reduce_scatter(group, n, size / static_cast<std::uint64_t>(n));
      r.all_gather(group, n, size / static_cast<std::uint64_t>(n));
    } else {
      g.all_reduce(group, size);
    }
  }
  StepTraffic total = r.result();
  const StepTraffic gradients = g.result();
  for (std::size_t op = 0; op < kCollectiveOpCount; ++op)
    for (std::size_t group = 0; group < kGroupKindCount; ++group) {
      Traffic& t = total[op][group];
      t.calls += gradients[op][group].calls;
      t.bytes_sent += gradients[op][group].bytes_sent;
      t.bytes_recv += gradients[op][group].bytes_recv;
    }
  return total;
}

const Traffic& at(const StepTraffic& traffic, CollectiveOp op, GroupKind group) {
  return traffic[static_cast<std::size_t>(op)][static_cast<std::size_t>(group)];
}

}  // namespace ted::projection
