#include "ted/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/kernels/adamw.hpp"

namespace ted::train {

void OptimizerConfig::validate() const {
  // Bounds well beyond any sensible run: a learning rate above 1 only diverges, later, as a NaN.
  if (!(lr > 0 && lr <= 1)) throw ConfigError("optimizer.lr must be in (0, 1]");
  if (min_lr < 0 || min_lr > lr)
    throw ConfigError("optimizer.min_lr must be between 0 and optimizer.lr");
  if (warmup_steps < 0) throw ConfigError("optimizer.warmup_steps must not be negative");
  if (!(weight_decay >= 0 && weight_decay <= 1))
    throw ConfigError("optimizer.weight_decay must be in [0, 1]");
  if (!(beta1 >= 0 && beta1 < 1)) throw ConfigError("optimizer.beta1 must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) throw ConfigError("optimizer.beta2 must be in [0, 1)");
  if (!(eps > 0 && eps <= 1)) throw ConfigError("optimizer.eps must be in (0, 1]");
  if (grad_clip < 0) throw ConfigError("optimizer.grad_clip must not be negative");
}

double learning_rate(const OptimizerConfig& c, int step, int total_steps) {
  if (step < c.warmup_steps) return c.lr * (step + 1) / c.warmup_steps;
  int decay_steps = total_steps - c.warmup_steps - 1;
  if (decay_steps <= 0) return c.lr;
  double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / decay_steps);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(3.141592653589793 * progress));
}

template <typename T>
AdamW<T>::AdamW(model::ParamSet<T>& params, const OptimizerConfig& config, Ops<T>& ops,
                const OptimizerParallel& parallel)
    : params_(params), config_(config), parallel_(parallel), ops_(ops), device_(ops.device()) {
  config_.validate();
  TED_CHECK(parallel_.control || (!parallel_.dense_group && !parallel_.expert_group),
            "a distributed optimizer needs a control world (the norm, the overflow flag)");
  struct Segment {  // a tensor of the flat buffers
    std::size_t begin, end;
    bool decay, counted;
  };
  std::vector<Segment> segments;
  // A tensor the tensor ranks hold alike is counted once: on tensor rank 0, or where its part's
  // group spans the tensor ranks (whole experts), by its group's own sharding.
  for (const auto& spec : params.specs()) {
    const bool spanned =
        spec.kind == model::ParamKind::expert && parallel_.expert_group_spans_tensor;
    segments.push_back({spec.offset, spec.offset + spec.size(), spec.decay,
                        !spec.tensor_replicated || parallel_.tensor_rank0 || spanned});
  }
  std::sort(segments.begin(), segments.end(),
            [](const Segment& a, const Segment& b) { return a.begin < b.begin; });

  for (auto kind : {model::ParamKind::dense, model::ParamKind::expert}) {
    auto [begin, size] = params.range(kind);
    Communicator* group =
        kind == model::ParamKind::dense ? parallel_.dense_group : parallel_.expert_group;
    Part part{kind, group, begin, size, begin, size, true, {}, {}, {}, {}, {}};
    if (group) {
      auto n = static_cast<std::size_t>(group->size());
      TED_CHECK(size % n == 0, "parameter part not padded to its data group");
      if (parallel_.zero1) {
        part.count = size / n;
        part.mine = begin + part.count * static_cast<std::size_t>(group->rank());
      } else {
        part.counts_norm = group->rank() == 0;  // every data rank holds the same values
      }
    }
    // My elements by weight decay (padding does not decay) and the ones the norm counts.
    const std::size_t lo = part.mine, hi = part.mine + part.count;
    std::size_t at = lo;
    for (const auto& segment : segments) {
      const std::size_t a = std::max(segment.begin, lo), b = std::min(segment.end, hi);
      if (a >= b) continue;
      if (segment.counted && part.counts_norm) part.norm_ranges.push_back({a - lo, b - lo});
      if (a > at) part.runs.push_back({at - lo, a - lo, false});
      part.runs.push_back({a - lo, b - lo, segment.decay});
      at = b;
    }
    if (at < hi) part.runs.push_back({at - lo, hi - lo, false});

    MemoryScope scope(device_, MemoryCategory::optimizer_state);
    part.m = zeros<M>(device_, part.count);
    part.v = zeros<M>(device_, part.count);
    if constexpr (!std::is_same_v<T, M>) {  // the master starts as the weights' copy
      part.master = Tensor<M>(device_, part.count);
      ops_.convert(params.values().data() + part.mine, dtype_of<T>::value, part.master.data(),
                   dtype_of<M>::value, part.count);
    }
    parts_.push_back(std::move(part));
  }
}

template <typename T>
OptimizerStep AdamW<T>::step(int step, int total_steps, double loss_scale, bool check_overflow) {
  if (params_.storage_gradients()) {
    if constexpr (!std::is_same_v<T, M>)
      return step_with<T>(static_cast<T*>(params_.gradient_data()), step, total_steps, loss_scale,
                          check_overflow);
  }
  return step_with<M>(params_.grads().data(), step, total_steps, loss_scale, check_overflow);
}

// The step with gradients of type G: M, or T (16-bit gradients, reduced in 16-bit and widened a
// tile at a time).
template <typename T>
template <typename G>
OptimizerStep AdamW<T>::step_with(G* grads, int step, int total_steps, double loss_scale,
                                  bool check_overflow) {
  T* values = params_.values().data();
  const DataType grad_type = dtype_of<G>::value, value_type = dtype_of<T>::value;
  const DataType master_type = dtype_of<M>::value;
  OptimizerStep result;

  // 1. Sum the gradients over each part's data group (reduce-scatter: only my shard); whole
  // experts, run by every tensor rank on its own token slice, are summed over the T x D ranks
  // that hold them.
  std::vector<Tensor<G>> shard_grads(parts_.size());
  MemoryScope communication(device_, MemoryCategory::communication);
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& part = parts_[i];
    if (!part.group) continue;
    if (parallel_.zero1) {
      shard_grads[i] = Tensor<G>(device_, part.count);
      part.group->reduce_scatter(grads + part.begin, shard_grads[i].data(), part.count, grad_type);
    } else {
      part.group->all_reduce(grads + part.begin, grads + part.begin, part.size, grad_type);
    }
  }
  auto grad_of = [&](std::size_t i) {  // my gradients of part i, indexed from part.mine
    return shard_grads[i].empty() ? grads + parts_[i].mine : shard_grads[i].data();
  };
  auto master_of = [&](std::size_t i) -> M* {  // the master of my elements of part i
    if constexpr (std::is_same_v<T, M>)
      return values + parts_[i].mine;
    else
      return parts_[i].master.data();
  };

  if (probe_) {
    std::vector<GradientShard> shards;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      std::vector<G> host(parts_[i].count);
      device_.copy_to_host(host.data(), grad_of(i), host.size() * sizeof(G));
      std::vector<double> widened(host.size());
      for (std::size_t k = 0; k < host.size(); ++k)
        widened[k] = static_cast<double>(widen(host[k]));
      shards.push_back({parts_[i].kind, parts_[i].mine, std::move(widened)});
    }
    probe_(shards);
  }

  // 2. fp16: a step with an inf or NaN gradient anywhere is skipped everywhere.
  if (check_overflow) {
    std::int32_t overflow = 0;
    for (std::size_t i = 0; i < parts_.size(); ++i)
      overflow |= ops_.has_non_finite(grad_of(i), grad_type, parts_[i].count) ? 1 : 0;
    if (parallel_.control)
      parallel_.control->all_reduce(&overflow, &overflow, 1, DataType::i32, ReduceOp::max);
    if (overflow) {
      result.grad_norm = std::numeric_limits<double>::infinity();
      result.applied = false;
      last_lr_ = learning_rate(config_, step, total_steps);
      return result;
    }
  }

  // 3. Global norm over the distinct elements, then the clipping factor.
  double sum = 0;
  for (std::size_t i = 0; i < parts_.size(); ++i)
    sum = ops_.sum_squares(grad_of(i), grad_type, parts_[i].norm_ranges, sum);
  if (parallel_.control) parallel_.control->all_reduce(&sum, &sum, 1, DataType::f64);
  const double norm = std::sqrt(sum) / loss_scale;
  const double clip =
      config_.grad_clip > 0 && norm > config_.grad_clip ? config_.grad_clip / norm : 1.0;
  result.grad_norm = norm;

  // 4. Adam on my elements, a tile at a time: unscale and clip the tile's gradient, update the
  // master, write the weights' copy.
  last_lr_ = learning_rate(config_, step, total_steps);
  const int t = ++applied_steps_;
  const M lr = static_cast<M>(last_lr_);
  const M b1 = static_cast<M>(config_.beta1), b2 = static_cast<M>(config_.beta2);
  const M correction1 = static_cast<M>(1.0 - std::pow(config_.beta1, t));
  const M correction2 = static_cast<M>(1.0 - std::pow(config_.beta2, t));
  const M eps = static_cast<M>(config_.eps), scale = static_cast<M>(clip / loss_scale);
  const kernels::AdamHyper<M> with_decay{
      lr, b1, b2, eps, static_cast<M>(config_.weight_decay), correction1, correction2};
  kernels::AdamHyper<M> without_decay = with_decay;
  without_decay.weight_decay = M(0);
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& part = parts_[i];
    const G* g = grad_of(i);
    M* master = master_of(i);
    std::size_t tile =
        parallel_.tile_elems ? parallel_.tile_elems : std::max<std::size_t>(part.count, 1);
    auto run = part.runs.begin();
    for (std::size_t first = 0; first < part.count; first += tile) {
      const std::size_t last = std::min(first + tile, part.count);
      MemoryScope temporaries(device_, MemoryCategory::optimizer_temporaries);
      Tensor<M> work(device_, last - first);  // the tile's unscaled, clipped gradient
      ops_.scale_copy(g + first, grad_type, work.data(), last - first, scale);
      while (run != part.runs.end() && run->end <= first) ++run;
      for (auto r = run; r != part.runs.end() && r->begin < last; ++r) {
        const std::size_t a = std::max(r->begin, first), b = std::min(r->end, last);
        ops_.adamw(master + a, part.m.data() + a, part.v.data() + a, work.data() + (a - first),
                   b - a, r->decay ? with_decay : without_decay);
      }
      if constexpr (!std::is_same_v<T, M>)
        ops_.convert(master + first, master_type, values + part.mine + first, value_type,
                     last - first);
    }
  }

  // 5. ZeRO-1: everyone gets everyone's updated shards (of the weights the kernels read).
  for (auto& part : parts_) {
    if (!part.group || !parallel_.zero1) continue;
    Tensor<T> mine(device_, part.count);
    device_.copy(mine.data(), values + part.mine, part.count * sizeof(T));
    part.group->all_gather(mine.data(), values + part.begin, part.count, value_type);
  }
  return result;
}

namespace {
std::string part_name(model::ParamKind kind) {
  return kind == model::ParamKind::dense ? "adam.dense." : "adam.expert.";
}
}  // namespace

template <typename T>
void AdamW<T>::save(TrainState& into) const {
  into.push_back(value_blob("adam.applied_steps", applied_steps_));
  for (const auto& part : parts_) {
    const std::string name = part_name(part.kind);
    const std::size_t bytes = part.count * sizeof(M);
    into.push_back(device_blob(device_, name + "m", part.m.data(), bytes));
    into.push_back(device_blob(device_, name + "v", part.v.data(), bytes));
    if constexpr (!std::is_same_v<T, M>)
      into.push_back(device_blob(device_, name + "master", part.master.data(), bytes));
  }
}

template <typename T>
void AdamW<T>::load(const TrainState& from) {
  restore_value(from, "adam.applied_steps", applied_steps_);
  for (auto& part : parts_) {
    const std::string name = part_name(part.kind);
    const std::size_t bytes = part.count * sizeof(M);
    restore_device(device_, from, name + "m", part.m.data(), bytes);
    restore_device(device_, from, name + "v", part.v.data(), bytes);
    if constexpr (!std::is_same_v<T, M>)
      restore_device(device_, from, name + "master", part.master.data(), bytes);
  }
}

template class AdamW<float>;
template class AdamW<double>;
template class AdamW<Half>;
template class AdamW<BFloat16>;

}  // namespace ted::train
