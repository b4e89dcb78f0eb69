// The reference model's invariants: activation checkpointing changes nothing (bit for bit), and
// gradient accumulation over micro-batches equals one larger batch whose capacity is computed
// per micro-batch.
//
// The rule: capacity is computed per gating group, and a gating group is one micro-batch
// (micro_batch x seq_len tokens). A batch of m micro-batches run at once with
// gate_group_sequences = micro_batch gates each micro-batch separately, so its loss (mean over
// all tokens, aux averaged over the groups) and its gradients equal accumulating the m
// micro-batches with scale 1/m.
#include "catch.hpp"

#include <cstring>
#include <vector>

#include "ted/model/gpt.hpp"
#include "ted/train/data.hpp"

namespace {

ted::model::ModelConfig tiny(bool checkpoint) {
  ted::model::ModelConfig c;
  c.vocab = 23;
  c.seq_len = 8;
  c.hidden = 16;
  c.heads = 2;
  c.layers = 4;
  c.gate.experts = 4;
  c.gate.top_k = 2;
  c.gate.capacity_factor = 0.75;  // drops happen
  c.gate.min_capacity = 1;
  c.gate.random_token_selection = true;
  c.gate.aux_coeff = 0.05;
  c.checkpoint = checkpoint;
  return c;
}

template <typename T>
struct Data {
  std::vector<std::int32_t> tokens, targets;
  Data(int sequences, int seq, int vocab, std::int64_t first) {
    ted::train::SyntheticSource source(vocab, 99, 0.3);
    tokens.resize(static_cast<std::size_t>(sequences) * seq);
    targets.resize(tokens.size());
    for (int s = 0; s < sequences; ++s)
      source.sample(first + s, seq, tokens.data() + s * seq, targets.data() + s * seq);
  }
};

template <typename T>
double max_relative_difference(const T* a, const T* b, std::size_t n) {
  double max_diff = 0, max_value = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
    max_value = std::max(max_value, std::abs(static_cast<double>(a[i])));
  }
  return max_diff / max_value;
}

}  // namespace

TEST_CASE("activation checkpointing gives bit-identical losses and gradients") {
  auto device = ted::make_cpu_device();
  ted::model::GptModel<float> plain(tiny(false), *device), checkpointed(tiny(true), *device);
  Data<float> data(4, 8, 23, 0);
  for (int step = 0; step < 2; ++step) {
    ted::model::Batch batch{data.tokens.data(), data.targets.data(), 4, 0, step, 2};
    auto a = plain.forward(batch);
    auto b = checkpointed.forward(batch);
    CHECK(a.lm == b.lm);
    CHECK(a.aux == b.aux);
    CHECK(a.dropped == b.dropped);
    CHECK(a.dropped > 0);
    plain.backward(0.5f);
    checkpointed.backward(0.5f);
  }
  const auto& ga = plain.params().grads();
  const auto& gb = checkpointed.params().grads();
  REQUIRE(ga.size() == gb.size());
  CHECK(std::memcmp(ga.data(), gb.data(), ga.size() * sizeof(float)) == 0);
}

TEMPLATE_TEST_CASE("4 accumulated micro-batches equal one 4x batch gated per micro-batch", "",
                   float, double) {
  const double tolerance = std::is_same_v<TestType, float> ? 2e-5 : 1e-11;
  auto device = ted::make_cpu_device();
  ted::model::GptModel<TestType> accumulated(tiny(false), *device), whole(tiny(false), *device);
  const int micro = 3, count = 4, seq = 8;
  Data<TestType> data(micro * count, seq, 23, 40);

  double accumulated_lm = 0, accumulated_aux = 0;
  for (int m = 0; m < count; ++m) {
    std::size_t offset = static_cast<std::size_t>(m) * micro * seq;
    ted::model::Batch batch{
        data.tokens.data() + offset, data.targets.data() + offset, micro, 40 + m * micro, 5, micro};
    auto l = accumulated.forward(batch);
    accumulated_lm += l.lm / count;
    accumulated_aux += l.aux / count;
    accumulated.backward(TestType(1) / count);
  }
  ted::model::Batch batch{data.tokens.data(), data.targets.data(), micro * count, 40, 5, micro};
  auto l = whole.forward(batch);
  whole.backward(TestType(1));

  CHECK(l.lm == Approx(accumulated_lm).epsilon(tolerance));
  CHECK(l.aux == Approx(accumulated_aux).epsilon(tolerance));
  double difference = max_relative_difference(
      whole.params().grads().data(), accumulated.params().grads().data(), whole.params().total());
  INFO("max gradient difference relative to the largest gradient: " << difference);
  CHECK(difference < tolerance);

  // Gated as one group instead, capacity is computed over 4x the tokens: a different result.
  ted::model::GptModel<TestType> one_group(tiny(false), *device);
  ted::model::Batch single{data.tokens.data(), data.targets.data(), micro * count, 40, 5, 0};
  CHECK(one_group.forward(single).lm != Approx(accumulated_lm).epsilon(tolerance));
}
