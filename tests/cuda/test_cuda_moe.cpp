// The MoE ops on the GPU against the CPU reference: routing (the same choices, slots and
// drops as model::route, for positional and random priority, noise, top-1/2, dropless), its
// backward, dispatch/combine and their backward, and the experts as batched GEMMs.
#include <catch2/catch.hpp>

#include "cuda/gpu.hpp"
#include "ted/kernels/cpu/layers.hpp"
#include "ted/model/gating.hpp"

using namespace ted;
using namespace ted::test;
namespace cpu = ted::kernels::cpu;

namespace {

struct GateCase {
  const char* name;
  model::GateConfig config;
};

std::vector<GateCase> gate_cases() {
  std::vector<GateCase> cases;
  model::GateConfig c;
  c.experts = 8;
  c.top_k = 1;
  c.capacity_factor = 0.5;
  c.min_capacity = 2;
  cases.push_back({"top-1 positional, drops", c});
  c.random_token_selection = true;
  cases.push_back({"top-1 RTS, drops", c});
  c.top_k = 2;
  c.capacity_factor = 0.75;
  c.second_choice_noise = true;
  cases.push_back({"top-2 RTS + noise, drops", c});
  c.random_token_selection = false;
  c.second_choice_noise = false;
  c.capacity_factor = 4.0;
  cases.push_back({"top-2 positional, no drops", c});
  c.dropless = true;
  cases.push_back({"top-2 dropless", c});
  return cases;
}

// The CPU model's dispatch and combine loops (moe.cpp), on one process.
void dispatch_reference(const std::vector<float>& x, const model::Routing<float>& r, int h,
                        std::vector<float>& buffer) {
  buffer.assign(static_cast<std::size_t>(r.experts) * r.capacity * h, 0.0f);
  for (int s = 0; s < r.tokens; ++s)
    for (int k = 0; k < r.top_k; ++k) {
      int c = s * r.top_k + k;
      if (r.slot[c] < 0) continue;
      std::copy(
          x.begin() + s * h, x.begin() + (s + 1) * h,
          buffer.begin() + (static_cast<std::size_t>(r.expert[c]) * r.capacity + r.slot[c]) * h);
    }
}

}  // namespace

TEST_CASE("routing on the GPU makes the CPU's choices", "[cuda][gate]") {
  const int S = 300;
  const model::RoutingKey key{77, 5, 3, 1000};
  for (const auto& gate : gate_cases()) {
    SECTION(gate.name) {
      const int E = gate.config.experts, K = gate.config.top_k;
      auto logits = random_vector(static_cast<std::size_t>(S) * E, 30);
      auto want = model::route(logits.data(), S, gate.config, key);
      auto glogits = upload_f32(logits);
      kc::DeviceRouting r;
      kc::route(gpu(), glogits.data(), S, gate.config, key, r);
      CHECK(r.capacity == want.capacity);
      CHECK(download_i32(r.expert) == want.expert);
      CHECK(download_i32(r.slot) == want.slot);
      CHECK(download_i32(r.first_count) == want.first_count);
      CHECK(kc::dropped(gpu(), r) == want.dropped());
      CHECK_CLOSE_TO_REFERENCE(float, download(r.probs), want.probs);
      CHECK_CLOSE_TO_REFERENCE(float, download(r.weight), want.weight);
      CHECK_CLOSE_TO_REFERENCE(float, std::vector<float>{kc::aux(gpu(), r)},
                               std::vector<float>{want.aux});
      if (!gate.config.dropless) CHECK((want.dropped() > 0) == (gate.config.capacity_factor < 1));

      // Backward through the combine weights and the aux loss.
      auto d_weight = random_vector(static_cast<std::size_t>(S) * K, 31);
      std::vector<float> d_logits(static_cast<std::size_t>(S) * E);
      model::route_backward(want, d_weight.data(), 0.3f, d_logits.data());
      auto gdw = upload_f32(d_weight);
      Tensor<float> gd(gpu().device(), d_logits.size());
      kc::route_backward<float>(gpu(), r, gdw.data(), 0.3f, gd.data());
      CHECK_CLOSE_TO_REFERENCE(float, download(gd), d_logits);
    }
  }
}

TEMPLATE_TEST_CASE("dispatch and combine, forward and backward", "[cuda][permutation]", float,
                   ted::Half, ted::BFloat16) {
  using T = TestType;
  const int S = 120, h = 40;
  model::GateConfig config = gate_cases()[2].config;  // top-2, RTS, noise, drops
  const model::RoutingKey key{5, 1, 0, 0};
  auto logits = random_vector(static_cast<std::size_t>(S) * config.experts, 32);
  auto r = model::route(logits.data(), S, config, key);
  auto glogits = upload_f32(logits);
  kc::DeviceRouting gr;
  kc::route(gpu(), glogits.data(), S, config, key, gr);
  REQUIRE(download_i32(gr.slot) == r.slot);
  const std::size_t full = static_cast<std::size_t>(r.experts) * r.capacity * h;

  auto x = rounded<T>(random_vector(S * h, 33));
  std::vector<float> buffer;
  dispatch_reference(x, r, h, buffer);
  auto gx = upload<T>(x);
  Tensor<T> gbuffer(gpu().device(), full);
  kc::dispatch<T>(gpu(), gx.data(), gr, gbuffer.data(), h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gbuffer), buffer);

  // Combine and its backward on random expert outputs.
  auto out = rounded<T>(random_vector(full, 34)), dy = rounded<T>(random_vector(S * h, 35));
  std::vector<float> y(S * h, 0.0f), d_out(full, 0.0f), d_weight(S * r.top_k, 0.0f);
  std::vector<float> dx = rounded<T>(random_vector(S * h, 36)), dx0 = dx;
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < r.top_k; ++k) {
      int c = s * r.top_k + k;
      if (r.slot[c] < 0) continue;
      std::size_t row = static_cast<std::size_t>(r.expert[c]) * r.capacity + r.slot[c];
      float dot = 0;
      for (int j = 0; j < h; ++j) {
        y[s * h + j] += r.weight[c] * out[row * h + j];
        d_out[row * h + j] = r.weight[c] * dy[s * h + j];
        dot += dy[s * h + j] * out[row * h + j];
        dx[s * h + j] += buffer[row * h + j];  // dispatch backward of `buffer` as a gradient
      }
      d_weight[c] = dot;
    }
  auto gout = upload<T>(out), gdy = upload<T>(dy), gdx = upload<T>(dx0);
  Tensor<T> gy(gpu().device(), y.size()), gdout(gpu().device(), full);
  Tensor<float> gdw(gpu().device(), d_weight.size());
  kc::combine<T>(gpu(), gout.data(), gr, gy.data(), h);
  kc::combine_backward<T>(gpu(), gout.data(), gdy.data(), gr, gdout.data(), gdw.data(), h);
  kc::dispatch_backward<T>(gpu(), gbuffer.data(), gr, gdx.data(), h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdout), d_out);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw), d_weight);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdx), dx);
}

TEMPLATE_TEST_CASE("experts as batched GEMMs, forward and backward", "[cuda][experts]", float,
                   ted::Half, ted::BFloat16) {
  using T = TestType;
  const int E = 3, C = 10, h = 16, f = 24;
  const std::size_t in_size = static_cast<std::size_t>(E) * C * h;
  const std::size_t mid = static_cast<std::size_t>(E) * C * f,
                    wsize = static_cast<std::size_t>(E) * h * f;
  auto in = rounded<T>(random_vector(in_size, 40)), w1 = rounded<T>(random_vector(wsize, 41, 0.3f));
  auto w2 = rounded<T>(random_vector(wsize, 42, 0.3f)),
       d_out = rounded<T>(random_vector(in_size, 43));
  auto b1 = random_vector(E * f, 44), b2 = random_vector(E * h, 45);
  std::vector<float> hidden(mid), act(mid), out(in_size), d_act(mid), d_in(in_size, 0.0f);
  std::vector<float> dw1(wsize, 0.0f), dw2(wsize, 0.0f), db1(E * f, 0.0f), db2(E * h, 0.0f);
  for (int e = 0; e < E; ++e) {  // per expert, the CPU layers
    const float* x = in.data() + e * C * h;
    cpu::linear_forward(x, w1.data() + e * h * f, b1.data() + e * f, hidden.data() + e * C * f, C,
                        h, f);
    cpu::gelu_forward(hidden.data() + e * C * f, act.data() + e * C * f, C * f);
    cpu::linear_forward(act.data() + e * C * f, w2.data() + e * f * h, b2.data() + e * h,
                        out.data() + e * C * h, C, f, h);
  }
  auto gin = upload<T>(in), gw1 = upload<T>(w1), gw2 = upload<T>(w2), gdout = upload<T>(d_out);
  auto gb1 = upload_f32(b1), gb2 = upload_f32(b2);
  Tensor<T> ghidden(gpu().device(), mid), gact(gpu().device(), mid), gout(gpu().device(), in_size),
      gdin(gpu().device(), in_size), gdact(gpu().device(), mid);
  auto gdw1 = zeros<float>(gpu().device(), wsize), gdw2 = zeros<float>(gpu().device(), wsize),
       gdb1 = zeros<float>(gpu().device(), E * f), gdb2 = zeros<float>(gpu().device(), E * h);
  kc::expert_ffn_forward<T>(gpu(), gin.data(), gw1.data(), gb1.data(), gw2.data(), gb2.data(),
                            ghidden.data(), gact.data(), gout.data(), E, C, h, f);
  CHECK_CLOSE_TO_REFERENCE(T, download(ghidden), hidden);
  CHECK_CLOSE_TO_REFERENCE(T, download(gout), out);
  // The reference backward on the GPU's own (rounded) activations.
  auto hidden_seen = download(ghidden), act_seen = download(gact);
  for (int e = 0; e < E; ++e) {
    float* da = d_act.data() + e * C * f;
    std::fill(da, da + C * f, 0.0f);
    cpu::linear_backward(act_seen.data() + e * C * f, w2.data() + e * f * h,
                         d_out.data() + e * C * h, da, dw2.data() + e * f * h, db2.data() + e * h,
                         C, f, h);
    cpu::gelu_backward(hidden_seen.data() + e * C * f, da, da, C * f);
    cpu::linear_backward(in.data() + e * C * h, w1.data() + e * h * f, da, d_in.data() + e * C * h,
                         dw1.data() + e * h * f, db1.data() + e * f, C, h, f);
  }
  kc::expert_ffn_backward<T>(gpu(), gin.data(), gw1.data(), gw2.data(), ghidden.data(), gact.data(),
                             gdout.data(), gdin.data(), gdact.data(), gdw1.data(), gdb1.data(),
                             gdw2.data(), gdb2.data(), E, C, h, f);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdin), d_in);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw1), dw1);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw2), dw2);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb1), db1);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb2), db2);
}
