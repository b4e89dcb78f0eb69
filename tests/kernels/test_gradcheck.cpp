// Gradient checks of every operation of the model, and of a whole tiny model, in double
// precision against central finite differences. Each prints its relative error; the bound is
// 1e-6 (central differences with eps 1e-5 are accurate to ~1e-9 here).
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/gradcheck.hpp"
#include "ted/backend/registry.hpp"
#include "ted/core/random.hpp"
#include "ted/kernels/cpu/attention.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/kernels/cpu/flash_attention.hpp"
#include "ted/kernels/cpu/layernorm.hpp"
#include "ted/kernels/cpu/linear.hpp"
#include "ted/kernels/cpu/vocabulary.hpp"
#include "ted/kernels/elementwise.hpp"
#include "ted/model/gpt.hpp"
#include "ted/model/moe.hpp"

namespace cpu = ted::kernels::cpu;
using ted::test::check_gradient;
using Vec = std::vector<double>;

namespace {
constexpr double kTolerance = 1e-6;

Vec random_vector(std::size_t n, std::uint64_t salt, double scale = 1.0) {
  Vec v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * ted::random::normal(77, 9, salt, i);
  return v;
}

// A MoE layer's random input and weights: S tokens of width h, E experts of width f.
struct MoeInputs {
  Vec x, gate, w1, b1, w2, b2;
  MoeInputs(int S, int h, int f, int E, std::uint64_t salt)
      : x(random_vector(S * h, salt)),
        gate(random_vector(h * E, salt + 1)),
        w1(random_vector(E * h * f, salt + 2, 0.5)),
        b1(random_vector(E * f, salt + 3, 0.1)),
        w2(random_vector(E * f * h, salt + 4, 0.5)),
        b2(random_vector(E * h, salt + 5, 0.1)) {}
};

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

TEST_CASE("gradcheck: layernorm") {
  const int n = 3, h = 7;
  Vec x = random_vector(n * h, 1), g = random_vector(h, 2), b = random_vector(h, 3);
  Vec r = random_vector(n * h, 4), y(n * h), mean(n), rstd(n);
  auto loss = [&] {
    cpu::layernorm_forward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), n, h);
    return dot(y, r);
  };
  loss();
  Vec dx(n * h, 0), dg(h, 0), db(h, 0);
  cpu::layernorm_backward(x.data(), g.data(), mean.data(), rstd.data(), r.data(), dx.data(),
                          dg.data(), db.data(), n, h);
  CHECK(check_gradient("layernorm d input", loss, x.data(), x.size(), dx.data()) < kTolerance);
  CHECK(check_gradient("layernorm d gamma", loss, g.data(), g.size(), dg.data()) < kTolerance);
  CHECK(check_gradient("layernorm d beta", loss, b.data(), b.size(), db.data()) < kTolerance);
}

TEST_CASE("gradcheck: gelu") {
  Vec x = random_vector(20, 5, 2.0), r = random_vector(20, 6), y(20), dx(20);
  auto loss = [&] {
    cpu::gelu_forward(x.data(), y.data(), 20);
    return dot(y, r);
  };
  cpu::gelu_backward(x.data(), r.data(), dx.data(), 20);
  CHECK(check_gradient("gelu", loss, x.data(), x.size(), dx.data()) < kTolerance);
}

TEST_CASE("gradcheck: causal multi-head attention") {
  const int B = 2, S = 5, H = 2, h = 6;
  Vec qkv = random_vector(B * S * 3 * h, 7), r = random_vector(B * S * h, 8);
  Vec out(B * S * h), probs(B * H * S * S), d_qkv(qkv.size());
  auto loss = [&] {
    cpu::attention_forward(qkv.data(), out.data(), probs.data(), B, S, H, h);
    return dot(out, r);
  };
  loss();
  cpu::attention_backward(qkv.data(), probs.data(), r.data(), d_qkv.data(), B, S, H, h);
  CHECK(check_gradient("attention d qkv", loss, qkv.data(), qkv.size(), d_qkv.data()) < kTolerance);
  // Causality: the first token's output does not depend on later tokens.
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), B, S, H, h);
  double first = out[0];
  qkv[3 * h * (S - 1)] += 1.0;      // last token's q of batch 0
  qkv[3 * h * (S - 1) + h] += 1.0;  // and its k
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), B, S, H, h);
  CHECK(out[0] == first);
}

// FlashAttention-2 with tiles of 4 over 11 positions: three query tiles against up to three key
// tiles, the last ragged, the diagonal ones masked; heads of 3 columns.
TEST_CASE("gradcheck: fused causal attention (tiles, online softmax, recomputed backward)") {
  const int B = 2, S = 11, H = 2, h = 6, tile = 4;
  Vec qkv = random_vector(B * S * 3 * h, 7, 2.0), r = random_vector(B * S * h, 8);
  Vec out(B * S * h), lse(B * H * S), d_qkv(qkv.size());
  auto loss = [&] {
    cpu::flash_attention_forward(qkv.data(), out.data(), lse.data(), B, S, H, h, {}, tile);
    return dot(out, r);
  };
  loss();
  cpu::flash_attention_backward(qkv.data(), out.data(), lse.data(), r.data(), d_qkv.data(), B, S, H,
                                h, {}, tile);
  CHECK(check_gradient("fused attention d qkv", loss, qkv.data(), qkv.size(), d_qkv.data()) <
        kTolerance);

  // The materialised attention computes the same function: outputs, each row's log-sum-exp
  // (the probabilities' normaliser) and gradients agree to fp64 rounding, for every tile size.
  Vec ref_out(out.size()), probs(B * H * S * S), ref_d_qkv(qkv.size());
  cpu::attention_forward(qkv.data(), ref_out.data(), probs.data(), B, S, H, h);
  cpu::attention_backward(qkv.data(), probs.data(), r.data(), ref_d_qkv.data(), B, S, H, h);
  for (int t : {1, 3, 4, 11, 64}) {
    INFO("tile " << t);
    cpu::flash_attention_forward(qkv.data(), out.data(), lse.data(), B, S, H, h, {}, t);
    cpu::flash_attention_backward(qkv.data(), out.data(), lse.data(), r.data(), d_qkv.data(), B, S,
                                  H, h, {}, t);
    double out_error = 0, grad_error = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
      out_error = std::max(out_error, std::abs(out[i] - ref_out[i]));
    for (std::size_t i = 0; i < qkv.size(); ++i)
      grad_error = std::max(grad_error, std::abs(d_qkv[i] - ref_d_qkv[i]));
    CHECK(out_error < 1e-12);
    CHECK(grad_error < 1e-12);
    // p(i, 0) = exp(score(i, 0) - lse(i)), with score(i, 0) = q_i . k_0 / sqrt(d).
    const int d = h / H;
    for (int b = 0; b < B; ++b)
      for (int head = 0; head < H; ++head)
        for (int i = 0; i < S; ++i) {
          const double* q = qkv.data() + (b * S + i) * 3 * h + head * d;
          const double* k = qkv.data() + b * S * 3 * h + h + head * d;
          double score = 0;
          for (int c = 0; c < d; ++c) score += q[c] * k[c] / std::sqrt(double(d));
          const double p = probs[((b * H + head) * S + i) * S];
          CHECK(std::abs(std::exp(score - lse[(b * H + head) * S + i]) - p) < 1e-12);
        }
  }
  // Causality: the first token's output does not depend on later tokens.
  double first = out[0];
  qkv[3 * h * (S - 1)] += 1.0;
  qkv[3 * h * (S - 1) + h] += 1.0;
  cpu::flash_attention_forward(qkv.data(), out.data(), lse.data(), B, S, H, h, {}, tile);
  CHECK(out[0] == first);
}

// Dropout: with its mask fixed by its key, a linear map that is its own backward; the
// bias-dropout-add's bias gradient is the column sums of the dropped gradient.
TEST_CASE("gradcheck: dropout and bias + dropout + residual") {
  const int n = 6, w = 9;
  const ted::kernels::DropoutKey key{0.4, 3, 2, 5, 70};
  Vec x = random_vector(n * w, 40), b = random_vector(w, 41), res = random_vector(n * w, 42);
  Vec r = random_vector(n * w, 43), y(n * w);
  auto loss = [&] {
    cpu::dropout(x.data(), y.data(), n, w, key);
    return dot(y, r);
  };
  Vec dx(n * w);
  cpu::dropout(r.data(), dx.data(), n, w, key);
  CHECK(check_gradient("dropout d input", loss, x.data(), x.size(), dx.data()) < kTolerance);
  auto fused = [&] {
    y = x;
    cpu::bias_dropout_residual(y.data(), b.data(), res.data(), n, w, key);
    return dot(y, r);
  };
  Vec db(w, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < w; ++j) db[j] += dx[i * w + j];
  CHECK(check_gradient("bias-dropout-add d input", fused, x.data(), x.size(), dx.data()) <
        kTolerance);
  CHECK(check_gradient("bias-dropout-add d bias", fused, b.data(), b.size(), db.data()) <
        kTolerance);
  CHECK(check_gradient("bias-dropout-add d residual", fused, res.data(), res.size(), r.data()) <
        kTolerance);
}

// Dropout on the attention probabilities: both variants against finite differences, and the
// fused one equal to the materialised one with the same mask, for every tile size.
TEST_CASE("gradcheck: causal attention with dropout on the probabilities") {
  const int B = 2, S = 11, H = 2, h = 6;
  const ted::kernels::DropoutKey key{0.3, 8, 1, 0, 40, 1};
  Vec qkv = random_vector(B * S * 3 * h, 44, 2.0), r = random_vector(B * S * h, 45);
  Vec out(B * S * h), probs(B * H * S * S), lse(B * H * S), d_qkv(qkv.size());
  auto materialised = [&] {
    cpu::attention_forward(qkv.data(), out.data(), probs.data(), B, S, H, h, key);
    return dot(out, r);
  };
  materialised();
  const Vec ref_out = out;
  cpu::attention_backward(qkv.data(), probs.data(), r.data(), d_qkv.data(), B, S, H, h, key);
  const Vec ref_d = d_qkv;
  CHECK(check_gradient("attention + dropout d qkv", materialised, qkv.data(), qkv.size(),
                       d_qkv.data()) < kTolerance);
  for (int tile : {1, 4, 64}) {
    INFO("tile " << tile);
    auto fused = [&] {
      cpu::flash_attention_forward(qkv.data(), out.data(), lse.data(), B, S, H, h, key, tile);
      return dot(out, r);
    };
    fused();
    cpu::flash_attention_backward(qkv.data(), out.data(), lse.data(), r.data(), d_qkv.data(), B, S,
                                  H, h, key, tile);
    double out_error = 0, grad_error = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
      out_error = std::max(out_error, std::abs(out[i] - ref_out[i]));
    for (std::size_t i = 0; i < qkv.size(); ++i)
      grad_error = std::max(grad_error, std::abs(d_qkv[i] - ref_d[i]));
    CHECK(out_error < 1e-12);
    CHECK(grad_error < 1e-12);
    if (tile == 4)
      CHECK(check_gradient("fused attention + dropout d qkv", fused, qkv.data(), qkv.size(),
                           d_qkv.data()) < kTolerance);
  }
}

// The tied embedding over two tensor ranks' vocabulary slices (7 words padded to 8): the token
// embedding feeds x, the same table makes the logits, and the vocabulary-parallel cross-entropy
// combines the slices as the all-reduces do. The table's gradient is both uses'.
TEST_CASE("gradcheck: tied embedding, LM head and vocabulary-parallel cross-entropy") {
  const int V = 7, rows = 4, ranks = 2, n = 5, seq = 5, h = 3;
  Vec table = random_vector(ranks * rows * h, 46);
  std::fill(table.begin() + V * h, table.end(), 0.0);  // the padding row
  Vec pos = random_vector(seq * h, 47), x(n * h), logits(ranks * n * rows), log_sum(n);
  std::vector<std::int32_t> tokens = {1, 6, 3, 0, 4}, targets = {6, 2, 4, 5, 0};
  auto loss = [&] {
    std::fill(x.begin(), x.end(), 0.0);
    Vec part(n * h), max(n, -INFINITY), sums(2 * n, 0.0), stats(2 * n);
    for (int t = 0; t < ranks; ++t) {
      const int first = t * rows, words = std::min(rows, V - first);
      cpu::embedding_forward(tokens.data(), table.data() + first * h, t == 0 ? pos.data() : nullptr,
                             part.data(), n, seq, h, first, words);
      for (int i = 0; i < n * h; ++i) x[i] += part[i];
    }
    for (int t = 0; t < ranks; ++t) {
      const int first = t * rows, words = std::min(rows, V - first);
      double* l = logits.data() + t * n * rows;
      cpu::lm_head_forward(x.data(), table.data() + first * h, l, n, h, rows);
      Vec m(n);
      cpu::cross_entropy_max(l, m.data(), n, rows, words);
      for (int i = 0; i < n; ++i) max[i] = std::max(max[i], m[i]);
    }
    for (int t = 0; t < ranks; ++t) {
      const int first = t * rows, words = std::min(rows, V - first);
      cpu::cross_entropy_partials(logits.data() + t * n * rows, targets.data(), max.data(),
                                  stats.data(), n, rows, first, words);
      for (int i = 0; i < 2 * n; ++i) sums[i] += stats[i];
    }
    return cpu::cross_entropy_finish(max.data(), sums.data(), log_sum.data(), n);
  };
  loss();
  Vec d_table(table.size(), 0.0), d_pos(pos.size(), 0.0), dx(n * h, 0.0), d_logits(logits.size());
  for (int t = 0; t < ranks; ++t) {
    const int first = t * rows, words = std::min(rows, V - first);
    cpu::cross_entropy_backward(logits.data() + t * n * rows, targets.data(), log_sum.data(),
                                d_logits.data() + t * n * rows, n, rows, 1.0, first, words);
    cpu::lm_head_backward(x.data(), table.data() + first * h, d_logits.data() + t * n * rows,
                          dx.data(), d_table.data() + first * h, n, h, rows);
  }
  for (int t = 0; t < ranks; ++t) {
    const int first = t * rows, words = std::min(rows, V - first);
    cpu::embedding_backward(tokens.data(), dx.data(), d_table.data() + first * h,
                            t == 0 ? d_pos.data() : nullptr, n, seq, h, first, words);
  }
  for (int j = V * h; j < ranks * rows * h; ++j) CHECK(d_table[j] == 0.0);  // padding
  std::vector<std::size_t> words_only;  // the padding row is no parameter of the loss
  for (std::size_t i = 0; i < static_cast<std::size_t>(V * h); ++i) words_only.push_back(i);
  CHECK(check_gradient("tied table (both uses)", loss, table.data(), table.size(), d_table.data(),
                       words_only) < kTolerance);
  CHECK(check_gradient("position embedding", loss, pos.data(), pos.size(), d_pos.data()) <
        kTolerance);
  // The whole vocabulary's loss, by the one-pass op, is the same function.
  Vec whole(n * V), whole_sum(n);
  const double sliced = loss();
  cpu::lm_head_forward(x.data(), table.data(), whole.data(), n, h, V);
  CHECK(std::abs(cpu::cross_entropy_loss(whole.data(), targets.data(), whole_sum.data(), n, V) -
                 sliced) < 1e-12);
}

TEST_CASE("gradcheck: dense FFN (linear, GeLU, linear)") {
  const int n = 4, h = 5, f = 9;
  Vec x = random_vector(n * h, 10), w1 = random_vector(h * f, 11), b1 = random_vector(f, 12);
  Vec w2 = random_vector(f * h, 13), b2 = random_vector(h, 14), r = random_vector(n * h, 15);
  Vec pre(n * f), act(n * f), y(n * h);
  auto loss = [&] {
    cpu::linear_forward(x.data(), w1.data(), b1.data(), pre.data(), n, h, f);
    cpu::gelu_forward(pre.data(), act.data(), n * f);
    cpu::linear_forward(act.data(), w2.data(), b2.data(), y.data(), n, f, h);
    return dot(y, r);
  };
  loss();
  Vec dact(n * f, 0), dx(n * h, 0), dw1(h * f, 0), db1(f, 0), dw2(f * h, 0), db2(h, 0);
  cpu::linear_backward(act.data(), w2.data(), r.data(), dact.data(), dw2.data(), db2.data(), n, f,
                       h);
  cpu::gelu_backward(pre.data(), dact.data(), dact.data(), n * f);
  cpu::linear_backward(x.data(), w1.data(), dact.data(), dx.data(), dw1.data(), db1.data(), n, h,
                       f);
  CHECK(check_gradient("ffn d input", loss, x.data(), x.size(), dx.data()) < kTolerance);
  CHECK(check_gradient("ffn d w1", loss, w1.data(), w1.size(), dw1.data()) < kTolerance);
  CHECK(check_gradient("ffn d b1", loss, b1.data(), b1.size(), db1.data()) < kTolerance);
  CHECK(check_gradient("ffn d w2", loss, w2.data(), w2.size(), dw2.data()) < kTolerance);
  CHECK(check_gradient("ffn d b2", loss, b2.data(), b2.size(), db2.data()) < kTolerance);
}

TEST_CASE("gradcheck: cross-entropy") {
  const int n = 4, V = 7;
  Vec logits = random_vector(n * V, 16, 2.0), d(n * V), log_sum(n);
  std::vector<std::int32_t> targets = {0, 6, 3, 3};
  auto loss = [&] {
    return cpu::cross_entropy_loss(logits.data(), targets.data(), log_sum.data(), n, V);
  };
  loss();
  cpu::cross_entropy_backward(logits.data(), targets.data(), log_sum.data(), d.data(), n, V, 1.0);
  CHECK(check_gradient("cross-entropy d logits", loss, logits.data(), logits.size(), d.data()) <
        kTolerance);
}

TEST_CASE("gradcheck: aux loss through the gate softmax") {
  const int S = 6, E = 4;
  Vec logits = random_vector(S * E, 17);
  ted::routing::GateConfig config;
  config.experts = E;
  auto device = ted::make_cpu_device();
  auto ops = ted::make_ops<double>(*device);
  ted::routing::Routing<double> routing;
  auto loss = [&] {
    ops->route(logits.data(), S, config, {}, routing);
    return ops->routing_stats(routing).aux;
  };
  loss();
  Vec zero_weight(S, 0.0), d(S * E);
  ops->route_backward(routing, zero_weight.data(), 1.0, d.data());
  CHECK(check_gradient("aux loss d logits", loss, logits.data(), logits.size(), d.data()) <
        kTolerance);
}

TEST_CASE("gradcheck: gate + dispatch + experts + combine") {
  const int S = 12, h = 6, f = 10, E = 4;
  struct Case {
    const char* name;
    int top_k;
    double capacity_factor;
    bool rts;
    bool noise;
    bool expect_drops;
  };
  const Case cases[] = {
      {"moe top-1 no drops", 1, 4.0, false, false, false},
      {"moe top-1 with drops", 1, 0.5, false, false, true},
      {"moe top-1 with drops, RTS", 1, 0.5, true, false, true},
      {"moe top-2 no drops", 2, 4.0, false, false, false},
      {"moe top-2 with drops, noisy second", 2, 0.5, false, true, true},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    ted::routing::GateConfig config;
    config.experts = E;
    config.top_k = c.top_k;
    config.capacity_factor = c.capacity_factor;
    config.min_capacity = 1;
    config.random_token_selection = c.rts;
    config.second_choice_noise = c.noise;
    config.aux_coeff = 0.3;
    auto device = ted::make_cpu_device();
    auto ops = ted::make_ops<double>(*device);
    MoeInputs in(S, h, f, E, 20);
    Vec &x = in.x, &gate = in.gate, &w1 = in.w1, &b1 = in.b1, &w2 = in.w2, &b2 = in.b2;
    Vec r = random_vector(S * h, 26), y(S * h);
    ted::routing::RoutingKey key{5, 2, 1, 100};
    ted::model::MoeParams<double> params{gate.data(), w1.data(), b1.data(), w2.data(), b2.data()};
    ted::model::MoeActivations<double> acts;
    const ted::model::MoeShape shape{S, h, f, E};
    int dropped = 0;
    auto loss = [&] {
      auto stats =
          ted::model::moe_forward(*ops, x.data(), y.data(), shape, config, key, params, {}, acts);
      dropped = stats.dropped;
      return dot(y, r) + config.aux_coeff * stats.aux;
    };
    loss();
    CHECK((dropped > 0) == c.expect_drops);
    Vec dx(S * h, 0), dgate(h * E, 0), dw1(w1.size(), 0), db1(b1.size(), 0), dw2(w2.size(), 0),
        db2(b2.size(), 0);
    ted::model::moe_backward(
        *ops, x.data(), r.data(), dx.data(), shape, params, {}, acts, config.aux_coeff,
        ted::model::MoeGrads<double>{dgate.data(), dw1.data(), db1.data(), dw2.data(), db2.data()});
    std::string n = c.name;
    CHECK(check_gradient(n + ": d input", loss, x.data(), x.size(), dx.data()) < kTolerance);
    CHECK(check_gradient(n + ": d gate", loss, gate.data(), gate.size(), dgate.data()) <
          kTolerance);
    CHECK(check_gradient(n + ": d w1", loss, w1.data(), w1.size(), dw1.data()) < kTolerance);
    CHECK(check_gradient(n + ": d b1", loss, b1.data(), b1.size(), db1.data()) < kTolerance);
    CHECK(check_gradient(n + ": d w2", loss, w2.data(), w2.size(), dw2.data()) < kTolerance);
    CHECK(check_gradient(n + ": d b2", loss, b2.data(), b2.size(), db2.data()) < kTolerance);
  }
}

// What the capacity buffers, the exchange's layout and the empty slots left out of the experts'
// GEMMs must add up to: each kept choice's expert FFN on its token, times its weight. Then the
// same layer with every slot computed (TED_FULL_CAPACITY=1, as DeepSpeed-MoE and the CUDA
// backend run it) gives the same output and gradients.
TEST_CASE("MoE layer: each kept choice's expert FFN, weighted; empty slots left out or not alike") {
  const int S = 40, h = 6, f = 10, E = 4;
  const int top_k = GENERATE(1, 2);
  INFO("top-" << top_k);
  ted::routing::GateConfig config;
  config.experts = E;
  config.top_k = top_k;
  // Slots for every choice: the uneven loads drop some choices and leave some slots empty.
  config.capacity_factor = 1.0;
  config.min_capacity = 1;
  auto device = ted::make_cpu_device();
  auto ops = ted::make_ops<double>(*device);
  const MoeInputs in(S, h, f, E, 30);
  const Vec &x = in.x, &gate = in.gate, &w1 = in.w1, &b1 = in.b1, &w2 = in.w2, &b2 = in.b2;
  Vec dy = random_vector(S * h, 36);
  const ted::model::MoeParams<double> params{gate.data(), w1.data(), b1.data(), w2.data(),
                                             b2.data()};
  const ted::model::MoeShape shape{S, h, f, E};
  const ted::routing::RoutingKey key{5, 2, 1, 100};
  struct Result {
    Vec y, dx, grads;
    int slots = 0, kept = 0;
  };
  auto run = [&](bool full) {
    if (full)
      setenv("TED_FULL_CAPACITY", "1", 1);
    else
      unsetenv("TED_FULL_CAPACITY");
    Result out;
    out.y.assign(S * h, 0);
    out.dx.assign(S * h, 0);
    Vec dgate(h * E, 0), dw1(w1.size(), 0), db1(b1.size(), 0), dw2(w2.size(), 0), db2(b2.size(), 0);
    ted::model::MoeActivations<double> acts;
    ted::model::moe_forward(*ops, x.data(), out.y.data(), shape, config, key, params, {}, acts);
    ted::model::moe_backward(
        *ops, x.data(), dy.data(), out.dx.data(), shape, params, {}, acts, 0.1,
        ted::model::MoeGrads<double>{dgate.data(), dw1.data(), db1.data(), dw2.data(), db2.data()});
    for (const Vec* g : {&dgate, &dw1, &db1, &dw2, &db2})
      out.grads.insert(out.grads.end(), g->begin(), g->end());
    out.slots = E * acts.routing.capacity;
    for (int k : acts.routing.kept) out.kept += k;
    // The naive layer on the routing's choices.
    const auto& r = acts.routing;
    Vec want(S * h, 0), z(f);
    for (int c = 0; c < S * top_k; ++c) {
      if (r.slot[c] < 0) continue;
      const int s = c / top_k, e = r.expert[c];
      for (int j = 0; j < f; ++j) {
        double sum = b1[e * f + j];
        for (int i = 0; i < h; ++i) sum += x[s * h + i] * w1[(e * h + i) * f + j];
        z[j] = ted::kernels::gelu(sum);
      }
      for (int i = 0; i < h; ++i) {
        double sum = b2[e * h + i];
        for (int j = 0; j < f; ++j) sum += z[j] * w2[(e * f + j) * h + i];
        want[s * h + i] += r.weight[c] * sum;
      }
    }
    double worst = 0;
    for (int i = 0; i < S * h; ++i) worst = std::max(worst, std::abs(out.y[i] - want[i]));
    CHECK(worst < 1e-12);
    return out;
  };
  const char* before = std::getenv("TED_FULL_CAPACITY");  // the caller's, put back after
  const std::string saved = before ? before : "";
  const Result skipped = run(false), full = run(true);
  if (before)
    setenv("TED_FULL_CAPACITY", saved.c_str(), 1);
  else
    unsetenv("TED_FULL_CAPACITY");
  CHECK(skipped.kept > 0);
  CHECK(skipped.kept < skipped.slots);  // some slots are empty: there is something to leave out
  CHECK(full.kept == 0);                // every slot computed: the routing reports none
  auto close = [](const Vec& a, const Vec& b) {
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
      scale = std::max(scale, std::abs(b[i]));
    }
    return worst <= 1e-13 * std::max(scale, 1.0);
  };
  CHECK(close(skipped.y, full.y));
  CHECK(close(skipped.dx, full.dx));
  CHECK(close(skipped.grads, full.grads));
}

// Both attentions, and both models: untied without dropout, and Megatron's (the embedding tied
// to the LM head, whose gradient is then both uses', dropout 0.2 on the attention probabilities
// and on the sub-layers' outputs: the masks are fixed by their keys, so the loss is a smooth
// function of the weights).
TEST_CASE("gradcheck: whole tiny MoE GPT (top-2, drops, RTS, aux loss)") {
  const auto attention =
      GENERATE(ted::model::AttentionKind::fused, ted::model::AttentionKind::materialized);
  const bool megatron = GENERATE(false, true);
  INFO(ted::model::to_string(attention)
       << " attention" << (megatron ? ", tied embeddings and dropout" : ""));
  ted::model::ModelConfig config;
  config.attention = attention;
  config.tie_embeddings = megatron;
  config.dropout = megatron ? 0.2 : 0.0;
  config.vocab = 11;
  config.seq_len = 5;
  config.hidden = 8;
  config.heads = 2;
  config.layers = 2;
  config.gate.experts = 4;
  config.gate.top_k = 2;
  config.gate.capacity_factor = 0.5;
  config.gate.min_capacity = 1;
  config.gate.random_token_selection = true;
  config.gate.aux_coeff = 0.1;
  config.init_std = 0.3;  // large enough that every path matters
  auto device = ted::make_cpu_device();
  ted::model::GptModel<double> model(config, *device);
  std::vector<std::int32_t> tokens = {1, 4, 2, 9, 0, 3, 3, 7, 10, 5};
  std::vector<std::int32_t> targets = {4, 2, 9, 0, 6, 3, 7, 10, 5, 1};
  ted::model::Batch batch{tokens.data(), targets.data(), 2, 0, 3, 0};
  auto loss = [&] {
    auto l = model.forward(batch);
    return l.lm + config.gate.aux_coeff * l.aux;
  };
  auto l = model.forward(batch);
  CHECK(l.dropped > 0);
  model.params().zero_grads();
  model.backward(1.0);
  auto& p = model.params();
  for (std::size_t id = 0; id < p.specs().size(); ++id) {
    const auto& spec = p.specs()[id];
    std::vector<std::size_t> some;  // up to 12 elements of every tensor
    for (std::size_t i = 0; i < spec.size(); i += std::max<std::size_t>(1, spec.size() / 12))
      some.push_back(i);
    CHECK(check_gradient(std::string(ted::model::to_string(attention)) +
                             (megatron ? " megatron " : " model ") + spec.name,
                         loss, p.value(static_cast<int>(id)), spec.size(),
                         p.gradient(static_cast<int>(id)).master, some) < kTolerance);
  }
}
