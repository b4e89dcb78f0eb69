#include "ted/train/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "ted/backend/memory.hpp"
#include "ted/core/error.hpp"
#include "ted/kernels/adamw.hpp"

namespace ted::train {

void OptimizerConfig::validate() const {
  if (!(lr > 0)) throw ConfigError("optimizer.lr must be positive");
  if (min_lr < 0 || min_lr > lr)
    throw ConfigError("optimizer.min_lr must be between 0 and optimizer.lr");
  if (warmup_steps < 0) throw ConfigError("optimizer.warmup_steps must not be negative");
  if (weight_decay < 0) throw ConfigError("optimizer.weight_decay must not be negative");
  if (!(beta1 >= 0 && beta1 < 1)) throw ConfigError("optimizer.beta1 must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) throw ConfigError("optimizer.beta2 must be in [0, 1)");
  if (!(eps > 0)) throw ConfigError("optimizer.eps must be positive");
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
AdamW<T>::AdamW(model::ParamSet<T>& params, const OptimizerConfig& config, Device& device,
                const OptimizerParallel& parallel)
    : params_(params), config_(config), parallel_(parallel), device_(device) {
  config_.validate();
  for (auto kind : {model::ParamKind::dense, model::ParamKind::expert}) {
    auto [begin, size] = params.range(kind);
    Communicator* group =
        kind == model::ParamKind::dense ? parallel_.dense_group : parallel_.expert_group;
    Part part{group, begin, size, begin, size, true, {}, {}};
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
    MemoryScope scope(device, MemoryCategory::optimizer_state);
    part.m = zeros<T>(device, part.count);
    part.v = zeros<T>(device, part.count);
    parts_.push_back(std::move(part));
  }
  for (const auto& spec : params.specs())
    segments_.push_back({spec.offset, spec.offset + spec.size(), spec.decay,
                         !spec.tensor_replicated || parallel_.tensor_rank0});
  std::sort(segments_.begin(), segments_.end(),
            [](const Segment& a, const Segment& b) { return a.begin < b.begin; });
}

template <typename T>
double AdamW<T>::step(int step, int total_steps) {
  T* grads = params_.grads().data();
  T* values = params_.values().data();
  const DataType dtype = dtype_of<T>::value;

  // 1. Sum the gradients over each part's data group (reduce-scatter: only my shard); whole
  // experts run by every tensor rank on its own token slice are summed over the tensor group.
  if (parallel_.expert_tensor_group) {
    auto [begin, size] = params_.range(model::ParamKind::expert);
    parallel_.expert_tensor_group->all_reduce(grads + begin, grads + begin, size, dtype);
  }
  std::vector<Tensor<T>> shard_grads(parts_.size());
  MemoryScope communication(device_, MemoryCategory::communication);
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& part = parts_[i];
    if (!part.group) continue;
    if (parallel_.zero1) {
      shard_grads[i] = Tensor<T>(device_, part.count);
      part.group->reduce_scatter(grads + part.begin, shard_grads[i].data(), part.count, dtype);
    } else {
      part.group->all_reduce(grads + part.begin, grads + part.begin, part.size, dtype);
    }
  }
  auto grad_of = [&](std::size_t i) {  // my gradients of part i, indexed from part.mine
    return shard_grads[i].empty() ? grads + parts_[i].mine : shard_grads[i].data();
  };

  // 2. Global norm over the distinct elements, then the clipping factor.
  double sum = 0;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    const Part& part = parts_[i];
    if (!part.counts_norm) continue;
    const T* g = grad_of(i);
    for (const auto& segment : segments_) {
      if (!segment.counted) continue;
      std::size_t lo = std::max(segment.begin, part.mine);
      std::size_t hi = std::min(segment.end, part.mine + part.count);
      for (std::size_t k = lo; k < hi; ++k)
        sum += static_cast<double>(g[k - part.mine]) * g[k - part.mine];
    }
  }
  if (parallel_.world) parallel_.world->all_reduce(&sum, &sum, 1, DataType::f64);
  double norm = std::sqrt(sum);
  double clip = config_.grad_clip > 0 && norm > config_.grad_clip ? config_.grad_clip / norm : 1.0;

  // 3. Adam on my elements, a tile at a time.
  last_lr_ = learning_rate(config_, step, total_steps);
  const int t = step + 1;
  const T lr = static_cast<T>(last_lr_);
  const T b1 = static_cast<T>(config_.beta1), b2 = static_cast<T>(config_.beta2);
  const T correction1 = static_cast<T>(1.0 - std::pow(config_.beta1, t));
  const T correction2 = static_cast<T>(1.0 - std::pow(config_.beta2, t));
  const T eps = static_cast<T>(config_.eps), scale = static_cast<T>(clip);
  const kernels::AdamHyper<T> with_decay{
      lr, b1, b2, eps, static_cast<T>(config_.weight_decay), correction1, correction2};
  kernels::AdamHyper<T> without_decay = with_decay;
  without_decay.weight_decay = T(0);
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    Part& part = parts_[i];
    const T* g = grad_of(i);
    std::size_t tile =
        parallel_.tile_elems ? parallel_.tile_elems : std::max<std::size_t>(part.count, 1);
    auto segment = segments_.begin();
    for (std::size_t first = 0; first < part.count; first += tile) {
      std::size_t length = std::min(tile, part.count - first);
      MemoryScope temporaries(device_, MemoryCategory::optimizer_temporaries);
      Tensor<T> work(device_, length);  // the tile's unscaled, clipped gradient
      for (std::size_t k = 0; k < length; ++k) work[k] = g[first + k] * scale;
      for (std::size_t k = 0; k < length; ++k) {
        std::size_t flat = part.mine + first + k;
        while (segment != segments_.end() && segment->end <= flat) ++segment;
        bool decays = segment != segments_.end() && segment->begin <= flat && segment->decay;
        kernels::adamw_update(values[flat], part.m[first + k], part.v[first + k], work[k],
                              decays ? with_decay : without_decay);
      }
    }
  }

  // 4. ZeRO-1: everyone gets everyone's updated shards.
  for (auto& part : parts_) {
    if (!part.group || !parallel_.zero1) continue;
    Tensor<T> mine(device_, part.count);
    std::copy(values + part.mine, values + part.mine + part.count, mine.data());
    part.group->all_gather(mine.data(), values + part.begin, part.count, dtype);
  }
  return norm;
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace ted::train
