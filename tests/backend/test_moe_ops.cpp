// The MoE ops of the kernel table against the CPU fp32 reference: routing (the same experts,
// slots and drops as kernels/cpu/gating.cpp for positional and random priority, noise, top-1/2,
// dropless), its backward and statistics, dispatch and combine into a padded capacity and their
// backward, and the experts on an exchange's [sources, experts, rows, h] layout.
#include "catch.hpp"

#include <cstdlib>

#include "backend/backend.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/kernels/cpu/gating.hpp"
#include "ted/kernels/cpu/linear.hpp"

using namespace ted;
using namespace ted::test;
namespace cpu = ted::kernels::cpu;

namespace {

struct GateCase {
  const char* name;
  routing::GateConfig config;
};

std::vector<GateCase> gate_cases() {
  std::vector<GateCase> cases;
  routing::GateConfig c;
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

// The CPU reference routing on host vectors.
struct HostRouting {
  int capacity = 0;
  std::vector<float> probs, gate_value, weight;
  std::vector<std::int32_t> expert, slot, first_count;
  float aux = 0;
  int dropped() const { return static_cast<int>(std::count(slot.begin(), slot.end(), -1)); }
};

HostRouting reference_route(const std::vector<float>& logits, int tokens,
                            const routing::GateConfig& config, const routing::RoutingKey& key) {
  HostRouting r;
  const std::size_t choices = static_cast<std::size_t>(tokens) * config.top_k;
  r.probs.resize(static_cast<std::size_t>(tokens) * config.experts);
  r.gate_value.resize(choices);
  r.weight.resize(choices);
  r.expert.resize(choices);
  r.slot.resize(choices);
  r.first_count.resize(config.experts);
  r.capacity =
      cpu::route<float>(logits.data(), tokens, config, key,
                        {r.probs.data(), r.expert.data(), r.slot.data(), r.gate_value.data(),
                         r.weight.data(), r.first_count.data(), &r.aux});
  return r;
}

}  // namespace

TEST_CASE("routing makes the CPU reference's choices", "[ops][gate]") {
  const int S = 300;
  const routing::RoutingKey key{77, 5, 3, 1000};
  for (const auto& gate : gate_cases()) {
    SECTION(gate.name) {
      const int E = gate.config.experts, K = gate.config.top_k;
      auto logits = random_vector(static_cast<std::size_t>(S) * E, 30);
      auto want = reference_route(logits, S, gate.config, key);
      auto glogits = upload<float>(logits);
      routing::Routing<float> r;
      ops<float>().route(glogits.data(), S, gate.config, key, r);
      CHECK(r.capacity == want.capacity);
      CHECK(download_i32(r.expert) == want.expert);
      CHECK(download_i32(r.slot) == want.slot);
      CHECK(download_i32(r.first_count) == want.first_count);
      // The kept choices per expert, where the backend reports them (the CPU does, unless
      // TED_FULL_CAPACITY): they fill exactly slots 0 .. kept - 1.
      if (ops<float>().name() == "cpu" && !std::getenv("TED_FULL_CAPACITY"))
        CHECK(r.kept.size() == static_cast<std::size_t>(E));
      if (!r.kept.empty()) {
        std::vector<std::int32_t> kept(E, 0), last(E, -1);
        for (std::size_t c = 0; c < want.slot.size(); ++c)
          if (want.slot[c] >= 0) {
            ++kept[want.expert[c]];
            last[want.expert[c]] = std::max(last[want.expert[c]], want.slot[c]);
          }
        CHECK(r.kept == kept);
        for (int e = 0; e < E; ++e) CHECK(last[e] + 1 == kept[e]);
      }
      const auto stats = ops<float>().routing_stats(r);
      CHECK(stats.dropped == want.dropped());
      CHECK_CLOSE_TO_REFERENCE(float, download(r.probs), want.probs);
      CHECK_CLOSE_TO_REFERENCE(float, download(r.weight), want.weight);
      CHECK_CLOSE_TO_REFERENCE(float, std::vector<float>{static_cast<float>(stats.aux)},
                               std::vector<float>{want.aux});
      if (!gate.config.dropless) CHECK((want.dropped() > 0) == (gate.config.capacity_factor < 1));

      // Backward through the combine weights and the aux loss.
      auto d_weight = random_vector(static_cast<std::size_t>(S) * K, 31);
      std::vector<float> d_logits(static_cast<std::size_t>(S) * E);
      cpu::route_backward<float>(
          {want.probs.data(), want.expert.data(), want.slot.data(), want.gate_value.data(),
           want.weight.data(), want.first_count.data(), &want.aux},
          S, E, K, d_weight.data(), 0.3f, d_logits.data());
      auto gdw = upload<float>(d_weight);
      Tensor<float> gd(device(), d_logits.size());
      ops<float>().route_backward(r, gdw.data(), 0.3f, gd.data());
      CHECK_CLOSE_TO_REFERENCE(float, download(gd), d_logits);
    }
  }
}

TEMPLATE_TEST_CASE("dispatch and combine into a padded capacity, forward and backward",
                   "[ops][permutation]", float, ted::Half, ted::BFloat16) {
  using T = TestType;
  // Rows a backend may move 16 bytes at a time (40), and rows it cannot (37).
  const int S = 120, h = GENERATE(40, 37);
  routing::GateConfig config = gate_cases()[2].config;  // top-2, RTS, noise, drops
  const routing::RoutingKey key{5, 1, 0, 0};
  auto logits = random_vector(static_cast<std::size_t>(S) * config.experts, 32);
  auto r = reference_route(logits, S, config, key);
  auto glogits = upload<float>(logits);
  routing::Routing<float> gr;
  ops<T>().route(glogits.data(), S, config, key, gr);
  REQUIRE(download_i32(gr.slot) == r.slot);
  const int Cp = r.capacity + 3;  // DTD pads the capacity to a multiple of T
  const std::size_t full = static_cast<std::size_t>(config.experts) * Cp * h;

  auto x = rounded<T>(random_vector(S * h, 33));
  std::vector<float> buffer(full, 0.0f);
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < config.top_k; ++k) {
      int c = s * config.top_k + k;
      if (r.slot[c] < 0) continue;
      std::copy(x.begin() + s * h, x.begin() + (s + 1) * h,
                buffer.begin() + (static_cast<std::size_t>(r.expert[c]) * Cp + r.slot[c]) * h);
    }
  auto gx = upload<T>(x);
  Tensor<T> gbuffer(device(), full);
  ops<T>().dispatch(gx.data(), gr, gbuffer.data(), h, Cp);
  CHECK_CLOSE_TO_REFERENCE(T, download(gbuffer), buffer);

  // Combine and its backward on random expert outputs.
  auto out = rounded<T>(random_vector(full, 34)), dy = rounded<T>(random_vector(S * h, 35));
  std::vector<float> y(S * h, 0.0f), d_out(full, 0.0f), d_weight(S * config.top_k, 0.0f);
  std::vector<float> dx = rounded<T>(random_vector(S * h, 36)), dx0 = dx;
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < config.top_k; ++k) {
      int c = s * config.top_k + k;
      if (r.slot[c] < 0) continue;
      std::size_t row = static_cast<std::size_t>(r.expert[c]) * Cp + r.slot[c];
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
  Tensor<T> gy(device(), y.size()), gdout(device(), full);
  Tensor<float> gdw(device(), d_weight.size());
  ops<T>().combine(gout.data(), gr, gy.data(), h, Cp);
  ops<T>().combine_backward(gout.data(), gdy.data(), gr, gdout.data(), gdw.data(), h, Cp);
  ops<T>().dispatch_backward(gbuffer.data(), gr, gdx.data(), h, Cp);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdout), d_out);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw), d_weight);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdx), dx);
}

namespace {

// The experts against the CPU layers block by block. used (one per block, or empty for all
// rows): rows past used[b] are empty slots, with a zero gradient; there the backend's out is
// 0 or the full computation, and its input gradient 0.
template <typename T>
void check_experts(const std::vector<std::int32_t>& used) {
  const int sources = 2, E = 3, R = 10, h = 16, f = 24;
  const int blocks = sources * E;
  const std::size_t in_size = static_cast<std::size_t>(blocks) * R * h;
  const std::size_t mid = static_cast<std::size_t>(blocks) * R * f,
                    wsize = static_cast<std::size_t>(E) * h * f;
  auto in = rounded<T>(random_vector(in_size, 40)), w1 = rounded<T>(random_vector(wsize, 41, 0.3f));
  auto w2 = rounded<T>(random_vector(wsize, 42, 0.3f)),
       d_out = rounded<T>(random_vector(in_size, 43));
  auto b1 = rounded<T>(random_vector(E * f, 44));
  auto empty = [&](int b, int row) { return !used.empty() && row >= used[b]; };
  for (int b = 0; b < blocks; ++b)
    for (int row = 0; row < R; ++row)
      if (empty(b, row)) std::fill_n(d_out.begin() + (b * R + row) * h, h, 0.0f);
  std::vector<float> hidden(mid), act(mid), out(in_size), d_act(mid), d_in(in_size, 0.0f);
  std::vector<float> dw1(wsize, 0.0f), dw2(wsize, 0.0f), db1(E * f, 0.0f), db2(E * h, 0.0f);
  for (int b = 0; b < blocks; ++b) {  // per block, the CPU layers on expert b mod E
    const int e = b % E;
    cpu::linear_forward(in.data() + b * R * h, w1.data() + e * h * f, b1.data() + e * f,
                        hidden.data() + b * R * f, R, h, f);
    cpu::gelu_forward(hidden.data() + b * R * f, act.data() + b * R * f, R * f);
    cpu::linear_forward(act.data() + b * R * f, w2.data() + e * f * h,
                        static_cast<const float*>(nullptr), out.data() + b * R * h, R, f, h);
  }
  auto gin = upload<T>(in), gw1 = upload<T>(w1), gw2 = upload<T>(w2), gdout = upload<T>(d_out),
       gb1 = upload<T>(b1);
  Tensor<T> ghidden(device(), mid), gact(device(), mid), gout(device(), in_size),
      gdin(device(), in_size);
  auto gdw1 = zeros<float>(device(), wsize), gdw2 = zeros<float>(device(), wsize),
       gdb1 = zeros<float>(device(), E * f), gdb2 = zeros<float>(device(), E * h);
  const std::int32_t* used_rows = used.empty() ? nullptr : used.data();
  ops<T>().experts_forward(gin.data(), gw1.data(), gb1.data(), gw2.data(), ghidden.data(),
                           gact.data(), gout.data(), sources, E, R, h, f, used_rows);
  auto out_seen = download(gout), hidden_seen = download(ghidden), act_seen = download(gact);
  // Empty rows: out is 0 or computed; hidden and act are unspecified, so take the reference's
  // (the backward below runs the reference on the backend's own rounded activations).
  for (int b = 0; b < blocks; ++b)
    for (int row = 0; row < R; ++row) {
      if (!empty(b, row)) continue;
      const std::size_t at = static_cast<std::size_t>(b * R + row);
      const bool zero = std::all_of(out_seen.begin() + at * h, out_seen.begin() + (at + 1) * h,
                                    [](float v) { return v == 0.0f; });
      if (zero) std::fill_n(out.begin() + at * h, h, 0.0f);
      std::copy_n(hidden.begin() + at * f, f, hidden_seen.begin() + at * f);
      std::copy_n(act.begin() + at * f, f, act_seen.begin() + at * f);
    }
  CHECK_CLOSE_TO_REFERENCE(T, hidden_seen, hidden);
  CHECK_CLOSE_TO_REFERENCE(T, out_seen, out);
  for (int b = 0; b < blocks; ++b) {
    const int e = b % E;
    float* da = d_act.data() + b * R * f;
    std::fill(da, da + R * f, 0.0f);
    cpu::linear_backward(act_seen.data() + b * R * f, w2.data() + e * f * h,
                         d_out.data() + b * R * h, da, dw2.data() + e * f * h, db2.data() + e * h,
                         R, f, h);
    cpu::gelu_backward(hidden_seen.data() + b * R * f, da, da, R * f);
    cpu::linear_backward(in.data() + b * R * h, w1.data() + e * h * f, da, d_in.data() + b * R * h,
                         dw1.data() + e * h * f, db1.data() + e * f, R, h, f);
  }
  ops<T>().experts_backward(gin.data(), gw1.data(), gw2.data(), ghidden.data(), gact.data(),
                            gdout.data(), gdin.data(), gdw1.data(), gdb1.data(), gdw2.data(),
                            gdb2.data(), sources, E, R, h, f, used_rows);
  const auto d_in_seen = download(gdin);
  CHECK_CLOSE_TO_REFERENCE(T, d_in_seen, d_in);
  bool empty_rows_zero = true;
  for (int b = 0; b < blocks; ++b)
    for (int row = 0; row < R; ++row)
      if (empty(b, row))
        for (int j = 0; j < h; ++j) empty_rows_zero &= d_in_seen[(b * R + row) * h + j] == 0.0f;
  CHECK(empty_rows_zero);
  // fp32 gradients. dW2 and db2 come from 16-bit operands the reference sees too; dW1 and db1
  // from the hidden layer's gradient, which a backend may round to T once so that its GEMMs
  // take 16-bit operands (the CUDA backend does, as DeepSpeed and Megatron do): T's tolerance.
  CHECK_CLOSE_TO_REFERENCE(T, download(gdw1), dw1);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw2), dw2);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdb1), db1);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb2), db2);
}

}  // namespace

TEMPLATE_TEST_CASE("experts on the exchange's [sources, experts, rows, h] blocks", "[ops][experts]",
                   float, ted::Half, ted::BFloat16) {
  SECTION("every row") {
    check_experts<TestType>({});
  }
  // Blocks full, empty, partly filled and one row, as the MoE layer passes its kept slots.
  SECTION("empty slots left out") {
    check_experts<TestType>({10, 0, 7, 1, 4, 9});
  }
}
