#include "ted/projection/step.hpp"

#include <algorithm>

#include "ted/routing/gating.hpp"

namespace ted::projection {

namespace {

std::uint64_t padded(std::uint64_t size, std::uint64_t multiple) {
  return (size + multiple - 1) / multiple * multiple;
}

// Writes the plan's collectives with the ledger's byte convention (ledger.hpp), `count` in
// elements of `width` bytes: all_reduce the buffer, all_gather and reduce_scatter per rank,
// all_to_all the whole send buffer.
class Planner {
 public:
  Planner(std::vector<PlannedCollective>& out, std::uint64_t width) : out_(out), width_(width) {}
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

 private:
  void add(CollectiveOp op, GroupKind g, std::uint64_t times, std::uint64_t sent,
           std::uint64_t recv) {
    if (times > 0) out_.push_back({op, g, sent * width_, recv * width_, times});
  }
  std::vector<PlannedCollective>& out_;
  std::uint64_t width_;
};

}  // namespace

std::size_t element_bytes(const std::string& dtype) {
  return dtype == "fp32" ? 4 : 2;
}

StepShape shape_of(const train::TrainConfig& train, const Layout& layout) {
  StepShape s;
  s.model = train.model;
  s.micro_batch = train.data.micro_batch;
  s.micro_batches = train.data.micro_batches;
  s.layout = layout;
  s.parallel = train.parallel;
  s.element_bytes = element_bytes(train.run.dtype);
  return s;
}

model::ExchangePlan exchange_of(const StepShape& s) {
  const auto& m = s.model;
  const int T = s.layout.tensor;
  const bool split = model::experts_split(s.parallel.exchange(), T);
  const int capacity = routing::expert_capacity(m.gate, s.micro_batch * m.seq_len);
  return model::exchange_plan(m.gate.experts, m.hidden, split ? m.ffn() / T : m.ffn(),
                              s.layout.expert, T, 0, s.parallel.exchange(), capacity);
}

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

std::vector<PlannedCollective> step_collectives(const StepShape& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  const int T = s.layout.tensor, Ep = s.layout.expert, D = s.layout.data;
  const bool distributed = s.layout.world_size() > 1;  // the trainer uses groups at all
  const std::uint64_t micro = static_cast<std::uint64_t>(s.micro_batches);
  const std::uint64_t N = static_cast<std::uint64_t>(s.micro_batch) * m.seq_len;
  const std::uint64_t h = m.hidden;
  const bool checkpoint = m.checkpoint;
  const bool recompute_all_to_all = checkpoint && !p.cac;
  const bool recompute_reductions = checkpoint && !p.cac_all_reduce;
  std::vector<PlannedCollective> plan;
  Planner r(plan, s.element_bytes);
  const auto tensor = GroupKind::tensor, expert = GroupKind::expert;
  const model::ExchangePlan x = exchange_of(s);

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
    // Every collective of the exchange runs once per chunk of the sent capacity, each carrying
    // its rows' share (one chunk without overlap).
    for (int c = 0; c < x.chunks; ++c) {
      const std::uint64_t chunk_sent = x.blocks() * static_cast<std::uint64_t>(x.chunk_rows(c)) * h,
                          chunk_full = x.slicing ? chunk_sent * T : chunk_sent;
      // All-to-alls: dispatch and return in each forward (not again under CAC), and in backward.
      if (Ep > 1)
        r.all_to_all(expert, chunk_sent, micro * ((recompute_all_to_all ? 2 : 1) * 2 + 2));
      if (T == 1) continue;
      // DTD all-gathers rebuild the capacity after each all-to-all (also in the recompute); with
      // unsplit experts only the return side gathers.
      const std::uint64_t gathers_per_pass = x.slicing ? (x.split ? 2 : 1) : 0;
      r.all_gather(tensor, T, chunk_sent, micro * gathers_per_pass * (forwards + 1));
      if (!x.split) continue;
      // The expert output's tensor reduction (forward, recompute) and the input gradient's.
      const std::uint64_t forward_reductions = recompute_reductions ? forwards : 1;
      if (x.reduce_scatter)
        r.reduce_scatter(tensor, T, chunk_sent, micro * (forward_reductions + 1));
      else
        r.all_reduce(tensor, chunk_full, micro * (forward_reductions + 1));
    }
  }
  if (!distributed) return plan;

  // Gradients, in their type (the master type, or 16-bit: grad_bytes): unsplit experts summed
  // over the tensor group, then each part over its data group (reduce-scatter + all-gather of
  // the updated weights, in the storage type, with ZeRO-1; else all-reduce). The step's scalars
  // (losses, norm, overflow flag) go over the host control communicators, which the ledger does
  // not record.
  const ParameterParts parts = parameter_parts(m, s.layout, x.split);
  Planner g(plan, s.grad_bytes());
  if (!x.split) g.all_reduce(tensor, parts.expert);
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
  return plan;
}

std::vector<GemmShape> forward_gemms(const StepShape& s) {
  const auto& m = s.model;
  const model::ExchangePlan x = exchange_of(s);
  const double T = s.layout.tensor, B = s.micro_batch, S = m.seq_len, N = B * S, h = m.hidden;
  const double hl = h / T, Hl = m.heads / T, dh = hl / Hl, fl = m.ffn() / T;
  // Each local expert runs Ep x R rows (its rows from every rank of the expert group), over its
  // FFN width on this rank (f/T when split, all of it when not).
  const double expert_rows = static_cast<double>(x.Ep) * x.expert_rows();
  std::vector<GemmShape> g;
  for (int l = 0; l < m.layers; ++l) {
    g.push_back({N, 3 * hl, h});      // qkv (column-parallel)
    g.push_back({S, S, dh, B * Hl});  // scores Q K^T, per sequence and head
    g.push_back({S, dh, S, B * Hl});  // probabilities x V
    g.push_back({N, h, hl});          // output projection (row-parallel)
    if (m.is_moe(l)) {
      g.push_back({N, static_cast<double>(x.E), h});  // the gate
      g.push_back({expert_rows, static_cast<double>(x.f), h, static_cast<double>(x.El)});  // fc1
      g.push_back({expert_rows, h, static_cast<double>(x.f), static_cast<double>(x.El)});  // fc2
    } else {
      g.push_back({N, fl, h});  // fc1 (column-parallel)
      g.push_back({N, h, fl});  // fc2 (row-parallel)
    }
  }
  g.push_back({N, static_cast<double>(m.vocab), h});  // LM head
  return g;
}

}  // namespace ted::projection
