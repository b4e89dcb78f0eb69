// Forced routing workloads (docs/algorithm.md section 2, "Routing workloads"): instead of the
// learned gate's top-k, each token's top-k distinct experts are decided by a workload from
// (workload, its parameters, seed, step, layer, global token index) alone, so every layout
// T x Ep x D, every backend and the projection see the same assignment. The gate still runs:
// its probabilities weight the chosen experts and its gradients flow as with learned routing;
// capacity, drops, the aux loss and dropless routing apply unchanged.
//
// Workloads (E experts, H hot experts, k = top_k):
//   learned      the gate's own choices (the default)
//   balanced     token g takes experts (g k + j) mod E, j < k: every expert the same load
//   hot_experts  H hot experts spread evenly over the expert ids (e = i E / H) draw hot_share of
//                the choices, the others the rest, uniformly within each set
//   hot_rank     the same with the hot experts contiguous, ids 0 .. H-1: the experts of expert
//                rank 0 when H = E / Ep
//   zipf         expert e drawn with probability proportional to 1 / (e + 1)^zipf_s
//   zero_load    the last Z experts get nothing, the others uniform
//   rotating     hot_rank's hot block, moved by H experts every step
// Every token draws its k experts one after the other without replacement from the workload's
// shares (the later draws renormalised over the experts not yet taken), each draw a counter-based
// uniform of (seed, step, layer, global token, choice).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ted::routing {

enum class WorkloadKind : std::uint8_t {
  learned,
  balanced,
  hot_experts,
  hot_rank,
  zipf,
  zero_load,
  rotating,
};
inline constexpr int kWorkloadKindCount = 7;

std::string_view to_string(WorkloadKind kind);
// Every name, in order: "learned, balanced, ... or rotating".
std::string workload_names();

struct Workload {
  WorkloadKind kind = WorkloadKind::learned;
  int hot_experts = 0;     // H (0: E / 4, at least 1): hot_experts, hot_rank, rotating
  double hot_share = 0.5;  // the share of the choices the hot set draws
  double zipf_s = 1.0;     // zipf's exponent
  int zero_experts = 0;    // Z (0: E / 4, at least 1): zero_load
  bool forced() const { return kind != WorkloadKind::learned; }
};

// The hot set's size and the zero-load count for E experts, defaults resolved.
int hot_count(const Workload& w, int experts);
int zero_count(const Workload& w, int experts);

// Throws ConfigError naming the routing.* key when a parameter is out of range for E experts
// and top_k choices (a token must be able to take k distinct experts).
void validate(const Workload& w, int experts, int top_k);

// The share of the first choice each expert draws at `step` ([experts], sums to 1): the
// workload's distribution (balanced: uniform).
std::vector<double> expert_shares(const Workload& w, int experts, std::int64_t step);

// [tokens, top_k] the chosen experts of tokens first_token .. first_token + tokens - 1.
void assign_experts(const Workload& w, int experts, int top_k, std::uint64_t seed,
                    std::int64_t step, int layer, std::int64_t first_token, int tokens,
                    std::int32_t* out);

}  // namespace ted::routing
