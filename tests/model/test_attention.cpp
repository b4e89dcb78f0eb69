// The two attention variants of the model (model.attention): fused (FlashAttention-2, the
// default) and materialised compute the same function, so a model gives the same losses and
// gradients with either (fp64: to rounding; fp32: within 1e-5, the sums run in another order);
// and what each keeps for the backward is what the allocator sees: the fused variant's
// activation peak lacks the [B, heads, S, S] probabilities and holds [B, heads, S] fp32
// log-sum-exps instead, as the memory model says.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ted/backend/memory.hpp"
#include "ted/model/gpt.hpp"
#include "ted/train/data.hpp"
#include "ted/train/train_config.hpp"

namespace {

// 80 positions: two CPU tiles of 64 (the second ragged), heads 8 wide.
ted::model::ModelConfig config(ted::model::AttentionKind attention, bool checkpoint = false) {
  ted::model::ModelConfig c;
  c.vocab = 29;
  c.seq_len = 80;
  c.hidden = 16;
  c.heads = 2;
  c.layers = 2;
  c.gate.experts = 4;
  c.gate.top_k = 2;
  c.gate.capacity_factor = 1.0;
  c.gate.aux_coeff = 0.05;
  c.init_std = 0.2;  // scores far from uniform, so the softmax matters
  c.checkpoint = checkpoint;
  c.attention = attention;
  return c;
}

struct Data {
  std::vector<std::int32_t> tokens, targets;
  Data(int sequences, int seq, int vocab) {
    ted::train::SyntheticSource source(vocab, 5, 0.3);
    tokens.resize(static_cast<std::size_t>(sequences) * seq);
    targets.resize(tokens.size());
    for (int s = 0; s < sequences; ++s)
      source.sample(s, seq, tokens.data() + s * seq, targets.data() + s * seq);
  }
};

template <typename T>
struct Result {
  double lm = 0, aux = 0;
  std::vector<T> grads;
};

template <typename T>
Result<T> run(const ted::model::ModelConfig& c, const Data& data, int sequences) {
  auto device = ted::make_cpu_device();
  ted::model::GptModel<T> model(c, *device);
  ted::model::Batch batch{data.tokens.data(), data.targets.data(), sequences, 0, 0, 0};
  auto losses = model.forward(batch);
  model.backward(T(1));
  const auto& g = model.params().grads();
  return {losses.lm, losses.aux, std::vector<T>(g.data(), g.data() + g.size())};
}

template <typename T>
double max_normalised_difference(const std::vector<T>& a, const std::vector<T>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

}  // namespace

TEMPLATE_TEST_CASE("fused and materialised attention give the same losses and gradients", "", float,
                   double) {
  using T = TestType;
  const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const Data data(3, 80, 29);
  const auto fused = run<T>(config(ted::model::AttentionKind::fused), data, 3);
  const auto materialised = run<T>(config(ted::model::AttentionKind::materialized), data, 3);
  const double loss = std::abs(fused.lm - materialised.lm) / materialised.lm;
  const double grads = max_normalised_difference(fused.grads, materialised.grads);
  std::printf("# fused vs materialised attention (%s): loss %.3g, gradients %.3g relative\n",
              std::is_same_v<T, float> ? "fp32" : "fp64", loss, grads);
  CHECK(loss < tolerance);
  CHECK(std::abs(fused.aux - materialised.aux) <= tolerance * std::abs(materialised.aux));
  CHECK(grads < tolerance);
  // Checkpointing recomputes the fused forward bit for bit.
  const auto checkpointed = run<T>(config(ted::model::AttentionKind::fused, true), data, 3);
  CHECK(checkpointed.lm == fused.lm);
  CHECK(checkpointed.grads == fused.grads);
}

TEST_CASE("fused attention's activation peak lacks the S x S probabilities") {
  const int B = 3, S = 80;
  const Data data(B, S, 29);
  auto peak = [&](ted::model::AttentionKind attention) {
    auto cpu = ted::make_cpu_device();
    ted::TrackingDevice device(*cpu);
    auto c = config(attention);
    c.layers = 1;
    c.expert_interval = 1;
    ted::model::GptModel<float> model(c, device);
    ted::model::Batch batch{data.tokens.data(), data.targets.data(), B, 0, 0, 0};
    model.forward(batch);
    model.backward(1.0f);
    return device.usage(ted::MemoryCategory::activations).peak;
  };
  const std::size_t fused = peak(ted::model::AttentionKind::fused),
                    materialised = peak(ted::model::AttentionKind::materialized);
  const std::size_t heads = 2, probs = B * heads * S * S * sizeof(float),
                    lse = B * heads * S * sizeof(float);
  std::printf("# activation peak of one MoE block: fused %zu bytes, materialised %zu bytes\n",
              fused, materialised);
  CHECK(materialised - fused == probs - lse);
}

TEST_CASE("model.attention takes auto, fused or materialized only, parsed where it is read") {
  ted::train::TrainConfig t;
  auto schema = t.schema();
  for (const char* name : {"fused", "materialized", "auto"}) {
    schema.set(std::string("model.attention=") + name);
    CHECK(std::string(ted::model::to_string(t.model.attention)) == name);
    CHECK_NOTHROW(t.model.validate());
  }
  CHECK_THROWS_WITH(schema.set("model.attention=flash"),
                    Catch::Matchers::ContainsSubstring("model.attention") &&
                        Catch::Matchers::ContainsSubstring("flash"));
}

TEST_CASE("the model says which attention runs: auto is the CPU's FlashAttention-2") {
  auto device = ted::make_cpu_device();
  using ted::model::AttentionKind;
  for (auto asked : {AttentionKind::automatic, AttentionKind::fused, AttentionKind::materialized}) {
    ted::model::GptModel<float> model(config(asked), *device);
    INFO("model.attention " << ted::model::to_string(asked));
    CHECK(model.attention() == (asked == AttentionKind::materialized ? "materialized" : "flash"));
  }
  CHECK(ted::model::ModelConfig{}.attention == AttentionKind::automatic);  // the default
}
