#include "ted/model/moe.hpp"

#include <algorithm>
#include <vector>

#include "ted/kernels/cpu/layers.hpp"

namespace ted::model {

namespace cpu = ted::kernels::cpu;

template <typename T>
T moe_forward(Device& device, const T* x, T* y, int tokens, int h, int f, const GateConfig& config,
              const RoutingKey& key, const MoeParams<T>& params, MoeActivations<T>& acts) {
  const int E = config.experts;
  std::vector<T> logits(static_cast<std::size_t>(tokens) * E);
  cpu::linear_forward<T>(x, params.gate, nullptr, logits.data(), tokens, h, E);
  acts.routing = route(logits.data(), tokens, config, key);
  const Routing<T>& r = acts.routing;
  const int C = r.capacity, K = r.top_k;
  const std::size_t slots = static_cast<std::size_t>(E) * C;

  acts.dispatched = zeros<T>(device, slots * h);
  for (int s = 0; s < tokens; ++s)
    for (int k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      std::size_t row = static_cast<std::size_t>(r.expert[index]) * C + r.slot[index];
      std::copy(x + static_cast<std::size_t>(s) * h, x + static_cast<std::size_t>(s + 1) * h,
                acts.dispatched.data() + row * h);
    }

  acts.hidden = Tensor<T>(device, slots * f);
  acts.activated = Tensor<T>(device, slots * f);
  acts.expert_out = Tensor<T>(device, slots * h);
  for (int e = 0; e < E; ++e) {
    std::size_t first = static_cast<std::size_t>(e) * C;
    cpu::linear_forward<T>(
        acts.dispatched.data() + first * h, params.w1 + static_cast<std::size_t>(e) * h * f,
        params.b1 + static_cast<std::size_t>(e) * f, acts.hidden.data() + first * f, C, h, f);
    cpu::gelu_forward<T>(acts.hidden.data() + first * f, acts.activated.data() + first * f,
                         static_cast<std::int64_t>(C) * f);
    cpu::linear_forward<T>(
        acts.activated.data() + first * f, params.w2 + static_cast<std::size_t>(e) * f * h,
        params.b2 + static_cast<std::size_t>(e) * h, acts.expert_out.data() + first * h, C, f, h);
  }

  std::fill(y, y + static_cast<std::size_t>(tokens) * h, T(0));
  for (int s = 0; s < tokens; ++s)
    for (int k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      const T* out = acts.expert_out.data() +
                     (static_cast<std::size_t>(r.expert[index]) * C + r.slot[index]) * h;
      T w = r.weight[index];
      T* row = y + static_cast<std::size_t>(s) * h;
      for (int j = 0; j < h; ++j) row[j] += w * out[j];
    }
  return r.aux;
}

template <typename T>
void moe_backward(Device& device, const T* x, const T* dy, T* dx, int tokens, int h, int f,
                  const MoeParams<T>& params, const MoeActivations<T>& acts, T aux_scale,
                  const MoeGrads<T>& grads) {
  const Routing<T>& r = acts.routing;
  const int E = r.experts, C = r.capacity, K = r.top_k;
  const std::size_t slots = static_cast<std::size_t>(E) * C;

  // Combine backward: gradient of each used slot, and of each combine weight.
  Tensor<T> d_out = zeros<T>(device, slots * h);
  std::vector<T> d_weight(static_cast<std::size_t>(tokens) * K, T(0));
  for (int s = 0; s < tokens; ++s)
    for (int k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      std::size_t row = static_cast<std::size_t>(r.expert[index]) * C + r.slot[index];
      const T* g = dy + static_cast<std::size_t>(s) * h;
      const T* out = acts.expert_out.data() + row * h;
      T* d = d_out.data() + row * h;
      T w = r.weight[index], dot = 0;
      for (int j = 0; j < h; ++j) {
        d[j] = w * g[j];
        dot += g[j] * out[j];
      }
      d_weight[index] = dot;
    }

  // Experts backward.
  Tensor<T> d_hidden = zeros<T>(device, slots * f), d_dispatched = zeros<T>(device, slots * h);
  for (int e = 0; e < E; ++e) {
    std::size_t first = static_cast<std::size_t>(e) * C;
    cpu::linear_backward<T>(acts.activated.data() + first * f,
                            params.w2 + static_cast<std::size_t>(e) * f * h,
                            d_out.data() + first * h, d_hidden.data() + first * f,
                            grads.w2 + static_cast<std::size_t>(e) * f * h,
                            grads.b2 + static_cast<std::size_t>(e) * h, C, f, h);
    cpu::gelu_backward<T>(acts.hidden.data() + first * f, d_hidden.data() + first * f,
                          d_hidden.data() + first * f, static_cast<std::int64_t>(C) * f);
    cpu::linear_backward<T>(acts.dispatched.data() + first * h,
                            params.w1 + static_cast<std::size_t>(e) * h * f,
                            d_hidden.data() + first * f, d_dispatched.data() + first * h,
                            grads.w1 + static_cast<std::size_t>(e) * h * f,
                            grads.b1 + static_cast<std::size_t>(e) * f, C, h, f);
  }

  // Dispatch backward: each kept choice returns its slot's gradient to its token.
  for (int s = 0; s < tokens; ++s)
    for (int k = 0; k < K; ++k) {
      auto index = static_cast<std::size_t>(s) * K + k;
      if (r.slot[index] < 0) continue;
      const T* d =
          d_dispatched.data() + (static_cast<std::size_t>(r.expert[index]) * C + r.slot[index]) * h;
      T* row = dx + static_cast<std::size_t>(s) * h;
      for (int j = 0; j < h; ++j) row[j] += d[j];
    }

  // Gate backward: through the combine weights and the aux loss into the logits, then Wg.
  std::vector<T> d_logits(static_cast<std::size_t>(tokens) * E);
  route_backward(r, d_weight.data(), aux_scale, d_logits.data());
  cpu::linear_backward<T>(x, params.gate, d_logits.data(), dx, grads.gate, nullptr, tokens, h, E);
}

double moe_forward_flops(int tokens, int h, int f, int experts, int capacity) {
  double gate = 2.0 * tokens * h * experts;
  double ffn = 2.0 * 2.0 * static_cast<double>(experts) * capacity * h * f;
  return gate + ffn;
}

template float moe_forward<float>(Device&, const float*, float*, int, int, int, const GateConfig&,
                                  const RoutingKey&, const MoeParams<float>&,
                                  MoeActivations<float>&);
template double moe_forward<double>(Device&, const double*, double*, int, int, int,
                                    const GateConfig&, const RoutingKey&, const MoeParams<double>&,
                                    MoeActivations<double>&);
template void moe_backward<float>(Device&, const float*, const float*, float*, int, int, int,
                                  const MoeParams<float>&, const MoeActivations<float>&, float,
                                  const MoeGrads<float>&);
template void moe_backward<double>(Device&, const double*, const double*, double*, int, int, int,
                                   const MoeParams<double>&, const MoeActivations<double>&, double,
                                   const MoeGrads<double>&);

}  // namespace ted::model
