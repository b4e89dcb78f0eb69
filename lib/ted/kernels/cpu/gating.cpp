#include "ted/kernels/cpu/gating.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ted/core/random.hpp"

namespace ted::kernels::cpu {

namespace {
// E * sum_e mean_s(probs[s, e]) * (first_count[e] / S), summed in double: a float running sum
// over a group's tokens loses up to half an ulp per token, all one way when the tokens are
// alike (about 1e-5 relative at S = 1000).
template <typename T>
double aux_loss(const T* probs, const std::int32_t* first_count, int tokens, int experts) {
  if (tokens == 0) return 0;
  double aux = 0;
  for (int e = 0; e < experts; ++e) {
    double sum = 0;
    for (int s = 0; s < tokens; ++s) sum += probs[static_cast<std::size_t>(s) * experts + e];
    aux += (sum / tokens) * (static_cast<double>(first_count[e]) / tokens);
  }
  return aux * experts;
}
}  // namespace

template <typename T>
int route(const T* logits, int tokens, const routing::GateConfig& config,
          const routing::RoutingKey& key, const RoutingArrays<T>& r) {
  const int E = config.experts;
  const int K = config.top_k;
  const auto choices = static_cast<std::size_t>(tokens) * K;
  std::fill(r.expert, r.expert + choices, -1);
  std::fill(r.slot, r.slot + choices, -1);
  std::fill(r.gate_value, r.gate_value + choices, T(0));
  std::fill(r.weight, r.weight + choices, T(0));
  std::fill(r.first_count, r.first_count + E, 0);

  for (int s = 0; s < tokens; ++s) {  // softmax and choices
    const T* row = logits + static_cast<std::int64_t>(s) * E;
    T* p = r.probs + static_cast<std::int64_t>(s) * E;
    // The first choice is the argmax of the logits, not of p: two logits an ulp apart can
    // round to equal probabilities, and the larger logit must still win.
    const int largest = static_cast<int>(std::max_element(row, row + E) - row);
    const T max = row[largest];
    const int first = key.forced ? key.forced[static_cast<std::size_t>(s) * K] : largest;
    T sum = 0;
    for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(row[e] - max));
    for (int e = 0; e < E; ++e) p[e] /= sum;
    r.expert[static_cast<std::size_t>(s) * K] = first;
    r.first_count[first] += 1;
    if (K == 2 && key.forced) {
      r.expert[static_cast<std::size_t>(s) * K + 1] =
          key.forced[static_cast<std::size_t>(s) * K + 1];
    } else if (K == 2) {  // the argmax of the other logits, ties to the lower index as the first
      int second = -1;
      double best = -std::numeric_limits<double>::infinity();
      for (int e = 0; e < E; ++e) {
        if (e == first) continue;
        double score = static_cast<double>(row[e]);
        if (config.second_choice_noise)
          score += random::gumbel(random::hash(key.seed, random::kSecondNoise, key.step, key.layer,
                                               (key.first_token + s) * E + e));
        if (score > best) best = score, second = e;
      }
      r.expert[static_cast<std::size_t>(s) * K + 1] = second;
    }
    for (int k = 0; k < K; ++k) {
      int e = r.expert[static_cast<std::size_t>(s) * K + k];
      r.gate_value[static_cast<std::size_t>(s) * K + k] = e >= 0 ? p[e] : T(0);
    }
  }

  // Priority of tokens within a round: position, or a random score (highest first).
  std::vector<int> order(tokens);
  std::iota(order.begin(), order.end(), 0);
  if (config.random_token_selection) {
    std::vector<std::uint64_t> score(tokens);
    for (int s = 0; s < tokens; ++s)
      score[s] =
          random::hash(key.seed, random::kTokenSelection, key.step, key.layer, key.first_token + s);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return score[a] > score[b]; });
  }

  int capacity = 0;
  if (config.dropless) {
    std::vector<int> load(E, 0);
    for (std::size_t c = 0; c < choices; ++c)
      if (r.expert[c] >= 0) ++load[r.expert[c]];
    capacity = tokens ? *std::max_element(load.begin(), load.end()) : 0;
  } else {
    capacity = routing::expert_capacity(config, tokens);
  }
  std::vector<int> fill(E, 0);
  for (int k = 0; k < K; ++k) {  // round k: every token's k-th choice, in priority order
    for (int s : order) {
      auto index = static_cast<std::size_t>(s) * K + k;
      int e = r.expert[index];
      if (e >= 0 && fill[e] < capacity) r.slot[index] = fill[e]++;
    }
  }
  if (r.kept) std::copy(fill.begin(), fill.end(), r.kept);

  const T eps = std::numeric_limits<T>::epsilon();
  for (int s = 0; s < tokens; ++s) {
    auto base = static_cast<std::size_t>(s) * K;
    if (K == 1) {
      r.weight[base] = r.slot[base] >= 0 ? r.gate_value[base] : T(0);
    } else {
      T a = r.slot[base] >= 0 ? r.gate_value[base] : T(0);
      T b = r.slot[base + 1] >= 0 ? r.gate_value[base + 1] : T(0);
      T denominator = std::max(a + b, eps);
      r.weight[base] = a / denominator;
      r.weight[base + 1] = b / denominator;
    }
  }

  *r.aux = static_cast<T>(aux_loss(r.probs, r.first_count, tokens, E));
  return capacity;
}

template <typename T>
void route_backward(const RoutingArrays<const T>& r, int S, int E, int K, const T* d_weight,
                    T aux_scale, T* d_logits) {
  const T eps = std::numeric_limits<T>::epsilon();
  std::vector<T> d_probs(E);
  for (int s = 0; s < S; ++s) {
    std::fill(d_probs.begin(), d_probs.end(), T(0));
    auto base = static_cast<std::size_t>(s) * K;
    if (K == 1) {
      if (r.slot[base] >= 0) d_probs[r.expert[base]] += d_weight[base];
    } else {
      T k1 = r.slot[base] >= 0 ? T(1) : T(0), k2 = r.slot[base + 1] >= 0 ? T(1) : T(0);
      T a = r.gate_value[base] * k1, b = r.gate_value[base + 1] * k2;
      T sum = a + b;
      T dw1 = d_weight[base], dw2 = d_weight[base + 1];
      if (sum >= eps) {  // w1 = a / (a + b), w2 = b / (a + b)
        T inv2 = T(1) / (sum * sum);
        d_probs[r.expert[base]] += k1 * b * (dw1 - dw2) * inv2;
        d_probs[r.expert[base + 1]] += k2 * a * (dw2 - dw1) * inv2;
      } else {  // clamped denominator: w_i = g_i k_i / eps
        d_probs[r.expert[base]] += k1 * dw1 / eps;
        d_probs[r.expert[base + 1]] += k2 * dw2 / eps;
      }
    }
    // aux = E * sum_e mean(p[:,e]) * f_e, f_e constant: d aux / d p[s,e] = E * f_e / S.
    for (int e = 0; e < E; ++e) d_probs[e] += aux_scale * T(E) * (T(r.first_count[e]) / S) / S;
    const T* p = r.probs + static_cast<std::size_t>(s) * E;
    T dot = 0;
    for (int e = 0; e < E; ++e) dot += p[e] * d_probs[e];
    T* out = d_logits + static_cast<std::size_t>(s) * E;
    for (int e = 0; e < E; ++e) out[e] = p[e] * (d_probs[e] - dot);
  }
}

template int route<float>(const float*, int, const routing::GateConfig&, const routing::RoutingKey&,
                          const RoutingArrays<float>&);
template int route<double>(const double*, int, const routing::GateConfig&,
                           const routing::RoutingKey&, const RoutingArrays<double>&);
template void route_backward<float>(const RoutingArrays<const float>&, int, int, int, const float*,
                                    float, float*);
template void route_backward<double>(const RoutingArrays<const double>&, int, int, int,
                                     const double*, double, double*);

}  // namespace ted::kernels::cpu
