#include "ted/routing/workload.hpp"

#include <algorithm>
#include <cmath>

#include "ted/core/error.hpp"
#include "ted/core/random.hpp"

namespace ted::routing {

namespace {

constexpr std::string_view kNames[kWorkloadKindCount] = {
    "learned", "balanced", "hot_experts", "hot_rank", "zipf", "zero_load", "rotating"};

// The experts of the hot set at `step` (hot_experts, hot_rank, rotating).
std::vector<bool> hot_set(const Workload& w, int experts, std::int64_t step) {
  const int H = hot_count(w, experts);
  std::vector<bool> hot(static_cast<std::size_t>(experts), false);
  for (int i = 0; i < H; ++i) {
    long long e = i;
    if (w.kind == WorkloadKind::hot_experts) e = static_cast<long long>(i) * experts / H;
    if (w.kind == WorkloadKind::rotating) e = (static_cast<long long>(step) * H + i) % experts;
    hot[static_cast<std::size_t>(e)] = true;
  }
  return hot;
}

}  // namespace

std::string_view to_string(WorkloadKind kind) {
  return kNames[static_cast<int>(kind)];
}

std::string workload_names() {
  std::string out;
  for (int i = 0; i < kWorkloadKindCount; ++i)
    out += std::string(i == 0                        ? ""
                       : i + 1 == kWorkloadKindCount ? " or "
                                                     : ", ") +
           std::string(kNames[i]);
  return out;
}

int hot_count(const Workload& w, int experts) {
  return w.hot_experts > 0 ? w.hot_experts : std::max(1, experts / 4);
}

int zero_count(const Workload& w, int experts) {
  return w.zero_experts > 0 ? w.zero_experts : std::max(1, experts / 4);
}

void validate(const Workload& w, int experts, int top_k) {
  if (w.hot_experts < 0 || w.hot_experts > experts)
    throw ConfigError(
        "routing.hot_experts must be in [0, model.experts = " + std::to_string(experts) +
        "] (0: a quarter of them), got " + std::to_string(w.hot_experts));
  if (!(w.hot_share >= 0 && w.hot_share <= 1))
    throw ConfigError("routing.hot_share must be in [0, 1], got " + std::to_string(w.hot_share));
  if (!(w.zipf_s >= 0 && w.zipf_s <= 8))
    throw ConfigError("routing.zipf_s must be in [0, 8], got " + std::to_string(w.zipf_s));
  if (w.zero_experts < 0 || w.zero_experts > experts)
    throw ConfigError(
        "routing.zero_experts must be in [0, model.experts = " + std::to_string(experts) +
        "] (0: a quarter of them), got " + std::to_string(w.zero_experts));
  if (w.kind == WorkloadKind::zero_load && experts - zero_count(w, experts) < top_k)
    throw ConfigError("routing.workload zero_load leaves " +
                      std::to_string(experts - zero_count(w, experts)) +
                      " experts with load, fewer than gating.top_k (" + std::to_string(top_k) +
                      "): lower routing.zero_experts");
}

std::vector<double> expert_shares(const Workload& w, int experts, std::int64_t step) {
  const std::size_t E = static_cast<std::size_t>(experts);
  std::vector<double> share(E, 1.0 / experts);
  switch (w.kind) {
    case WorkloadKind::learned:
    case WorkloadKind::balanced:
      break;
    case WorkloadKind::hot_experts:
    case WorkloadKind::hot_rank:
    case WorkloadKind::rotating: {
      const int H = hot_count(w, experts);
      const std::vector<bool> hot = hot_set(w, experts, step);
      for (std::size_t e = 0; e < E; ++e)
        share[e] = H == experts ? 1.0 / experts
                   : hot[e]     ? w.hot_share / H
                                : (1 - w.hot_share) / (experts - H);
      break;
    }
    case WorkloadKind::zipf: {
      double total = 0;
      for (std::size_t e = 0; e < E; ++e) total += share[e] = std::pow(double(e + 1), -w.zipf_s);
      for (double& s : share) s /= total;
      break;
    }
    case WorkloadKind::zero_load: {
      const int Z = zero_count(w, experts);
      for (std::size_t e = 0; e < E; ++e)
        share[e] = static_cast<int>(e) >= experts - Z ? 0.0 : 1.0 / (experts - Z);
      break;
    }
  }
  return share;
}

void assign_experts(const Workload& w, int experts, int top_k, std::uint64_t seed,
                    std::int64_t step, int layer, std::int64_t first_token, int tokens,
                    std::int32_t* out) {
  TED_CHECK(w.forced(), "assign_experts: the learned gate chooses for itself");
  TED_CHECK(top_k <= experts, "assign_experts: more choices than experts");
  if (w.kind == WorkloadKind::balanced) {
    for (int s = 0; s < tokens; ++s)
      for (int j = 0; j < top_k; ++j)
        out[static_cast<std::size_t>(s) * top_k + j] =
            static_cast<std::int32_t>(((first_token + s) * top_k + j) % experts);
    return;
  }
  const std::vector<double> share = expert_shares(w, experts, step);
  std::vector<bool> taken(share.size());
  for (int s = 0; s < tokens; ++s) {
    const std::int64_t token = first_token + s;
    std::fill(taken.begin(), taken.end(), false);
    for (int j = 0; j < top_k; ++j) {
      double left = 0;
      for (std::size_t e = 0; e < share.size(); ++e)
        if (!taken[e]) left += share[e];
      const double u = random::uniform(random::hash(
          seed, random::kWorkload, static_cast<std::uint64_t>(step),
          static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(token * top_k + j)));
      // Inverse CDF over the experts not yet taken; with no weight left (every expert with
      // load already taken) the lowest free expert, so a token always has k distinct ones.
      int chosen = -1, last = -1;
      double acc = 0;
      for (std::size_t e = 0; e < share.size() && chosen < 0; ++e) {
        if (taken[e]) continue;
        if (share[e] > 0) last = static_cast<int>(e);
        acc += share[e];
        if (left > 0 && share[e] > 0 && u * left < acc) chosen = static_cast<int>(e);
      }
      if (chosen < 0) chosen = last;  // rounding left u * left at or past the sum
      if (chosen < 0)
        for (std::size_t e = 0; e < share.size() && chosen < 0; ++e)
          if (!taken[e]) chosen = static_cast<int>(e);
      taken[static_cast<std::size_t>(chosen)] = true;
      out[static_cast<std::size_t>(s) * top_k + j] = chosen;
    }
  }
}

}  // namespace ted::routing
