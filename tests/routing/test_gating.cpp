// Gating on hand-made inputs (docs/algorithm.md section 2): capacity arithmetic, which tokens are
// dropped (by position and by RTS), first choices winning over second, renormalised top-2
// weights, dropless mode, the noisy second choice, the aux loss value and its rounding, and near
// ties between logits.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ted/backend/registry.hpp"
#include "ted/core/random.hpp"
#include "ted/routing/gating.hpp"

using ted::routing::GateConfig;

namespace {
// A routing computed by the CPU backend (fp64), read into host vectors for the checks.
struct HostRouting {
  int capacity = 0;
  std::vector<int> expert, slot;
  std::vector<double> gate_value, weight;
  double aux = 0;
  int dropped() const { return static_cast<int>(std::count(slot.begin(), slot.end(), -1)); }
};

HostRouting route(const double* logits, int tokens, const GateConfig& config,
                  const ted::routing::RoutingKey& key) {
  auto device = ted::make_cpu_device();
  auto ops = ted::make_ops<double>(*device);
  ted::routing::Routing<double> r;
  ops->route(logits, tokens, config, key, r);
  HostRouting host;
  host.capacity = r.capacity;
  host.expert.assign(r.expert.data(), r.expert.data() + r.expert.size());
  host.slot.assign(r.slot.data(), r.slot.data() + r.slot.size());
  host.gate_value.assign(r.gate_value.data(), r.gate_value.data() + r.gate_value.size());
  host.weight.assign(r.weight.data(), r.weight.data() + r.weight.size());
  host.aux = ops->routing_stats(r).aux;
  CHECK(ops->routing_stats(r).dropped == host.dropped());
  return host;
}

GateConfig gate(int experts, int top_k, double cf, int min_capacity) {
  GateConfig c;
  c.experts = experts;
  c.top_k = top_k;
  c.capacity_factor = cf;
  c.min_capacity = min_capacity;
  return c;
}

// Logits where every token prefers expert `first` (logit 3), then `second` (logit 2).
std::vector<double> preferring(int tokens, int experts, int first, int second) {
  std::vector<double> logits(static_cast<std::size_t>(tokens) * experts, 0.0);
  for (int s = 0; s < tokens; ++s) {
    logits[static_cast<std::size_t>(s) * experts + first] = 3.0;
    logits[static_cast<std::size_t>(s) * experts + second] = 2.0;
  }
  return logits;
}
}  // namespace

TEST_CASE("capacity: ceil(k * cf * S / E), at least min_capacity") {
  CHECK(ted::routing::expert_capacity(gate(4, 1, 1.0, 0), 10) == 3);  // ceil(2.5)
  CHECK(ted::routing::expert_capacity(gate(4, 1, 1.0, 4), 10) == 4);  // min capacity wins
  CHECK(ted::routing::expert_capacity(gate(4, 2, 1.0, 0), 10) == 5);  // top-2 doubles it
  CHECK(ted::routing::expert_capacity(gate(8, 1, 1.25, 0), 64) == 10);
  CHECK(ted::routing::expert_capacity(gate(16, 1, 0.5, 0), 2048) == 64);
  CHECK(ted::routing::expert_capacity(gate(3, 1, 1.1, 0), 30) == 11);  // 11.000000000000002 -> 11
  // Exact, where DeepSpeed-MoE's float32 ceil(100 / 4 * 1.2f) gives 31 (docs/algorithm.md,
  // "Differences from DeepSpeed-MoE's gating").
  CHECK(ted::routing::expert_capacity(gate(4, 1, 1.2, 0), 100) == 30);
  // Fewer tokens than min_capacity: the minimum, where DeepSpeed-MoE's top-1 refuses.
  CHECK(ted::routing::expert_capacity(gate(4, 1, 1.0, 8), 5) == 8);
}

TEST_CASE("top-1: tokens over capacity are dropped by position; weight = prob") {
  auto logits = preferring(6, 4, 2, 0);
  auto r = route(logits.data(), 6, gate(4, 1, 1.0, 2), {});
  REQUIRE(r.capacity == 2);
  for (int s = 0; s < 6; ++s) CHECK(r.expert[s] == 2);
  CHECK(r.slot == std::vector<int>{0, 1, -1, -1, -1, -1});
  double p = std::exp(3.0) / (std::exp(3.0) + std::exp(2.0) + 2.0);
  CHECK(r.weight[0] == Approx(p));  // not renormalised
  CHECK(r.weight[1] == Approx(p));
  CHECK(r.weight[2] == 0.0);
  CHECK(r.dropped() == 4);
}

TEST_CASE("RTS: the kept tokens are those of highest random priority, keyed by token index") {
  auto logits = preferring(8, 4, 1, 3);
  GateConfig config = gate(4, 1, 1.0, 3);
  config.random_token_selection = true;
  ted::routing::RoutingKey key{42, 7, 3, 1000};
  auto r = route(logits.data(), 8, config, key);
  std::vector<std::pair<std::uint64_t, int>> priority;
  for (int s = 0; s < 8; ++s)
    priority.push_back({ted::random::hash(42, ted::random::kTokenSelection, 7, 3, 1000 + s), s});
  std::sort(priority.rbegin(), priority.rend());
  std::vector<int> kept;
  for (int s = 0; s < 8; ++s)
    if (r.slot[s] >= 0) kept.push_back(s);
  std::vector<int> expected = {priority[0].second, priority[1].second, priority[2].second};
  std::sort(expected.begin(), expected.end());
  CHECK(kept == expected);
  CHECK(kept != std::vector<int>{0, 1, 2});  // not positional for this key
  // Same key, same choice; another step, another draw.
  CHECK(route(logits.data(), 8, config, key).slot == r.slot);
  key.step = 8;
  CHECK(route(logits.data(), 8, config, key).slot != r.slot);
}

TEST_CASE("top-2: first choices win the slots before any second choice") {
  // Token 0 prefers expert 0 then expert 1; tokens 1..3 prefer expert 1 first.
  std::vector<double> logits = preferring(4, 3, 1, 2);
  logits[0] = 3.0, logits[1] = 2.0, logits[2] = 0.0;  // token 0: 0 then 1
  auto r = route(logits.data(), 4, gate(3, 2, 0.75, 0), {});
  REQUIRE(r.capacity == 2);  // ceil(2 * 0.75 * 4 / 3)
  CHECK(r.expert[0] == 0);
  CHECK(r.expert[1] == 1);
  CHECK(r.slot[1] == -1);  // token 0's second choice (expert 1) loses to first choices ...
  CHECK(r.slot[2] == 0);   // ... of tokens 1 and 2, although token 0 comes first
  CHECK(r.slot[4] == 1);
  CHECK(r.slot[6] == -1);  // token 3's first choice: expert 1 is full
  // Renormalised weights: token 0 kept only its first choice -> weight 1.
  CHECK(r.weight[0] == Approx(1.0));
  CHECK(r.weight[1] == 0.0);
  // Token 1 kept both (expert 1 and expert 2): g_i / (g_1 + g_2).
  double g1 = r.gate_value[2], g2 = r.gate_value[3];
  REQUIRE(r.slot[3] >= 0);
  CHECK(r.weight[2] == Approx(g1 / (g1 + g2)));
  CHECK(r.weight[3] == Approx(g2 / (g1 + g2)));
  // Token 3 finds both experts full: nothing kept, both weights 0.
  CHECK(r.slot[7] == -1);
  CHECK(r.weight[6] == 0.0);
  CHECK(r.weight[7] == 0.0);

  // A token that loses its first choice but keeps its second gets weight 1 there.
  // All prefer expert 0; second choices: token 0 -> 1, token 1 -> 2, token 2 -> 1. C = 1.
  std::vector<double> l2 = {3, 2, 0, 3, 0, 2, 3, 2, 0};
  auto q = route(l2.data(), 3, gate(3, 2, 0.5, 0), {});
  REQUIRE(q.capacity == 1);
  CHECK(q.slot == std::vector<int>{0, 0, -1, 0, -1, -1});
  CHECK(q.weight[3] == Approx(1.0));  // token 1, second choice
  CHECK(q.weight[0] == Approx(q.gate_value[0] / (q.gate_value[0] + q.gate_value[1])));
}

TEST_CASE("dropless: capacity is the largest load and nothing is dropped") {
  auto logits = preferring(7, 4, 3, 1);
  GateConfig config = gate(4, 2, 0.1, 0);
  config.dropless = true;
  auto r = route(logits.data(), 7, config, {});
  CHECK(r.capacity == 7);
  CHECK(r.dropped() == 0);
}

TEST_CASE("noisy second choice never repeats the first and moves some choices") {
  const int S = 64, E = 6;
  std::vector<double> logits(S * E);
  for (int i = 0; i < S * E; ++i) logits[i] = 0.1 * ((i * 7) % 11);
  GateConfig plain = gate(E, 2, 4.0, 0), noisy = plain;
  noisy.second_choice_noise = true;
  auto a = route(logits.data(), S, plain, {3, 1, 0, 0});
  auto b = route(logits.data(), S, noisy, {3, 1, 0, 0});
  int moved = 0;
  for (int s = 0; s < S; ++s) {
    CHECK(b.expert[2 * s] == a.expert[2 * s]);  // first choices are not noisy
    CHECK(b.expert[2 * s + 1] != b.expert[2 * s]);
    moved += a.expert[2 * s + 1] != b.expert[2 * s + 1];
  }
  CHECK(moved > 0);
}

TEST_CASE("aux loss = E * sum_e mean(prob_e) * fraction of first choices on e") {
  // 4 tokens, 2 experts. Logits chosen so probabilities are easy: p = softmax.
  std::vector<double> logits = {1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 0.0, 0.0};
  auto r = route(logits.data(), 4, gate(2, 1, 1.0, 0), {});
  double e = std::exp(1.0), e2 = std::exp(2.0);
  double p0[4] = {e / (e + 1), 1 / (1 + e), e2 / (e2 + 1), 0.5};
  double mean0 = (p0[0] + p0[1] + p0[2] + p0[3]) / 4, mean1 = 1 - mean0;
  // First choices: expert 0, 1, 0, and a tie (0.5/0.5) resolved to the lower index, 0.
  double f0 = 3.0 / 4, f1 = 1.0 / 4;
  CHECK(r.aux == Approx(2 * (mean0 * f0 + mean1 * f1)));
  // Top-2 uses first choices only: the same value.
  CHECK(route(logits.data(), 4, gate(2, 2, 1.0, 0), {}).aux == Approx(r.aux));
  // Perfect balance gives 1.
  std::vector<double> balanced = {1.0, 0.0, 0.0, 1.0};
  CHECK(route(balanced.data(), 2, gate(2, 1, 1.0, 0), {}).aux == Approx(1.0));
}

namespace {
// The routing of `logits` through the CPU backend in the master type M, with its probabilities
// and first-choice counts (what the aux loss is made of).
template <typename M>
struct Routed {
  std::vector<M> probs;
  std::vector<int> expert, first_count;
  M aux = 0;
};

template <typename M>
Routed<M> route_in(const std::vector<M>& logits, int tokens, const GateConfig& config) {
  auto device = ted::make_cpu_device();
  auto ops = ted::make_ops<M>(*device);
  ted::routing::Routing<M> r;
  ops->route(logits.data(), tokens, config, {}, r);
  Routed<M> out;
  out.probs.assign(r.probs.data(), r.probs.data() + r.probs.size());
  out.expert.assign(r.expert.data(), r.expert.data() + r.expert.size());
  out.first_count.assign(r.first_count.data(), r.first_count.data() + r.first_count.size());
  out.aux = r.aux.data()[0];
  return out;
}

// The aux loss of a routing's own probabilities and counts, summed in long double.
template <typename M>
long double exact_aux(const Routed<M>& r, int tokens, int experts) {
  long double aux = 0;
  for (int e = 0; e < experts; ++e) {
    long double sum = 0;
    for (int s = 0; s < tokens; ++s) sum += r.probs[static_cast<std::size_t>(s) * experts + e];
    aux += (sum / tokens) * (static_cast<long double>(r.first_count[e]) / tokens);
  }
  return aux * experts;
}
}  // namespace

TEST_CASE("fp32 aux loss at S = 1000 is within 1e-6 of a long double sum of the same probs") {
  // A float running sum of 1000 probabilities loses up to half an ulp of the sum per token; when
  // the tokens are alike (here: 1000 copies of one token, as a batch of padding has) the losses
  // all go one way. Measured with float sums: 9.2e-6 relative for the copies, 1.3e-7 for varied
  // tokens; with double sums only the final rounding to float is left: 0 and 1.3e-8.
  const int S = 1000, E = 8;
  std::vector<float> copies(static_cast<std::size_t>(S) * E), varied(copies.size());
  for (std::size_t i = 0; i < copies.size(); ++i) {
    copies[i] = 0.3f * static_cast<float>(i % E);
    varied[i] = static_cast<float>(3.0 * ted::random::normal(7, ted::random::kData, i, 0));
  }
  for (const auto* logits : {&copies, &varied}) {
    for (int top_k : {1, 2}) {
      auto r = route_in(*logits, S, gate(E, top_k, 1.0, 0));
      const long double want = exact_aux(r, S, E);
      const double error = static_cast<double>(std::abs(r.aux - want) / want);
      const char* what = logits == &copies ? "copies of one token" : "varied tokens";
      INFO(what << ", top-" << top_k << ": aux " << r.aux << ", relative error " << error);
      CHECK(error < 1e-6);
    }
  }
}

TEMPLATE_TEST_CASE("near tie: the larger logit wins though the softmax rounds both equal", "",
                   float, double) {
  using M = TestType;
  // Two logits one ulp apart near 0.3: exp() of their difference rounds to 1, so their
  // probabilities are equal and an argmax over probabilities would take the lower index.
  const M low = M(0.3), high = std::nextafter(low, M(1));
  const std::vector<M> logits = {low, high, M(-1), M(-2)};
  auto top1 = route_in(logits, 1, gate(4, 1, 1.0, 0));
  REQUIRE(top1.probs[0] == top1.probs[1]);  // the premise: a tie in probability
  CHECK(top1.expert[0] == 1);
  CHECK(top1.first_count == std::vector<int>{0, 1, 0, 0});
  auto top2 = route_in(logits, 1, gate(4, 2, 1.0, 0));
  CHECK(top2.expert == std::vector<int>{1, 0});
  // The other way round, the same two experts swap.
  const std::vector<M> swapped = {high, low, M(-1), M(-2)};
  CHECK(route_in(swapped, 1, gate(4, 2, 1.0, 0)).expert == std::vector<int>{0, 1});
}
