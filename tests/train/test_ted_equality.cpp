// TED on MPI ranks equals the single-process fp32 CPU reference: for every layout (T, Ep, D) of
// the launched rank count, every switch set (DTD, reduce-scatter, checkpointing, CAC, ZeRO-1
// off, tiled optimizer step, experts not split over T) and top-1 / top-2 gating with drops and
// RTS (and, in fp32, dropless gating, whose capacity the expert group agrees on), 3 optimizer
// steps on the test's backend (device, communicator, dtype: test_env.hpp), with fused attention
// and, for two switch sets, materialised attention, give
//   - per-step losses and the final parameter fingerprint within a tolerance of the reference,
//   - per-step gradient norms within it, and
//   - the gradients themselves before the optimizer: each rank's reduced shard against the
//     matching elements of the reference's gradient, scored per tensor by max |a - b| / max |b|
//     (a missing 1/DP or a double tensor-group sum fails this, which Adam's first step hides).
// 16-bit runs are also held to the 16-bit single process on the same device, and run again with
// 16-bit gradients (training.grad_dtype) for the switch sets that move gradients. The global batch
// is the same for every layout (micro-batches per rank = G / DP), so one reference run per
// gating serves them all; every rank computes it itself.
// The model is Megatron's GPT, the default: the embedding tied to the LM head and split over the
// tensor group by vocabulary (19 words, padded at every T > 1), the cross-entropy
// vocabulary-parallel, and dropout 0.1 (the paper's setting) on the attention probabilities and
// the sub-layers' outputs, whose masks every layout draws alike. The untied model without dropout
// (model.tie_embeddings: false, model.dropout: 0) has a case of its own.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "comm/test_env.hpp"
#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/core/random.hpp"
#include "ted/grid/ted_groups.hpp"
#include "ted/projection/memory.hpp"
#include "ted/projection/time.hpp"
#include "ted/projection/traffic.hpp"
#include "ted/train/trainer.hpp"

namespace {

bool on_cpu() {
  return ted::test::device().kind() == ted::DeviceKind::cpu;
}
bool sixteen_bit() {
  return ted::test::dtype() != "fp32";
}

// Tolerances, relative. fp32 on the CPU differs from the reference only by the order of sums
// across ranks; cuBLAS (fp32, no TF32) sums in its own order as well. 16-bit: the 1e-2
// for losses; gradients carry bf16's 8-bit mantissa through every activation.
double loss_tolerance() {
  if (sixteen_bit()) return 1e-2;
  return on_cpu() ? 1e-5 : 1e-4;
}
// The gradient norm: as the losses, except 16-bit, whose routing flips (see gradients_close)
// move whole expert rows of the gradient: 5e-2 (bf16: measured <= 2.7e-2 at 1 to 8 ranks;
// fp16: one top-2 decision of step 2 sits so close to a tie that the attention variant, or the
// order of a T = 2 all-reduce, flips it: 2.9e-2 at 4 ranks).
double norm_tolerance() {
  return sixteen_bit() ? 5e-2 : loss_tolerance();
}

ted::train::TrainConfig tiny(int world, int top_k, bool dropless = false) {
  ted::train::TrainConfig c;
  bool by_three = world % 3 == 0;
  c.model.vocab = 19;
  c.model.seq_len = 8;
  c.model.heads = by_three ? 6 : 8;
  c.model.hidden = 4 * c.model.heads;
  c.model.layers = 2;
  c.model.gate.experts = by_three ? 6 : 8;
  c.model.gate.top_k = top_k;
  c.model.gate.capacity_factor = top_k == 1 ? 0.5 : 0.75;  // drops happen
  c.model.gate.min_capacity = 1;
  c.model.gate.random_token_selection = true;
  c.model.gate.dropless = dropless;  // the largest load, agreed over the expert group
  c.model.init_std = 0.1;
  c.model.dropout = 0.1;  // with the tied, vocabulary-parallel embedding (the default)
  // Adam's first steps move every element by about lr whatever the size of its gradient, so an
  // element whose tiny gradient rounds to the other sign in 16-bit moves 2 lr the other way.
  // With lr = 1e-2 (a tenth of the init std per step) that alone makes a 16-bit run's loss a
  // few percent off fp32 by step 3, on one process; 1e-3 keeps the comparison about precision.
  c.optimizer.lr = 1e-3;
  c.optimizer.min_lr = 1e-4;
  c.optimizer.warmup_steps = 1;
  c.data.micro_batch = 2;
  c.data.micro_batches = world;  // the reference: all G micro-batches on one process
  c.steps = 3;
  c.run.loss_scale = 1024;  // fp16: small enough that no step of these runs overflows
  return c;
}

struct Run {
  std::vector<double> losses, norms;
  double fingerprint = 0;
  int dropped = 0, skipped = 0;
  // Whether every reduced gradient element (scaled, as stored) was a value of the test's 16-bit
  // type: what 16-bit gradients must give, and fp32 ones almost never do.
  bool gradients_in_storage_type = true;
  // Per step, this rank's reduced gradient shards (unscaled).
  std::vector<std::vector<ted::train::GradientShard>> gradients;
  // Per step, each MoE layer's choices per expert (before drops): where a routing decision went.
  std::vector<std::vector<std::vector<std::int64_t>>> loads;
  ted::model::ParamLayout layout;
  // A single-process run (a reference): per step, its gradient whole by flat index, and per
  // tensor where it starts, its size and its largest |gradient| (what every run held to this
  // reference is scored against, made once).
  struct Place {
    std::size_t offset, size;
    double scale;
  };
  struct Whole {
    std::vector<double> values;
    std::map<std::string, Place> by_name;
  };
  std::vector<Whole> whole;
};

// Whether `value` is exactly a value of the test's 16-bit type (false for fp32 runs).
bool in_storage_type(double value) {
  const auto f = static_cast<float>(value);
  if (static_cast<double>(f) != value) return false;
  static const std::string dtype = ted::test::dtype();  // called for every gradient element
  if (dtype == "bf16") return ted::bf16_bits_to_float(ted::float_to_bf16_bits(f)) == f;
  if (dtype == "fp16") return ted::f16_bits_to_float(ted::float_to_f16_bits(f)) == f;
  return false;
}

Run train(const ted::train::TrainConfig& config, ted::Device& device, ted::TedGroups* groups) {
  ted::train::Trainer trainer(config, device, groups);
  Run run;
  std::vector<ted::train::GradientShard> shards;
  trainer.set_gradient_probe([&](const auto& probe) { shards = probe; });
  for (int step = 0; step < config.steps; ++step) {
    auto record = trainer.step(step);
    run.losses.push_back(record.loss);
    run.norms.push_back(record.grad_norm);
    run.dropped += record.dropped;
    run.skipped += record.skipped;
    for (auto& shard : shards)
      for (double& g : shard.values) {
        run.gradients_in_storage_type &= in_storage_type(g);
        g /= record.loss_scale;
      }
    run.gradients.push_back(shards);
    run.loads.push_back(record.expert_load);
  }
  run.fingerprint = trainer.fingerprint();
  run.layout = trainer.params();
  if (!groups)  // a reference: one process, so its shards are the parts of the whole
    for (const auto& step_shards : run.gradients) {
      Run::Whole& whole = run.whole.emplace_back();
      whole.values.assign(run.layout.total(), 0.0);
      for (const auto& shard : step_shards)
        std::copy(shard.values.begin(), shard.values.end(), whole.values.begin() + shard.first);
      for (const auto& spec : run.layout.specs()) {
        const std::size_t size = spec.size();
        double m = 0;
        for (std::size_t i = spec.offset; i < spec.offset + size; ++i)
          m = std::max(m, std::abs(whole.values[i]));
        whole.by_name[spec.name] = {spec.offset, size, m};
      }
    }
  return run;
}

// The single-process reference on the CPU in fp32 (or in `dtype` on the test's device).
Run reference(int world, int top_k, const std::string& dtype = "fp32", bool dropless = false) {
  auto config = tiny(world, top_k, dropless);
  config.run.dtype = ted::parse_dtype(dtype);
  if (dtype == "fp32") {
    auto cpu = ted::make_cpu_device();
    return train(config, *cpu, nullptr);
  }
  return train(config, ted::test::device(), nullptr);
}

double relative(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(b), 1e-30);
}

// How far this rank's gradient shards of `step` are from the reference's gradient: per tensor,
// max |a - b| / max |b| (b the reference tensor, whole), the worst tensor; and the relative L2
// error over the shard. Both the largest over all ranks (on the control world).
struct GradientError {
  double max_normalised = 0;
  double l2 = 0;
  double padding = 0;  // the largest |gradient| of the tied embedding's padding rows: must be 0
};

GradientError gradient_error(const Run& run, const Run& ref, int step) {
  const Run::Whole& reference_step = ref.whole.at(step);  // `ref` is a single-process run
  const std::vector<double>& whole = reference_step.values;
  const auto& by_name = reference_step.by_name;
  // This rank's tensors in flat order, to find the tensor of a flat index; each with its
  // reference tensor and its slice map, looked up once (the loop below visits every element).
  struct Mine {
    std::size_t offset, size;
    ted::model::SliceMap map;
    const Run::Place* reference;
  };
  std::vector<Mine> mine;
  for (const auto& spec : run.layout.specs())
    mine.push_back({spec.offset, spec.size(), spec.slice_map(), &by_name.at(spec.name)});
  std::sort(mine.begin(), mine.end(), [](auto& a, auto& b) { return a.offset < b.offset; });
  double worst = 0, diff2 = 0, ref2 = 0, padding = 0;
  for (const auto& shard : run.gradients[step]) {
    auto spec = mine.begin();
    for (std::size_t k = 0; k < shard.values.size(); ++k) {
      const std::size_t flat = shard.first + k;
      while (spec != mine.end() && spec->offset + spec->size <= flat) ++spec;
      if (spec == mine.end() || spec->offset > flat) continue;  // padding
      const Run::Place& reference = *spec->reference;
      const std::size_t global = ted::model::global_index(spec->map, flat - spec->offset);
      if (global >= reference.size) {  // the vocabulary's padding rows (tied embeddings, T > 1)
        padding = std::max(padding, std::abs(shard.values[k]));
        continue;
      }
      const double want = whole[reference.offset + global];
      const double diff = shard.values[k] - want;
      worst = std::max(worst, std::abs(diff) / std::max(reference.scale, 1e-30));
      diff2 += diff * diff;
      ref2 += want * want;
    }
  }
  double errors[3] = {worst, std::sqrt(diff2 / std::max(ref2, 1e-300)), padding};
  ted::test::control().all_reduce(errors, errors, 3, ted::DataType::f64, ted::ReduceOp::max);
  return {errors[0], errors[1], errors[2]};
}

// Gradients against the reference, by dtype (measured over every layout, switch set and gating
// of this file at 1 to 8 CPU ranks; the bounds leave a margin):
//   fp32: per-tensor max-normalised error < 1e-4 at every step (measured <= 4.5e-6 on the CPU;
//   cuBLAS sums in its own order: 1e-3 there);
//   16-bit: step 0 only, where the weights are still equal everywhere (after it, Adam's sign-
//   like first steps turn rounding in tiny gradients into different weights). fp16 per-tensor
//   < 5e-2 where every routing decision is the reference's: measured <= 2.9e-3 without dropout;
//   with dropout 0.1 at T = 4 the MoE gate's gradient (x^T d_logits over the tokens, much of it
//   cancelling, d_logits in 16-bit) is 2.9e-2 off in a few elements, where the tensor group's
//   16-bit partial sums feed it (1.5e-2 at p = 0.05, 4.4e-3 at 0.2: rounding, not the masks).
//   bf16's 8-bit mantissa flips a few routing decisions when T > 1 rounds the tensor
//   all-reduce's partial sums to bf16, and a flip moves whole expert rows: relative L2 over the
//   shard < 0.15 (measured <= 0.073); so does fp16 where a decision flipped (`flipped`: the
//   step's per-expert loads differ from the reference's; one top-1 choice at T = 4: relative L2
//   2.0e-3, the gate's column of that expert 4.9e-2 off).
bool gradients_close(const GradientError& e, int step, double* worst_seen, bool flipped) {
  const std::string dtype = ted::test::dtype();
  if (dtype == "fp32") {
    *worst_seen = std::max(*worst_seen, e.max_normalised);
    return e.max_normalised < (on_cpu() ? 1e-4 : 1e-3);
  }
  if (step != 0) return true;
  if (dtype == "fp16" && !flipped) {
    *worst_seen = std::max(*worst_seen, e.max_normalised);
    return e.max_normalised < 5e-2;
  }
  *worst_seen = std::max(*worst_seen, e.l2);
  return e.l2 < 0.15;
}

struct Switches {
  const char* name;
  bool dtd, reduce_scatter, checkpoint, cac, zero1;
  std::int64_t tile;
  bool split_experts = true;
  bool cac_all_reduce = false;
  // model.attention; the references use the default (fused), so the materialised runs are
  // also held to the fused single process.
  ted::model::AttentionKind attention = ted::model::AttentionKind::fused;
};
const Switches kSwitches[] = {
    {"baseline", false, false, false, false, true, 0},
    {"dtd", true, false, false, false, true, 0},
    {"dtd+reduce-scatter", true, true, false, false, true, 0},
    {"checkpointing", false, false, true, false, true, 0},
    {"checkpointing+cac", false, false, true, true, true, 0},
    {"all: dtd+rs+checkpointing+cac+tiles", true, true, true, true, true, 7},
    {"no zero-1", false, false, false, false, false, 0},
    {"tiled optimizer (11 elements)", false, false, false, false, true, 11},
    {"experts not split", false, false, false, false, true, 0, false},
    {"experts not split + checkpointing + cac", false, false, true, true, true, 0, false},
    {"checkpointing+cac with all-reduce stash", false, false, true, true, true, 0, true, true},
    {"dtd+rs+checkpointing+cac with all-reduce stash", true, true, true, true, true, 0, true, true},
    {"materialized attention", false, false, false, false, true, 0, true, false,
     ted::model::AttentionKind::materialized},
    {"materialized attention + dtd+rs+checkpointing+cac", true, true, true, true, true, 0, true,
     false, ted::model::AttentionKind::materialized},
};

// The switch sets that change where gradients live or move (the shard, the all-reduce without
// ZeRO-1, unsplit experts' reduction over their T x D replicas, tiles): the 16-bit gradient cases
// (training.grad_dtype = run.dtype) run these, to keep CI short.
bool moves_gradients(const Switches& sw) {
  for (const char* name : {"baseline", "all: dtd+rs+checkpointing+cac+tiles", "no zero-1",
                           "experts not split + checkpointing + cac"})
    if (std::string(name) == sw.name) return true;
  return false;
}
// The gradient types a case runs with: fp32; in 16-bit runs also 16-bit gradients, for the
// switch sets above.
std::vector<std::string> gradient_types(const Switches& sw) {
  if (!sixteen_bit() || !moves_gradients(sw)) return {"fp32"};
  return {"fp32", ted::test::dtype()};
}

ted::train::TrainConfig configured(int G, int top_k, const ted::Layout& layout, const Switches& sw,
                                   bool dropless = false) {
  auto config = tiny(G, top_k, dropless);
  const int dp = layout.expert * layout.data;
  config.data.micro_batches = G / dp;  // same global batch as the reference
  config.parallel = {layout.tensor,     layout.expert, layout.data, sw.dtd,          sw.cac,
                     sw.reduce_scatter, sw.zero1,      sw.tile,     sw.split_experts};
  config.model.checkpoint = sw.checkpoint;
  config.model.attention = sw.attention;
  config.parallel.cac_all_reduce = sw.cac_all_reduce;
  config.run.dtype = ted::parse_dtype(ted::test::dtype());
  return config;
}

// The largest differences seen against the references, for the summary line.
struct Worst {
  double loss = 0, norm = 0, gradient = 0;
};

// A run's losses, gradient norms, gradients (every step) and final fingerprint against each
// reference, and its dropped choices against the fp32 one's.
void check_against(const Run& run, const Run& fp32, const Run* same_dtype, Worst& worst) {
  REQUIRE(run.losses.size() == fp32.losses.size());
  CHECK(run.skipped == 0);
  std::vector<const Run*> references = {&fp32};
  if (same_dtype) references.push_back(same_dtype);
  for (const Run* ref : references) {
    INFO((ref == &fp32 ? "against the fp32 reference" : "against the 16-bit reference"));
    for (std::size_t s = 0; s < run.losses.size(); ++s) {
      const auto step = static_cast<int>(s);
      const GradientError gradient = gradient_error(run, *ref, step);
      INFO("step " << s << ": loss " << run.losses[s] << " vs " << ref->losses[s]
                   << "; gradient norm " << run.norms[s] << " vs " << ref->norms[s]
                   << "; gradients: per-tensor max-normalised error " << gradient.max_normalised
                   << ", relative L2 " << gradient.l2);
      const double loss = relative(run.losses[s], ref->losses[s]);
      const double norm = relative(run.norms[s], ref->norms[s]);
      worst.loss = std::max(worst.loss, loss);
      worst.norm = std::max(worst.norm, norm);
      CHECK(loss < loss_tolerance());
      CHECK(norm < norm_tolerance());
      const bool flipped = run.loads[s] != ref->loads[s];
      INFO((flipped ? "a routing decision differs from the reference's" : "the same routing"));
      CHECK(gradients_close(gradient, step, &worst.gradient, flipped));
      CHECK(gradient.padding == 0);
    }
  }
  INFO("fingerprint " << run.fingerprint << " vs reference " << fp32.fingerprint);
  CHECK(relative(run.fingerprint, fp32.fingerprint) < loss_tolerance());
  if (!sixteen_bit()) CHECK(run.dropped == fp32.dropped);
}

void print_worst(const char* what, const Worst& worst) {
  auto& world = ted::test::world();
  if (world.rank() != 0) return;
  std::printf(
      "# %s, %s on %s over %s, %d ranks: worst relative loss difference %.3g, gradient "
      "norm %.3g, gradient error %.3g (tolerances: losses %.0e, norms %.0e)\n",
      what, ted::test::dtype().c_str(), ted::test::device().name().c_str(), world.name().c_str(),
      world.size(), worst.loss, worst.norm, worst.gradient, loss_tolerance(), norm_tolerance());
}

}  // namespace

TEST_CASE("every layout and switch set equals the single-process reference") {
  auto& world = ted::test::world();
  const int G = world.size();
  Worst worst;
  for (int top_k : {1, 2}) {
    const auto fp32 = reference(G, top_k);
    REQUIRE(fp32.dropped > 0);
    // 16-bit runs: also against the 16-bit single process on this device.
    Run same_dtype;
    if (sixteen_bit()) same_dtype = reference(G, top_k, ted::test::dtype());
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (const auto& sw : kSwitches) {
        auto config = configured(G, top_k, layout, sw);
        INFO("top-" << top_k << ", " << layout.to_string() << ", " << sw.name << ", "
                    << ted::test::dtype() << " on " << ted::test::device().name() << " over "
                    << world.name() << ", rank " << world.rank());
        auto run = train(config, ted::test::device(), &groups);
        check_against(run, fp32, sixteen_bit() ? &same_dtype : nullptr, worst);
      }
    }
  }
  print_worst("drops", worst);
}

// The model without Megatron's two changes: an untied embedding and LM head, each whole on every
// tensor rank, and no dropout. The switch sets that move the most (every optimisation at once,
// unsplit experts, materialised attention) and the plain one, in every dtype.
TEST_CASE("the untied model without dropout on every layout equals the single-process reference") {
  const char* kUntiedSwitches[] = {"baseline", "all: dtd+rs+checkpointing+cac+tiles",
                                   "experts not split + checkpointing + cac",
                                   "materialized attention + dtd+rs+checkpointing+cac"};
  auto untied = [](ted::train::TrainConfig c) {
    c.model.tie_embeddings = false;
    c.model.dropout = 0;
    return c;
  };
  auto& world = ted::test::world();
  const int G = world.size();
  Worst worst;
  for (int top_k : {1, 2}) {
    auto cpu = ted::make_cpu_device();
    const auto fp32 = train(untied(tiny(G, top_k)), *cpu, nullptr);
    Run same_dtype;
    if (sixteen_bit()) {
      auto config = untied(tiny(G, top_k));
      config.run.dtype = ted::parse_dtype(ted::test::dtype());
      same_dtype = train(config, ted::test::device(), nullptr);
    }
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (const auto& sw : kSwitches) {
        if (std::none_of(std::begin(kUntiedSwitches), std::end(kUntiedSwitches),
                         [&](const char* name) { return std::string(name) == sw.name; }))
          continue;
        INFO("untied, no dropout, top-"
             << top_k << ", " << layout.to_string() << ", " << sw.name << ", " << ted::test::dtype()
             << " on " << ted::test::device().name() << " over " << world.name() << ", rank "
             << world.rank());
        auto run = train(untied(configured(G, top_k, layout, sw)), ted::test::device(), &groups);
        check_against(run, fp32, sixteen_bit() ? &same_dtype : nullptr, worst);
      }
    }
  }
  print_worst("untied, no dropout", worst);
}

// Dropless: every rank's routing takes its own largest load as the capacity, and the expert
// group must agree on one (the largest) before its all-to-alls; the tensor ranks' slices (DTD,
// unsplit experts) and the checkpoint recompute, with and without CAC, must use that same one.
// fp32 only, and only the switch sets that change how the capacity is used (the optimizer's
// switches and the all-reduce stash do not), to keep CI short (12 s more at 8 ranks, 2 cores).
TEST_CASE("dropless gating on every layout equals the single-process reference") {
  if (sixteen_bit()) return;  // the fp32 entries of CTest run it
  const char* kDroplessSwitches[] = {"baseline", "checkpointing",
                                     "all: dtd+rs+checkpointing+cac+tiles",
                                     "experts not split + checkpointing + cac"};
  auto& world = ted::test::world();
  const int G = world.size();
  Worst worst;
  for (int top_k : {1, 2}) {
    const auto fp32 = reference(G, top_k, "fp32", true);
    REQUIRE(fp32.dropped == 0);
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (const auto& sw : kSwitches) {
        if (std::none_of(std::begin(kDroplessSwitches), std::end(kDroplessSwitches),
                         [&](const char* name) { return std::string(name) == sw.name; }))
          continue;
        INFO("dropless top-" << top_k << ", " << layout.to_string() << ", " << sw.name << " on "
                             << ted::test::device().name() << " over " << world.name() << ", rank "
                             << world.rank());
        auto run = train(configured(G, top_k, layout, sw, true), ted::test::device(), &groups);
        check_against(run, fp32, nullptr, worst);
      }
    }
  }
  print_worst("dropless", worst);
}

// Forced routing workloads (routing/workload.hpp): the assignment is a function of the global
// token, not of the layout, so every workload, with capacity and dropless, equals its own
// single-process reference on every layout; and every step's per-expert loads, as the run
// reports them, equal an oracle that recomputes the assignment from the workloads' definitions.
namespace {
using ted::routing::WorkloadKind;
const WorkloadKind kForcedWorkloads[] = {WorkloadKind::balanced,  WorkloadKind::hot_experts,
                                         WorkloadKind::hot_rank,  WorkloadKind::zipf,
                                         WorkloadKind::zero_load, WorkloadKind::rotating};

ted::train::TrainConfig with_workload(ted::train::TrainConfig c, WorkloadKind kind) {
  auto& w = c.model.gate.workload;
  w.kind = kind;
  w.hot_experts = 2;  // of 6 or 8 experts
  w.hot_share = 0.7;
  w.zipf_s = 1.3;
  w.zero_experts = 3;
  return c;
}

// Each expert's load in MoE layer `layer` at `step` over the global tokens [first, first + n),
// written from the definitions in docs/algorithm.md (not through assign_experts): a hot set, Zipf
// or zero-load weights, then each token's k draws without replacement, each by the cumulative
// weight of the free experts that have any.
std::vector<std::int64_t> oracle_load(const ted::routing::Workload& w, int E, int K,
                                      std::uint64_t seed, std::int64_t step, int layer,
                                      std::int64_t first, std::int64_t n) {
  std::vector<std::int64_t> load(static_cast<std::size_t>(E), 0);
  if (w.kind == WorkloadKind::balanced) {
    for (std::int64_t t = first; t < first + n; ++t)
      for (int j = 0; j < K; ++j) ++load[static_cast<std::size_t>((t * K + j) % E)];
    return load;
  }
  std::vector<double> weight(static_cast<std::size_t>(E), 1.0);
  const int H = w.hot_experts, Z = w.zero_experts;
  if (w.kind == WorkloadKind::zipf)
    for (int e = 0; e < E; ++e) weight[e] = 1.0 / std::pow(e + 1.0, w.zipf_s);
  if (w.kind == WorkloadKind::zero_load)
    for (int e = E - Z; e < E; ++e) weight[e] = 0;
  if (w.kind == WorkloadKind::hot_experts || w.kind == WorkloadKind::hot_rank ||
      w.kind == WorkloadKind::rotating) {
    std::vector<bool> hot(static_cast<std::size_t>(E), false);
    for (int i = 0; i < H; ++i) {
      const std::int64_t e = w.kind == WorkloadKind::hot_experts ? std::int64_t(i) * E / H
                             : w.kind == WorkloadKind::rotating  ? (step * H + i) % E
                                                                 : i;
      hot[static_cast<std::size_t>(e)] = true;
    }
    for (int e = 0; e < E; ++e) weight[e] = hot[e] ? w.hot_share / H : (1 - w.hot_share) / (E - H);
  }
  for (std::int64_t t = first; t < first + n; ++t) {
    std::vector<int> free(static_cast<std::size_t>(E));
    std::iota(free.begin(), free.end(), 0);
    for (int j = 0; j < K; ++j) {
      std::vector<int> ids;
      std::vector<double> cumulative;
      for (int e : free)
        if (weight[e] > 0) {
          ids.push_back(e);
          cumulative.push_back((cumulative.empty() ? 0.0 : cumulative.back()) + weight[e]);
        }
      REQUIRE(!ids.empty());
      const double u = ted::random::uniform(ted::random::hash(
          seed, ted::random::kWorkload, static_cast<std::uint64_t>(step),
          static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(t * K + j)));
      auto at = std::upper_bound(cumulative.begin(), cumulative.end(), u * cumulative.back()) -
                cumulative.begin();
      const int e = ids[static_cast<std::size_t>(std::min<std::ptrdiff_t>(at, ids.size() - 1))];
      ++load[static_cast<std::size_t>(e)];
      free.erase(std::find(free.begin(), free.end(), e));
    }
  }
  return load;
}
}  // namespace

TEST_CASE("forced routing workloads on every layout equal the single-process reference") {
  if (sixteen_bit()) return;  // the fp32 entries of CTest run it
  auto& world = ted::test::world();
  const int G = world.size();
  const int top_k = 2;  // both choices forced
  const Switches& all = kSwitches[5];
  REQUIRE(std::string(all.name) == "all: dtd+rs+checkpointing+cac+tiles");
  Worst worst;
  for (bool dropless : {false, true})
    for (WorkloadKind kind : kForcedWorkloads) {
      auto reference_config = with_workload(tiny(G, top_k, dropless), kind);
      auto cpu = ted::make_cpu_device();
      const auto fp32 = train(reference_config, *cpu, nullptr);
      if (dropless) REQUIRE(fp32.dropped == 0);
      for (const auto& layout : ted::all_layouts(G)) {
        ted::ProcessGrid grid(G, layout);
        ted::TedGroups groups(ted::test::control(), world, grid);
        INFO(ted::routing::to_string(kind)
             << (dropless ? ", dropless" : ", capacity") << ", " << layout.to_string() << ", "
             << all.name << " on " << ted::test::device().name() << ", rank " << world.rank());
        auto run = train(with_workload(configured(G, top_k, layout, all, dropless), kind),
                         ted::test::device(), &groups);
        check_against(run, fp32, nullptr, worst);
      }
    }
  print_worst("forced workloads", worst);
}

TEST_CASE("every forced workload's per-expert loads equal the oracle on every layout") {
  if (sixteen_bit()) return;
  auto& world = ted::test::world();
  const int G = world.size();
  for (int top_k : {1, 2})
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (WorkloadKind kind : kForcedWorkloads) {
        const auto config = with_workload(configured(G, top_k, layout, kSwitches[0]), kind);
        const auto& m = config.model;
        const ted::routing::Workload& w = m.gate.workload;
        ted::train::Trainer trainer(config, ted::test::device(), G > 1 ? &groups : nullptr);
        // A step's global batch: micro-batches x data-parallel ranks x micro_batch sequences.
        const std::int64_t sequences = std::int64_t(config.data.micro_batches) *
                                       config.data.micro_batch * layout.expert * layout.data;
        const std::int64_t tokens = sequences * m.seq_len;
        for (int step = 0; step < 2; ++step) {  // rotating moves its hot set every step
          const auto record = trainer.step(step);
          int moe = 0;
          for (int l = 0; l < m.layers; ++l) {
            if (!m.is_moe(l)) continue;
            INFO(ted::routing::to_string(kind)
                 << ", top-" << top_k << ", " << layout.to_string() << ", step " << step
                 << ", layer " << l << ", rank " << world.rank());
            REQUIRE(record.expert_load.size() > static_cast<std::size_t>(moe));
            const auto expected =
                oracle_load(w, m.gate.experts, top_k, m.seed, step, l, step * tokens, tokens);
            CHECK(record.expert_load[static_cast<std::size_t>(moe)] == expected);
            // assign_experts itself: k distinct experts for every token, the same counts.
            std::vector<std::int32_t> chosen(static_cast<std::size_t>(tokens) * top_k);
            ted::routing::assign_experts(w, m.gate.experts, top_k, m.seed, step, l, step * tokens,
                                         static_cast<int>(tokens), chosen.data());
            std::vector<std::int64_t> counted(static_cast<std::size_t>(m.gate.experts), 0);
            bool distinct = true;
            for (std::int64_t t = 0; t < tokens; ++t) {
              for (int j = 0; j < top_k; ++j) ++counted[chosen[t * top_k + j]];
              if (top_k == 2) distinct &= chosen[t * 2] != chosen[t * 2 + 1];
            }
            CHECK(distinct);
            CHECK(counted == expected);
            if (kind == WorkloadKind::balanced)  // 2G x 8 tokens spread exactly evenly
              CHECK(*std::max_element(expected.begin(), expected.end()) ==
                    *std::min_element(expected.begin(), expected.end()));
            if (kind == WorkloadKind::zero_load)
              for (int e = m.gate.experts - w.zero_experts; e < m.gate.experts; ++e)
                CHECK(expected[static_cast<std::size_t>(e)] == 0);
            ++moe;
          }
        }
      }
    }
}

// 16-bit gradients (training.grad_dtype = run.dtype, as DeepSpeed's fp16 ZeRO-1 keeps them):
// each kernel's contribution rounded into 16-bit buffers, reduced (reduce-scattered, or
// all-reduced without ZeRO-1; unsplit experts over the T x D ranks that hold them) in 16-bit,
// widened to fp32 only in the optimizer's tile. Held to the fp32 reference and to the 16-bit single
// process with fp32 gradients at the 16-bit tolerances above (the rounding of the gradients is
// small beside that of the activations: measured, see the summary line), with the switch sets of
// moves_gradients.
TEST_CASE("16-bit gradients on every layout equal the single-process reference") {
  if (!sixteen_bit()) return;  // the 16-bit entries of CTest run it
  auto& world = ted::test::world();
  const int G = world.size();
  Worst worst;
  for (int top_k : {1, 2}) {
    const auto fp32 = reference(G, top_k);
    const auto same_dtype = reference(G, top_k, ted::test::dtype());
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (const auto& sw : kSwitches) {
        if (!moves_gradients(sw)) continue;
        auto config = configured(G, top_k, layout, sw);
        config.model.grad_dtype = ted::parse_dtype(ted::test::dtype());
        INFO("16-bit gradients, top-"
             << top_k << ", " << layout.to_string() << ", " << sw.name << ", " << ted::test::dtype()
             << " on " << ted::test::device().name() << " over " << world.name() << ", rank "
             << world.rank());
        auto run = train(config, ted::test::device(), &groups);
        CHECK(run.gradients_in_storage_type);  // stored and reduced in 16-bit
        check_against(run, fp32, &same_dtype, worst);
      }
    }
    CHECK_FALSE(same_dtype.gradients_in_storage_type);  // fp32 gradients are not
  }
  print_worst("16-bit gradients", worst);
}

// A 16-bit gradient type other than the storage type, or with fp32 storage, is refused: the
// kernels accumulate in fp32 and round once into the gradient's type, which must be the
// weights' own.
TEST_CASE("training.grad_dtype must be fp32 or the storage type") {
  auto config = tiny(1, 1);
  auto schema = config.schema();
  schema.set("training.grad_dtype=fp16");
  CHECK(config.model.grad_dtype == ted::DataType::f16);
  config.run.dtype = ted::DataType::f32;
  CHECK_THROWS_AS(config.validate(), ted::ConfigError);
  config.run.dtype = ted::DataType::bf16;
  CHECK_THROWS_AS(config.validate(), ted::ConfigError);
  CHECK_THROWS_AS(schema.set("training.grad_dtype=fp8"), ted::ConfigError);
  schema.set("training.grad_dtype=bf16");
  CHECK_NOTHROW(config.validate());
}

namespace {
// Every layout of G ranks with fp32 gradients, then with 16-bit ones (the test's dtype).
std::vector<std::pair<ted::Layout, std::string>> layouts_by_gradient_type(int G) {
  std::vector<std::pair<ted::Layout, std::string>> out;
  for (const std::string grad_dtype : {std::string("fp32"), ted::test::dtype()})
    for (const auto& layout : ted::all_layouts(G)) out.emplace_back(layout, grad_dtype);
  return out;
}
}  // namespace

TEST_CASE("fp16: an overflow planted on one rank makes every rank skip that step") {
  if (ted::test::dtype() != "fp16") return;  // the fp16 entries of CTest run it
  auto& world = ted::test::world();
  const int G = world.size();
  // With fp32 gradients and with 16-bit ones (the inf planted in the fp16 gradient buffer).
  for (const auto& [layout, grad_dtype] : layouts_by_gradient_type(G)) {
    ted::ProcessGrid grid(G, layout);
    ted::TedGroups groups(ted::test::control(), world, grid);
    auto config = configured(G, 1, layout, kSwitches[0]);
    config.steps = 4;
    config.model.grad_dtype = ted::parse_dtype(grad_dtype);
    INFO(layout.to_string() << ", gradients " << grad_dtype << ", rank " << world.rank());
    ted::train::Trainer trainer(config, ted::test::device(), &groups);
    // The last rank plants an inf in its first gradient element (a dense one, in the shard of
    // the first data-parallel rank under ZeRO-1), before any reduction.
    trainer.set_before_update([&](int step, void* grads, ted::DataType dtype) {
      if (step == 1 && world.rank() == G - 1)
        ted::test::device().fill(grads, 1, dtype, std::numeric_limits<double>::infinity());
    });
    std::vector<ted::train::StepRecord> records;
    std::vector<double> fingerprints;
    for (int step = 0; step < config.steps; ++step) {
      records.push_back(trainer.step(step));
      fingerprints.push_back(trainer.fingerprint());
    }
    CHECK_FALSE(records[0].skipped);
    CHECK(records[1].skipped);  // on every rank, though only one saw the inf
    CHECK(std::isinf(records[1].grad_norm));
    CHECK(fingerprints[1] == fingerprints[0]);  // nothing moved
    CHECK(records[2].loss_scale == records[1].loss_scale / 2);
    CHECK_FALSE(records[2].skipped);
    CHECK(fingerprints[2] != fingerprints[1]);
    // Every rank made the same decision and kept the same scale.
    double scales[2] = {records[3].loss_scale, -records[3].loss_scale};
    ted::test::control().all_reduce(scales, scales, 2, ted::DataType::f64, ted::ReduceOp::max);
    CHECK(scales[0] == -scales[1]);
  }
}

namespace {

// One optimizer step with a ledger on every TED group; returns the ledger.
// `flops`, if given: the GEMM FLOPs the model counted for the step on this rank.
ted::Ledger ledger_of_step(ted::TedGroups& groups, const ted::train::TrainConfig& config,
                           double* flops = nullptr) {
  ted::Ledger ledger;
  ledger.set_keep_entries(true);
  groups.set_ledger(&ledger);
  // As the programs do: one process trains without groups.
  ted::train::Trainer trainer(config, ted::test::device(),
                              groups.world().size() > 1 ? &groups : nullptr);
  const auto record = trainer.step(0);
  if (flops) *flops = record.flops;
  groups.set_ledger(nullptr);
  return ledger;
}

}  // namespace

TEST_CASE("ledger: DTD divides all-to-all bytes by T, CAC saves a third, reduce-scatter halves") {
  auto& world = ted::test::world();
  const int G = world.size();
  const int T = G % 3 == 0 ? 3 : 2, Ep = 2;
  if (G < 4 || G % (T * Ep) != 0) return;  // needs T > 1 and Ep > 1
  ted::ProcessGrid grid(G, ted::Layout{T, Ep, G / (T * Ep)});
  ted::TedGroups groups(ted::test::control(), world, grid);
  auto config = tiny(G, 1);
  config.model.gate.capacity_factor = 1.0;  // 16 tokens over 8 (or 6) experts: C = 2 (or 3),
  config.model.gate.min_capacity = 0;       // a multiple of T, so DTD needs no padding
  const int dp = Ep * (G / (T * Ep)), micro = 2;
  config.data.micro_batches = micro;
  config.parallel = {T, Ep, G / (T * Ep), false, false, false, true, 0};
  config.run.dtype = ted::parse_dtype(ted::test::dtype());
  const int moe_layers = 1;  // layers = 2, expert_interval = 2
  INFO("T=" << T << " Ep=" << Ep << " DP=" << dp << ", rank " << world.rank());

  const auto plain = ledger_of_step(groups, config);
  const auto& a2a = plain.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert);
  CHECK(a2a.calls == 4u * micro * moe_layers);  // 2 forward, 2 backward

  auto dtd_config = config;
  dtd_config.parallel.dtd = true;
  const auto dtd = ledger_of_step(groups, dtd_config);
  const auto& a2a_dtd = dtd.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert);
  CHECK(a2a_dtd.calls == a2a.calls);
  CHECK(a2a_dtd.bytes_sent * T == a2a.bytes_sent);  // exactly 1/T
  CHECK(a2a_dtd.bytes_recv * T == a2a.bytes_recv);
  // ... and an all-gather in the tensor group of the full buffer per all-to-all.
  const auto& gathers = dtd.total(ted::CollectiveOp::all_gather, ted::GroupKind::tensor);
  CHECK(gathers.calls == a2a.calls);
  CHECK(gathers.bytes_recv == a2a.bytes_sent);

  auto rs_config = dtd_config;
  rs_config.parallel.reduce_scatter = true;
  const auto rs = ledger_of_step(groups, rs_config);
  // The expert block's tensor all-reduces become reduce-scatters of the same buffers: half the
  // bus bytes. (The attention and dense-FFN all-reduces are the same in both runs.)
  double expert_all_reduce =
      dtd.total(ted::CollectiveOp::all_reduce, ted::GroupKind::tensor).bus_bytes -
      rs.total(ted::CollectiveOp::all_reduce, ted::GroupKind::tensor).bus_bytes;
  double reduce_scatter =
      rs.total(ted::CollectiveOp::reduce_scatter, ted::GroupKind::tensor).bus_bytes;
  CHECK(rs.total(ted::CollectiveOp::reduce_scatter, ted::GroupKind::tensor).calls ==
        2u * micro * moe_layers);
  CHECK(expert_all_reduce > 0);
  CHECK(reduce_scatter * 2 == Approx(expert_all_reduce).epsilon(1e-12));

  auto checkpoint_config = config;
  checkpoint_config.model.checkpoint = true;
  const auto recomputed = ledger_of_step(groups, checkpoint_config);
  CHECK(recomputed.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert).calls ==
        6u * micro * moe_layers);
  checkpoint_config.parallel.cac = true;
  const auto cac = ledger_of_step(groups, checkpoint_config);
  CHECK(cac.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert).calls ==
        4u * micro * moe_layers);
  // With the all-reduce outputs stashed too, the recompute adds no tensor all-reduce: as many
  // as without checkpointing, where plain checkpointing repeats the forward's.
  checkpoint_config.parallel.cac_all_reduce = true;
  const auto cac_all = ledger_of_step(groups, checkpoint_config);
  const auto tensor_all_reduces = [](const ted::Ledger& l) {
    return l.total(ted::CollectiveOp::all_reduce, ted::GroupKind::tensor).calls;
  };
  CHECK(tensor_all_reduces(cac_all) == tensor_all_reduces(plain));
  CHECK(tensor_all_reduces(recomputed) > tensor_all_reduces(plain));
  CHECK(cac_all.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert).calls ==
        4u * micro * moe_layers);
}

TEST_CASE("allocator: tiles bound the optimizer temporaries; the CAC stash equals its formula") {
  auto& world = ted::test::world();
  const int G = world.size();
  const int T = G % 3 == 0 ? 3 : 2, Ep = 2;
  if (G < 4 || G % (T * Ep) != 0) return;
  const int D = G / (T * Ep);
  ted::ProcessGrid grid(G, ted::Layout{T, Ep, D});
  ted::TedGroups groups(ted::test::control(), world, grid);
  auto config = tiny(G, 1);
  config.model.gate.capacity_factor = 1.0;
  config.model.gate.min_capacity = 0;
  config.data.micro_batches = 2;
  config.parallel = {T, Ep, D, false, false, false, true, 0};
  config.run.dtype = ted::parse_dtype(ted::test::dtype());
  // The optimizer's temporaries are fp32 (the master type); the stash is in the storage type.
  const std::size_t master_bytes = sizeof(float), w = sixteen_bit() ? 2 : 4;
  INFO("T=" << T << " Ep=" << Ep << " D=" << D << ", rank " << world.rank());

  auto peaks = [&](const ted::train::TrainConfig& c, ted::MemoryCategory category,
                   std::size_t* dense_shard = nullptr, std::size_t* expert_shard = nullptr) {
    ted::TrackingDevice device(ted::test::device());
    ted::train::Trainer trainer(c, device, &groups);
    trainer.step(0);
    const auto& params = trainer.params();
    if (dense_shard) *dense_shard = params.range(ted::model::ParamKind::dense).second / (Ep * D);
    if (expert_shard) *expert_shard = params.range(ted::model::ParamKind::expert).second / D;
    return device.usage(category).peak;
  };

  // Without tiles the whole shard's temporary copy is alive at once; with tiles, one tile.
  std::size_t dense_shard = 0, expert_shard = 0;
  auto untiled =
      peaks(config, ted::MemoryCategory::optimizer_temporaries, &dense_shard, &expert_shard);
  CHECK(untiled == std::max(dense_shard, expert_shard) * master_bytes);
  config.parallel.tile_elems = 11;
  CHECK(peaks(config, ted::MemoryCategory::optimizer_temporaries) == 11 * master_bytes);
  config.parallel.tile_elems = 0;
  // ZeRO-1 off: every rank updates the whole part, so the untiled spike is the whole part.
  config.parallel.zero1 = false;
  CHECK(peaks(config, ted::MemoryCategory::optimizer_temporaries) ==
        std::max(dense_shard * Ep * D, expert_shard * D) * master_bytes);
  config.parallel.zero1 = true;

  // CAC keeps both all-to-all outputs of every MoE layer of the micro-batch in flight:
  // 2 x E x C' x h elements per layer, C' = C, or C / T with DTD.
  const int tokens = config.data.micro_batch * config.model.seq_len;
  const std::size_t C = ted::routing::expert_capacity(config.model.gate, tokens);
  REQUIRE(C % T == 0);
  const std::size_t E = config.model.gate.experts, h = config.model.hidden, moe_layers = 1;
  config.model.checkpoint = true;
  CHECK(peaks(config, ted::MemoryCategory::cac_stash) == 0);
  config.parallel.cac = true;
  CHECK(peaks(config, ted::MemoryCategory::cac_stash) == moe_layers * 2 * E * C * h * w);
  config.parallel.dtd = true;
  CHECK(peaks(config, ted::MemoryCategory::cac_stash) == moe_layers * 2 * E * (C / T) * h * w);

  // The paper's CAC (parallel.cac_all_reduce) keeps every tensor all-reduce's output as well:
  // the attention's and the dense FFN's [tokens, h], and the experts' row-parallel sum, the
  // whole [E, C, h] buffer (DTD slices it afterwards) or, with the reduce-scatter, its slice.
  // The projection's memory model counts the same bytes.
  const std::size_t X = static_cast<std::size_t>(tokens) * h, full = E * C * h;
  const std::size_t dense_layers = static_cast<std::size_t>(config.model.layers) - moe_layers;
  auto stash_of = [&](const ted::train::TrainConfig& c) {
    const std::size_t measured = peaks(c, ted::MemoryCategory::cac_stash);
    const auto model =
        ted::projection::step_memory(ted::projection::shape_of(c, ted::Layout{T, Ep, D}));
    CHECK(model.of(ted::MemoryCategory::cac_stash) == measured);
    return measured;
  };
  config.parallel.cac_all_reduce = true;
  config.parallel.dtd = false;
  CHECK(stash_of(config) == (moe_layers * (2 * full + X + full) + dense_layers * 2 * X) * w);
  config.parallel.dtd = true;
  CHECK(stash_of(config) == (moe_layers * (2 * full / T + X + full) + dense_layers * 2 * X) * w);
  config.parallel.reduce_scatter = true;
  CHECK(stash_of(config) ==
        (moe_layers * (2 * full / T + X + full / T) + dense_layers * 2 * X) * w);
}

namespace {
using ted::projection::shape_of;

// The step plan's collectives (projection/step.hpp) against a real step's ledger: call by call
// (every (op, group, bytes sent, bytes received) as often in the ledger as in the plan), and so
// the totals per op and group the traffic model reports.
void check_plan_against_ledger(const ted::Ledger& ledger, const ted::projection::StepShape& shape) {
  using Call = std::tuple<int, int, std::uint64_t, std::uint64_t>;
  std::map<Call, std::uint64_t> planned, issued;
  for (const auto& c : ted::projection::step_collectives(shape))
    planned[{int(c.op), int(c.group), c.bytes_sent, c.bytes_recv}] += c.calls;
  for (const auto& e : ledger.entries())
    issued[{int(e.op), int(e.group), e.bytes_sent, e.bytes_recv}]++;
  CHECK(planned == issued);
  const auto predicted = ted::projection::step_traffic(shape);
  for (std::size_t op = 0; op < ted::kCollectiveOpCount; ++op)
    for (auto group : {ted::GroupKind::tensor, ted::GroupKind::expert, ted::GroupKind::expert_data,
                       ted::GroupKind::nonexpert_data}) {
      auto kind = static_cast<ted::CollectiveOp>(op);
      INFO(ted::to_string(kind) << " on the " << ted::to_string(group) << " group");
      const auto& measured = ledger.total(kind, group);
      const auto& model = ted::projection::at(predicted, kind, group);
      CHECK(model.calls == measured.calls);
      CHECK(model.bytes_sent == measured.bytes_sent);
      CHECK(model.bytes_recv == measured.bytes_recv);
    }
}
}  // namespace

TEST_CASE("the step plan's collectives and FLOPs equal the ledger and the model's own count") {
  auto& world = ted::test::world();
  const int G = world.size();
  for (int top_k : {1, 2}) {
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (const auto& sw : kSwitches)
        for (const auto& grad_dtype : gradient_types(sw)) {
          auto config = configured(G, top_k, layout, sw);
          config.data.micro_batches = 2;
          config.model.grad_dtype = ted::parse_dtype(grad_dtype);
          INFO("top-" << top_k << ", " << layout.to_string() << ", " << sw.name << ", gradients "
                      << grad_dtype << ", rank " << world.rank());
          double flops = 0;
          const auto ledger = ledger_of_step(groups, config, &flops);
          // The compute model counts the FLOPs the model ran.
          CHECK(ted::projection::step_flops(shape_of(config, layout)) ==
                Approx(flops).epsilon(1e-12));
          check_plan_against_ledger(ledger, shape_of(config, layout));
        }
    }
  }
}

TEST_CASE("the parameter parts of the traffic model match the flat buffers") {
  auto& world = ted::test::world();
  const int G = world.size();
  for (const auto& layout : ted::all_layouts(G)) {
    for (bool split : {true, false}) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      auto config = tiny(G, 1);
      config.parallel = {layout.tensor, layout.expert, layout.data};
      config.parallel.split_experts = split;
      ted::train::Trainer trainer(config, ted::test::device(), &groups);
      const auto& params = trainer.params();
      auto parts = ted::projection::parameter_parts(config.model, layout, split);
      INFO(layout.to_string() << (split ? "" : ", experts not split"));
      CHECK(parts.dense == params.range(ted::model::ParamKind::dense).second);
      CHECK(parts.expert == params.range(ted::model::ParamKind::expert).second);
    }
  }
}

// One step of `config` on a tracking device; every category's peak within 5% of the memory
// model's, and so what the model keeps for backward at its largest (counted off its own
// tensors, the figure DeepSpeed's saved tensors compare to). Returns the model's estimate.
ted::projection::MemoryEstimate check_memory_model(const ted::train::TrainConfig& config,
                                                   const ted::Layout& layout,
                                                   ted::TedGroups& groups,
                                                   ted::TrackingDevice& device) {
  std::size_t saved = 0;
  {
    ted::train::Trainer trainer(config, device, layout.world_size() > 1 ? &groups : nullptr);
    trainer.step(0);
    saved = trainer.activations_saved_peak();
  }
  const auto estimate = ted::projection::step_memory(shape_of(config, layout));
  for (std::size_t c = 0; c < ted::kMemoryCategoryCount; ++c) {
    auto category = static_cast<ted::MemoryCategory>(c);
    double measured = static_cast<double>(device.usage(category).peak);
    double model = static_cast<double>(estimate.of(category));
    INFO(ted::to_string(category) << ": model " << model << " vs allocator " << measured);
    CHECK(std::abs(model - measured) <= 0.05 * std::max(measured, 1.0));
  }
  INFO("activations saved for backward: model " << estimate.activations_saved
                                                << " vs the model's tensors " << saved);
  CHECK(saved > 0);
  CHECK(saved <= device.usage(ted::MemoryCategory::activations).peak);
  CHECK(std::abs(static_cast<double>(estimate.activations_saved) - static_cast<double>(saved)) <=
        0.05 * static_cast<double>(saved));
  return estimate;
}

TEST_CASE("the memory model matches the allocator's peaks within 5%") {
  // The model replays the CPU backend's allocations; a GPU backend keeps its own scratch.
  if (!on_cpu()) {
    WARN("memory model: checked against the CPU backend's allocator only");
    return;
  }
  auto& world = ted::test::world();
  const int G = world.size();
  for (const auto& layout : ted::all_layouts(G)) {
    ted::ProcessGrid grid(G, layout);
    ted::TedGroups groups(ted::test::control(), world, grid);
    for (const auto& sw : kSwitches)
      for (const auto& grad_dtype : gradient_types(sw)) {
        auto config = configured(G, 1, layout, sw);
        config.data.micro_batches = 2;
        config.model.grad_dtype = ted::parse_dtype(grad_dtype);
        INFO(layout.to_string() << ", " << sw.name << ", gradients " << grad_dtype << ", rank "
                                << world.rank());
        ted::TrackingDevice device(ted::test::device());
        const auto estimate = check_memory_model(config, layout, groups, device);
        // The projected peak (persistent state + the larger phase) against the allocator's true
        // peak: what fit verdicts use, so it must not fall short of it by more than the 5%. It
        // may exceed it: within the training phase it adds the activations' peak (at the LM head)
        // and the exchange buffers' (inside a MoE layer), which never meet; 1.00-1.15x here.
        const double measured = static_cast<double>(device.total().peak);
        const double model = static_cast<double>(estimate.total);
        INFO(layout.to_string() << ", " << sw.name << ": projected peak " << model
                                << " vs allocator's total peak " << measured << ", upper bound "
                                << estimate.upper_bound << ", rank " << world.rank());
        CHECK(model >= 0.95 * measured);
        CHECK(model <= 1.20 * measured);
        CHECK(estimate.total <= estimate.upper_bound);
      }
  }
}

// Overlap (parallel.overlap = N): the MoE exchange in N chunks along the sent capacity, each
// chunk's experts running while the next chunk's all-to-all is in flight. The tiny model's
// capacity is 1 with its default factor, so these runs use a factor of 6 (capacity 12 or 16 at
// top-1; a sent capacity of at least 3 on every layout up to T = 4, so N chunks are N). Against
// their own single-process reference with that factor; the traffic model against the ledger; and
// the ledger of N chunks against the plain exchange's: the same bytes in N times the calls.
namespace {
ted::train::TrainConfig wide(ted::train::TrainConfig c) {
  c.model.gate.capacity_factor = 6.0;
  return c;
}
const Switches kOverlapSwitches[] = {
    {"baseline", false, false, false, false, true, 0},
    {"checkpointing (the recompute communicates)", false, false, true, false, true, 0},
    {"all: dtd+rs+checkpointing+cac+tiles", true, true, true, true, true, 7},
    {"dtd+checkpointing+cac with all-reduce stash", true, false, true, true, true, 0, true, true},
    {"experts not split + checkpointing + cac", false, false, true, true, true, 0, false},
};
}  // namespace

TEST_CASE("overlap in 2 and 3 chunks equals the single-process reference") {
  auto& world = ted::test::world();
  const int G = world.size();
  Worst worst;
  for (int top_k : {1, 2}) {
    auto reference_config = wide(tiny(G, top_k));
    auto cpu = ted::make_cpu_device();
    const auto fp32 = train(reference_config, *cpu, nullptr);
    Run same_dtype;
    if (sixteen_bit()) {
      reference_config.run.dtype = ted::parse_dtype(ted::test::dtype());
      same_dtype = train(reference_config, ted::test::device(), nullptr);
    }
    for (const auto& layout : ted::all_layouts(G)) {
      ted::ProcessGrid grid(G, layout);
      ted::TedGroups groups(ted::test::control(), world, grid);
      for (const auto& sw : kOverlapSwitches)
        for (int overlap : {2, 3}) {
          auto config = wide(configured(G, top_k, layout, sw));
          config.parallel.overlap = overlap;
          INFO("top-" << top_k << ", " << layout.to_string() << ", " << sw.name << ", overlap "
                      << overlap << ", " << ted::test::dtype() << " on "
                      << ted::test::device().name() << " over " << world.name() << ", rank "
                      << world.rank());
          auto run = train(config, ted::test::device(), &groups);
          check_against(run, fp32, sixteen_bit() ? &same_dtype : nullptr, worst);

          auto one_step = config;
          one_step.data.micro_batches = 2;
          const auto ledger = ledger_of_step(groups, one_step);
          check_plan_against_ledger(ledger, shape_of(one_step, layout));
          if (on_cpu()) {  // memory: the chunks live in the plain exchange's buffers
            ted::TrackingDevice tracked(ted::test::device());
            check_memory_model(one_step, layout, groups, tracked);
          }
          if (layout.expert > 1) {  // the plain exchange moves the same bytes in fewer calls
            auto plain = one_step;
            plain.parallel.overlap = 1;
            const auto& a = ledger.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert);
            const auto base = ledger_of_step(groups, plain);
            const auto& b = base.total(ted::CollectiveOp::all_to_all, ted::GroupKind::expert);
            CHECK(a.bytes_sent == b.bytes_sent);
            CHECK(a.bytes_recv == b.bytes_recv);
            CHECK(a.calls == static_cast<std::uint64_t>(overlap) * b.calls);
          }
        }
    }
  }
  print_worst("overlap", worst);
}
