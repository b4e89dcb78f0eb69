#include "ted/projection/step.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <tuple>

#include "ted/routing/gating.hpp"
#include "ted/routing/workload.hpp"
#include "ted/train/data.hpp"

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

StepShape shape_of(const train::TrainConfig& train, const Layout& layout) {
  StepShape s;
  s.model = train.model;
  s.micro_batch = train.data.micro_batch;
  s.micro_batches = train.data.micro_batches;
  s.layout = layout;
  s.parallel = train.parallel;
  s.dtype = train.run.dtype;
  return s;
}

model::ExchangePlan exchange_of(const StepShape& s, int capacity) {
  const auto& m = s.model;
  return model::exchange_plan(m.gate.experts, m.hidden, m.ffn(), s.layout.expert, s.layout.tensor,
                              0, s.parallel.exchange(), capacity);
}

model::ExchangePlan exchange_of(const StepShape& s) {
  return exchange_of(s, routing::expert_capacity(s.model.gate, s.micro_batch * s.model.seq_len));
}

namespace {

// A gating group's loads, computed once per process: the paper's points enumerate millions of
// tokens per layer, and every part of the model (traffic, time, memory) reads the same loads.
using GroupKey = std::tuple<int, int, double, double, int, int, int, std::uint64_t, std::int64_t,
                            int, std::int64_t, int>;
std::vector<int> cached_group_load(const StepShape& s, int layer, std::int64_t first_token) {
  static std::mutex mutex;
  static std::map<GroupKey, std::vector<int>> cache;
  const auto& g = s.model.gate;
  const auto& w = g.workload;
  const int tokens = s.micro_batch * s.model.seq_len;
  const GroupKey key{static_cast<int>(w.kind), w.hot_experts, w.hot_share, w.zipf_s,
                     w.zero_experts,           g.experts,     g.top_k,     s.model.seed,
                     s.routing_step,           layer,         first_token, tokens};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto found = cache.find(key);
    if (found != cache.end()) return found->second;
  }
  std::vector<std::int32_t> choices(static_cast<std::size_t>(tokens) * g.top_k);
  routing::assign_experts(w, g.experts, g.top_k, s.model.seed, s.routing_step, layer, first_token,
                          tokens, choices.data());
  std::vector<int> load(static_cast<std::size_t>(g.experts), 0);
  for (std::int32_t e : choices) ++load[static_cast<std::size_t>(e)];
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(load)).first->second;
}

}  // namespace

std::vector<int> group_load(const StepShape& s, int layer, int data_index, int expert_rank,
                            int micro) {
  const int Ep = s.layout.expert, ranks = Ep * s.layout.data;
  // The trainer's numbering: the rank's index in its non-expert data group is e + Ep d.
  const std::int64_t first_token =
      train::first_sample(s.routing_step, s.micro_batches, ranks, micro,
                          expert_rank + Ep * data_index, s.micro_batch) *
      s.model.seq_len;
  return cached_group_load(s, layer, first_token);
}

int StepLoad::largest_capacity() const {
  int largest = 0;
  for (const auto& layers : micro)
    for (const auto& l : layers) largest = std::max(largest, l.capacity);
  return largest;
}

StepLoad step_load(const StepShape& s) {
  const auto& m = s.model;
  StepLoad load;
  if (!m.gate.workload.forced()) return load;
  load.forced = true;
  load.dropless = m.gate.dropless;
  const int E = m.gate.experts, Ep = s.layout.expert, El = E / Ep, D = s.layout.data;
  const int Mb = s.micro_batches;
  const int formula = routing::expert_capacity(m.gate, s.micro_batch * m.seq_len);
  load.expert_load.assign(static_cast<std::size_t>(m.layers), {});
  // Per expert group: its micro-batches' layers, and the sum of their stragglers' rows.
  std::vector<std::vector<std::vector<MoeLayerLoad>>> groups(static_cast<std::size_t>(D));
  std::vector<long long> group_rows(static_cast<std::size_t>(D), 0);
  for (int d = 0; d < D; ++d) {
    auto& group = groups[static_cast<std::size_t>(d)];
    group.assign(static_cast<std::size_t>(Mb),
                 std::vector<MoeLayerLoad>(static_cast<std::size_t>(m.layers)));
    for (int l = 0; l < m.layers; ++l) {
      if (!m.is_moe(l)) continue;
      auto& total = load.expert_load[static_cast<std::size_t>(l)];
      total.resize(static_cast<std::size_t>(E), 0);
      for (int mb = 0; mb < Mb; ++mb) {
        std::vector<std::vector<int>> sources(static_cast<std::size_t>(Ep));
        int capacity = formula;
        if (m.gate.dropless) capacity = 0;
        for (int e = 0; e < Ep; ++e) {
          sources[static_cast<std::size_t>(e)] = group_load(s, l, d, e, mb);
          for (int x = 0; x < E; ++x) {
            const int n = sources[static_cast<std::size_t>(e)][static_cast<std::size_t>(x)];
            total[static_cast<std::size_t>(x)] += n;
            if (m.gate.dropless) capacity = std::max(capacity, n);  // the group agrees on it
          }
        }
        const model::ExchangePlan x = exchange_of(s, capacity);
        MoeLayerLoad layer;
        layer.capacity = capacity;
        long long most = -1;
        for (int rank = 0; rank < Ep; ++rank) {  // the straggler: the most rows
          std::vector<int> rows(static_cast<std::size_t>(El), 0);
          long long sum = 0;
          for (int le = 0; le < El; ++le)
            for (const auto& source : sources) {
              const int kept = std::min(source[static_cast<std::size_t>(rank * El + le)], capacity);
              const int r = s.skip_empty_slots ? x.used_rows(kept) : x.expert_rows();
              rows[static_cast<std::size_t>(le)] += r;
              sum += r;
            }
          if (sum > most) most = sum, layer.expert_rows = std::move(rows);
        }
        for (const auto& source : sources)
          for (int n : source) layer.dropped += std::max(0, n - capacity);
        load.dropped += layer.dropped;
        group_rows[static_cast<std::size_t>(d)] += most;
        group[static_cast<std::size_t>(mb)][static_cast<std::size_t>(l)] = std::move(layer);
      }
    }
  }
  load.data_index =
      static_cast<int>(std::max_element(group_rows.begin(), group_rows.end()) - group_rows.begin());
  load.micro = std::move(groups[static_cast<std::size_t>(load.data_index)]);
  return load;
}

model::ExchangePlan largest_exchange(const StepShape& s) {
  if (!s.model.gate.workload.forced() || !s.model.gate.dropless) return exchange_of(s);
  return exchange_of(s, step_load(s).largest_capacity());
}

model::GptParamSpecs param_specs(const model::ModelConfig& m, const Layout& layout,
                                 bool split_experts) {
  return model::gpt_param_specs(m, {layout.tensor, 0, layout.expert, 0, split_experts});
}

int expert_data_ranks(const Layout& layout, bool split_experts) {
  return split_experts ? layout.data : layout.tensor * layout.data;
}

ParameterParts parameter_parts(const model::ModelConfig& m, const Layout& layout,
                               bool split_experts) {
  const model::GptParamSpecs specs = param_specs(m, layout, split_experts);
  const auto [dense, expert] = specs.elements({0, static_cast<int>(specs.specs.size())});
  return {padded(dense, static_cast<std::uint64_t>(layout.expert) * layout.data),
          padded(expert, static_cast<std::uint64_t>(expert_data_ranks(layout, split_experts)))};
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
  Planner r(plan, s.element_bytes());
  const auto tensor = GroupKind::tensor, expert = GroupKind::expert;
  const model::ExchangePlan formula = exchange_of(s);
  // Dropless under a forced workload: each micro-batch's exchange at its group's capacity.
  const StepLoad load = m.gate.dropless && m.gate.workload.forced() ? step_load(s) : StepLoad{};

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
    // its rows' share (one chunk without overlap), `micro` times at the plan `x`.
    auto exchange = [&](const model::ExchangePlan& x, std::uint64_t micro) {
      for (int c = 0; c < x.chunks; ++c) {
        const std::uint64_t chunk_sent =
                                x.blocks() * static_cast<std::uint64_t>(x.chunk_rows(c)) * h,
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
    };
    if (load.forced)
      for (const auto& layers : load.micro)
        exchange(exchange_of(s, layers[static_cast<std::size_t>(l)].capacity), 1);
    else
      exchange(formula, micro);
  }
  // The tied embedding over T > 1 ranks (model.tie_embeddings): the embedding's all-reduce in
  // the forward and the LM head's input gradient in the backward, in the storage type; the
  // vocabulary-parallel cross-entropy's row statistics in the master type: each row's max, then
  // its sum of exponentials with its target's logit. Outside the blocks: never recomputed.
  if (m.tie_embeddings && T > 1) {
    r.all_reduce(tensor, N * h, micro * 2);
    Planner statistics(plan, s.master_bytes());
    statistics.all_reduce(tensor, N, micro);
    statistics.all_reduce(tensor, 2 * N, micro);
  }
  if (!distributed) return plan;
  const model::ExchangePlan& x = formula;

  // Gradients, in their type (the master type, or 16-bit: grad_bytes), each part over its data
  // group (reduce-scatter + all-gather of the updated weights, in the storage type, with ZeRO-1;
  // else all-reduce); unsplit experts over the T x D ranks that hold them, which sums the tensor
  // ranks' token slices too. The step's scalars (losses, norm, overflow flag) go over the host
  // control communicators, which the ledger does not record.
  const ParameterParts parts = parameter_parts(m, s.layout, x.split);
  Planner g(plan, s.grad_bytes());
  const std::pair<GroupKind, std::pair<std::uint64_t, int>> data_parts[] = {
      {GroupKind::nonexpert_data, {parts.dense, Ep * D}},
      {GroupKind::expert_data, {parts.expert, expert_data_ranks(s.layout, x.split)}}};
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
  return forward_gemms(s, StepLoad{}, 0);
}

std::vector<GemmShape> forward_gemms(const StepShape& s, const StepLoad& load, int micro) {
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
      if (load.forced) {
        // The loaded rank's experts, those of equal rows as one batched GEMM; an expert with no
        // rows runs nothing.
        std::map<int, int> experts_of_rows;
        for (int rows :
             load.micro[static_cast<std::size_t>(micro)][static_cast<std::size_t>(l)].expert_rows)
          if (rows > 0) ++experts_of_rows[rows];
        for (const auto& [rows, count] : experts_of_rows) {
          g.push_back(
              {static_cast<double>(rows), static_cast<double>(x.f), h, static_cast<double>(count)});
          g.push_back(
              {static_cast<double>(rows), h, static_cast<double>(x.f), static_cast<double>(count)});
        }
        continue;
      }
      g.push_back({expert_rows, static_cast<double>(x.f), h, static_cast<double>(x.El)});  // fc1
      g.push_back({expert_rows, h, static_cast<double>(x.f), static_cast<double>(x.El)});  // fc2
    } else {
      g.push_back({N, fl, h});  // fc1 (column-parallel)
      g.push_back({N, h, fl});  // fc2 (row-parallel)
    }
  }
  // The LM head: the whole vocabulary, or with tied embeddings this rank's slice of it (the
  // vocabulary padded to a multiple of T, over T).
  g.push_back({N, static_cast<double>(m.vocab_rows(s.layout.tensor)), h});
  return g;
}

}  // namespace ted::projection
