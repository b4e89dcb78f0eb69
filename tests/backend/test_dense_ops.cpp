// Every dense op of the kernel table on the device under test against the CPU fp32 kernels
// (kernels/cpu) on random data, in fp32, fp16 and bf16 storage. Inputs are rounded to the
// storage type before the reference sees them, so the score measures the backend's arithmetic
// and its output rounding only.
#include "catch.hpp"

#include "backend/backend.hpp"
#include "ted/core/random.hpp"
#include "ted/kernels/adamw.hpp"
#include "ted/kernels/cpu/attention.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/kernels/cpu/layernorm.hpp"
#include "ted/kernels/cpu/linear.hpp"
#include "ted/kernels/cpu/vocabulary.hpp"
#include "ted/model/params.hpp"

using namespace ted;
using namespace ted::test;
namespace cpu = ted::kernels::cpu;

#define STORAGE_TYPES float, ted::Half, ted::BFloat16

TEMPLATE_TEST_CASE("linear forward and backward, and the gate's fp32 logits", "[ops][linear]",
                   STORAGE_TYPES) {
  using T = TestType;
  const int n = 50, in = 24, out = 40;
  auto x = rounded<T>(random_vector(n * in, 4)), w = rounded<T>(random_vector(in * out, 5));
  auto b = rounded<T>(random_vector(out, 6)), dy = rounded<T>(random_vector(n * out, 7));
  std::vector<float> y(n * out), logits(n * out), dx = rounded<T>(random_vector(n * in, 8));
  std::vector<float> dx0 = dx, dw(in * out, 0.5f), db(out, 0.25f);
  std::vector<float> dw0 = dw, db0 = db;
  cpu::linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, out);
  cpu::linear_forward(x.data(), w.data(), static_cast<const float*>(nullptr), logits.data(), n, in,
                      out);
  cpu::linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), n, in, out);
  auto gx = upload<T>(x), gw = upload<T>(w), gb = upload<T>(b), gdy = upload<T>(dy),
       gdx = upload<T>(dx0);
  auto gdw = upload<float>(dw0), gdb = upload<float>(db0);
  Tensor<T> gy(device(), y.size());
  Tensor<float> glogits(device(), logits.size());
  ops<T>().linear_forward(gx.data(), gw.data(), gb.data(), gy.data(), n, in, out);
  ops<T>().gate_logits(gx.data(), gw.data(), glogits.data(), n, in, out);
  ops<T>().linear_backward(gx.data(), gw.data(), gdy.data(), gdx.data(), gdw.data(), gdb.data(), n,
                           in, out);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(float, download(glogits), logits);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdx), dx);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw), dw);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb), db);
}

TEMPLATE_TEST_CASE("layernorm forward and backward", "[ops][layernorm]", STORAGE_TYPES) {
  using T = TestType;
  const int n = 33, h = 300;  // h not a multiple of a GPU block: the strided loops' tails
  auto x = rounded<T>(random_vector(n * h, 9, 2.0f)), dy = rounded<T>(random_vector(n * h, 10));
  auto gamma = rounded<T>(random_vector(h, 11)), beta = rounded<T>(random_vector(h, 12));
  std::vector<float> y(n * h), mean(n), rstd(n), dx = rounded<T>(random_vector(n * h, 13));
  std::vector<float> dx0 = dx, dgamma(h, 0.1f), dbeta(h, -0.1f);
  std::vector<float> dgamma0 = dgamma, dbeta0 = dbeta;
  cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), n,
                         h);
  cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                          dgamma.data(), dbeta.data(), n, h);
  auto gx = upload<T>(x), gdy = upload<T>(dy), gdx = upload<T>(dx0), gg = upload<T>(gamma),
       gbeta = upload<T>(beta);
  auto gdg = upload<float>(dgamma0), gdb = upload<float>(dbeta0);
  Tensor<T> gy(device(), y.size());
  Tensor<float> gmean(device(), n), grstd(device(), n);
  ops<T>().layernorm_forward(gx.data(), gg.data(), gbeta.data(), gy.data(), gmean.data(),
                             grstd.data(), n, h);
  ops<T>().layernorm_backward(gx.data(), gg.data(), gmean.data(), grstd.data(), gdy.data(),
                              gdx.data(), gdg.data(), gdb.data(), n, h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(float, download(gmean), mean);
  CHECK_CLOSE_TO_REFERENCE(float, download(grstd), rstd);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdx), dx);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdg), dgamma);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb), dbeta);
}

TEMPLATE_TEST_CASE("causal attention forward and backward", "[ops][attention]", STORAGE_TYPES) {
  using T = TestType;
  const int batch = 2, seq = 19, heads = 3, h = 24;
  const int n = batch * seq;
  auto qkv = rounded<T>(random_vector(n * 3 * h, 16)), dout = rounded<T>(random_vector(n * h, 17));
  std::vector<float> out(n * h), probs(batch * heads * seq * seq), dqkv(n * 3 * h);
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), batch, seq, heads, h);
  auto gqkv = upload<T>(qkv), gdout = upload<T>(dout);
  Tensor<T> gout(device(), out.size()), gprobs(device(), probs.size()),
      gdqkv(device(), dqkv.size());
  ops<T>().attention_forward(gqkv.data(), gout.data(), gprobs.data(), batch, seq, heads, h, {});
  CHECK_CLOSE_TO_REFERENCE(T, download(gprobs), probs);
  CHECK_CLOSE_TO_REFERENCE(T, download(gout), out);
  // The backend's backward reads its own (rounded) probabilities: give the reference the same.
  auto probs_seen = download(gprobs);
  cpu::attention_backward(qkv.data(), probs_seen.data(), dout.data(), dqkv.data(), batch, seq,
                          heads, h);
  ops<T>().attention_backward(gqkv.data(), gprobs.data(), gdout.data(), gdqkv.data(), batch, seq,
                              heads, h, {});
  CHECK_CLOSE_TO_REFERENCE(T, download(gdqkv), dqkv);
}

TEMPLATE_TEST_CASE("cross-entropy: the loss, and its scaled gradient in place", "[ops][loss]",
                   STORAGE_TYPES) {
  using T = TestType;
  const int n = 40, vocab = 333;
  auto logits = rounded<T>(random_vector(n * vocab, 18, 2.0f));
  std::vector<std::int32_t> targets(n);
  for (int i = 0; i < n; ++i) targets[i] = (i * 37) % vocab;
  std::vector<float> d(n * vocab), log_sum(n);
  const float loss =
      cpu::cross_entropy_loss(logits.data(), targets.data(), log_sum.data(), n, vocab);
  cpu::cross_entropy_backward(logits.data(), targets.data(), log_sum.data(), d.data(), n, vocab,
                              1024.0f);
  auto glogits = upload<T>(logits);
  auto gtargets = upload_i32(targets);
  Tensor<float> glog_sum(device(), n);
  const double gloss =
      ops<T>().cross_entropy_loss(glogits.data(), gtargets.data(), glog_sum.data(), n, vocab);
  CHECK_CLOSE_TO_REFERENCE(float, std::vector<float>{static_cast<float>(gloss)},
                           std::vector<float>{loss});
  CHECK_CLOSE_TO_REFERENCE(float, download(glog_sum), log_sum);
  // The scale inside, in place: what fp16 loss scaling needs (the unscaled gradient of 40
  // tokens x 333 classes would lose most of its bits in fp16).
  ops<T>().cross_entropy_backward(glogits.data(), gtargets.data(), glog_sum.data(), glogits.data(),
                                  n, vocab, 1024.0f, 0, vocab);
  CHECK_CLOSE_TO_REFERENCE(T, download(glogits), d);
}

TEMPLATE_TEST_CASE("embedding forward and backward", "[ops][embedding]", STORAGE_TYPES) {
  using T = TestType;
  const int vocab = 11, seq = 7, n = 21, h = 13;
  auto tok = rounded<T>(random_vector(vocab * h, 19)), pos = rounded<T>(random_vector(seq * h, 20));
  auto dx = rounded<T>(random_vector(n * h, 21));
  std::vector<std::int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 5 + 3) % vocab;
  std::vector<float> x(n * h), dtok(vocab * h, 0.0f), dpos(seq * h, 0.0f);
  cpu::embedding_forward(tokens.data(), tok.data(), pos.data(), x.data(), n, seq, h);
  cpu::embedding_backward(tokens.data(), dx.data(), dtok.data(), dpos.data(), n, seq, h);
  auto gtokens = upload_i32(tokens);
  auto gtok = upload<T>(tok), gpos = upload<T>(pos), gdx = upload<T>(dx);
  auto gdtok = zeros<float>(device(), dtok.size()), gdpos = zeros<float>(device(), dpos.size());
  Tensor<T> gx(device(), x.size());
  ops<T>().embedding_forward(gtokens.data(), gtok.data(), gpos.data(), gx.data(), n, seq, h, 0,
                             vocab);
  ops<T>().embedding_backward(gtokens.data(), gdx.data(), gdtok.data(), gdpos.data(), n, seq, h, 0,
                              vocab);
  CHECK_CLOSE_TO_REFERENCE(T, download(gx), x);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdtok), dtok);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdpos), dpos);
}

TEMPLATE_TEST_CASE("residual add, biases per row block, conversions, the optimizer's widened tile",
                   "[ops][elementwise]", STORAGE_TYPES) {
  using T = TestType;
  const int sources = 2, experts = 3, rows = 5, width = 7;
  const int all = sources * experts * rows;
  auto y = rounded<T>(random_vector(all * width, 50)),
       a = rounded<T>(random_vector(all * width, 51));
  auto bias = rounded<T>(random_vector(experts * width, 52));
  std::vector<float> want = y;
  for (int r = 0; r < all; ++r)
    for (int j = 0; j < width; ++j)
      want[r * width + j] += a[r * width + j] + bias[((r / rows) % experts) * width + j];
  auto gy = upload<T>(y), ga = upload<T>(a), gb = upload<T>(bias);
  ops<T>().add(ga.data(), gy.data(), y.size());
  ops<T>().add_bias(gy.data(), gb.data(), all, width, rows, experts);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), want);
  // Master weights to their copies and back: the copy is the master rounded once.
  auto master = random_vector(1000, 53);
  auto gmaster = upload<float>(master);
  Tensor<T> copy(device(), master.size());
  Tensor<float> back(device(), master.size());
  ops<T>().convert(gmaster.data(), DataType::f32, copy.data(), dtype_of<T>::value, master.size());
  ops<T>().convert(copy.data(), dtype_of<T>::value, back.data(), DataType::f32, master.size());
  CHECK(download(copy) == rounded<T>(master));
  CHECK(download(back) == rounded<T>(master));
  // 16-bit gradients widened (scaled) into the optimizer's fp32 tile (how the kernels add into
  // them: "parameter gradients into 16-bit storage" below).
  auto stored = rounded<T>(random_vector(1000, 54));
  auto gstored = upload<T>(stored);
  std::vector<float> scaled(stored.size());
  for (std::size_t i = 0; i < scaled.size(); ++i) scaled[i] = stored[i] * 0.25f;
  Tensor<float> tile(device(), stored.size());
  ops<T>().scale_copy(gstored.data(), dtype_of<T>::value, tile.data(), stored.size(), 0.25f);
  CHECK(download(tile) == scaled);
}

TEMPLATE_TEST_CASE("a shard's initial values equal the same elements of the whole tensor",
                   "[ops][init]", STORAGE_TYPES) {
  using T = TestType;
  // qkv's column-parallel shard of rank 1 of 2: three segments of the columns.
  model::ParamSpec spec;
  spec.name = "block0.attn.qkv.w";
  spec.shape = {8, 24};
  spec.slice = {{}, {{4, 4}, {12, 4}, {20, 4}}};
  const std::uint64_t seed = 7, key = model::name_key(spec.name);
  Tensor<T> shard(device(), spec.size());
  ops<T>().init_normal(shard.data(), spec.size(), seed, key, 0.02, spec.slice_map());
  std::vector<float> want(spec.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    want[i] = round_to<T>(
        static_cast<float>(0.02 * random::normal(seed, random::kInit, key, spec.global_index(i))));
  CHECK(download(shard) == want);
  CHECK(spec.global_index(4) == 12);  // local row 0, column 4: the k block's first of rank 1
}

TEST_CASE("AdamW, the clipped gradient tile, sums of squares and the overflow check",
          "[ops][optimizer]") {
  auto& o = ops<float>();
  const std::size_t n = 3000;
  auto master = random_vector(n, 22), grad = random_vector(n, 23), m = random_vector(n, 24, 0.1f);
  auto v = random_vector(n, 25, 0.1f);
  for (float& x : v) x = x * x;
  const kernels::AdamHyper<float> hyper{
      1e-3f, 0.9f, 0.95f, 1e-8f, 0.01f, 1 - 0.9f * 0.9f, 1 - 0.95f * 0.95f};
  auto gmaster = upload<float>(master), ggrad = upload<float>(grad), gm = upload<float>(m),
       gv = upload<float>(v);
  Tensor<float> work(device(), n);
  o.scale_copy(ggrad.data(), DataType::f32, work.data(), n, 0.5f);
  o.adamw(gmaster.data(), gm.data(), gv.data(), work.data(), n, hyper);
  for (std::size_t i = 0; i < n; ++i)
    kernels::adamw_update(master[i], m[i], v[i], grad[i] * 0.5f, hyper);
  CHECK_CLOSE_TO_REFERENCE(float, download(gmaster), master);
  CHECK_CLOSE_TO_REFERENCE(float, download(gm), m);
  CHECK_CLOSE_TO_REFERENCE(float, download(gv), v);

  auto g = random_vector(10000, 26);
  double want = 7.0;  // the initial value the sum continues from
  for (std::size_t i = 100; i < 2000; ++i) want += static_cast<double>(g[i]) * g[i];
  for (std::size_t i = 5000; i < 9000; ++i) want += static_cast<double>(g[i]) * g[i];
  auto dg = upload<float>(g);
  const IndexRange ranges[] = {{100, 2000}, {5000, 9000}};
  CHECK(o.sum_squares(dg.data(), DataType::f32, ranges, 7.0) == Approx(want).epsilon(1e-6));
  CHECK_FALSE(o.has_non_finite(dg.data(), DataType::f32, g.size()));
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    g[7777] = bad;
    auto with_bad = upload<float>(g);
    CHECK(o.has_non_finite(with_bad.data(), DataType::f32, g.size()));
    CHECK_FALSE(o.has_non_finite(with_bad.data(), DataType::f32, 7777));  // only the first 7777
  }
  // 16-bit buffers too: fp16 overflows to inf at 65520.
  auto big = upload<Half>(std::vector<float>{1.0f, 70000.0f});
  CHECK(o.has_non_finite(big.data(), DataType::f16, 2));
  CHECK_FALSE(o.has_non_finite(big.data(), DataType::f16, 1));
}

// Dropout's mask is a function of (seed, step, site, global token, feature) alone: the same on
// every backend, for any split of the rows (a rank's micro-batch, the recompute), dropping about
// p of the elements and scaling the rest by 1 / (1 - p); bias + dropout + residual in one pass.
TEMPLATE_TEST_CASE("dropout: the counter-based mask, and bias + dropout + residual",
                   "[ops][dropout]", STORAGE_TYPES) {
  using T = TestType;
  const int rows = 37, width = 150;
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  kernels::DropoutKey key{0.3, 1234, 5, 2 * kernels::kDropoutSites + kernels::kFfnOutputDropout,
                          1000};
  auto x = rounded<T>(random_vector(count, 60)), residual = rounded<T>(random_vector(count, 61));
  auto bias = rounded<T>(random_vector(width, 62));
  std::vector<float> y(count), z = x;
  cpu::dropout(x.data(), y.data(), rows, width, key);
  cpu::bias_dropout_residual(z.data(), bias.data(), residual.data(), rows, width, key);
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < count; ++i) {
    dropped += y[i] == 0.0f && x[i] != 0.0f;
    if (y[i] != 0.0f) CHECK(y[i] == Approx(x[i] / 0.7f).epsilon(1e-6));
  }
  INFO(dropped << " of " << count << " dropped");
  CHECK(std::abs(double(dropped) / count - 0.3) < 0.02);
  auto gx = upload<T>(x), gz = upload<T>(x), gres = upload<T>(residual), gb = upload<T>(bias);
  Tensor<T> gy(device(), count);
  ops<T>().dropout(gx.data(), gy.data(), rows, width, key);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  ops<T>().bias_dropout_residual(gz.data(), gb.data(), gres.data(), rows, width, key);
  CHECK_CLOSE_TO_REFERENCE(T, download(gz), z);
  // In place, on the rows 10.. alone (their tokens' global indices): the same mask.
  auto tail = upload<T>(x);
  kernels::DropoutKey later = key;
  later.first_token += 10;
  const std::size_t skip = 10 * static_cast<std::size_t>(width);
  ops<T>().dropout(tail.data() + skip, tail.data() + skip, rows - 10, width, later);
  const auto got = download(tail);
  const auto whole = download(gy);
  CHECK(std::equal(got.begin() + skip, got.end(), whole.begin() + skip));
  // Another step, site or token draws another mask; p = 0 keeps everything.
  for (auto other : {kernels::DropoutKey{0.3, 1234, 6, key.site, 1000},
                     kernels::DropoutKey{0.3, 1234, 5, key.site + 1, 1000},
                     kernels::DropoutKey{0.3, 1234, 5, key.site, 1001}}) {
    std::vector<float> w(count);
    cpu::dropout(x.data(), w.data(), rows, width, other);
    CHECK(w != y);
  }
  ops<T>().bias_dropout_residual(gx.data(), nullptr, gres.data(), rows, width, {});
  std::vector<float> plain(count);
  for (std::size_t i = 0; i < count; ++i) plain[i] = x[i] + residual[i];
  CHECK_CLOSE_TO_REFERENCE(T, download(gx), plain);
}

// Dropout on the attention probabilities, both variants, against the CPU's materialised
// attention; and a tensor rank's heads (first_head) draw the whole model's mask of those heads.
TEMPLATE_TEST_CASE("attention with dropout on the probabilities", "[ops][attention][dropout]",
                   STORAGE_TYPES) {
  using T = TestType;
  const int batch = 2, seq = 37, heads = 4, h = 32;
  const int n = batch * seq;
  kernels::DropoutKey key{0.25, 99, 3, kernels::kAttentionProbsDropout, 64};
  auto qkv = rounded<T>(random_vector(n * 3 * h, 63)), dout = rounded<T>(random_vector(n * h, 64));
  std::vector<float> out(n * h), probs(batch * heads * seq * seq), dqkv(n * 3 * h);
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), batch, seq, heads, h, key);
  cpu::attention_backward(qkv.data(), probs.data(), dout.data(), dqkv.data(), batch, seq, heads, h,
                          key);
  std::vector<float> plain(n * h), plain_probs(probs.size());
  cpu::attention_forward(qkv.data(), plain.data(), plain_probs.data(), batch, seq, heads, h);
  CHECK(plain_probs == probs);  // the probabilities are kept undropped
  CHECK(plain != out);
  auto gqkv = upload<T>(qkv), gdout = upload<T>(dout);
  Tensor<T> gout(device(), out.size()), gprobs(device(), probs.size()),
      gdqkv(device(), dqkv.size());
  ops<T>().attention_forward(gqkv.data(), gout.data(), gprobs.data(), batch, seq, heads, h, key);
  CHECK_CLOSE_TO_REFERENCE(T, download(gout), out);
  ops<T>().attention_backward(gqkv.data(), gprobs.data(), gdout.data(), gdqkv.data(), batch, seq,
                              heads, h, key);
  // The backward reads the backend's own rounded probabilities: 16-bit error grows with them.
  if constexpr (std::is_same_v<T, float>) CHECK_CLOSE_TO_REFERENCE(T, download(gdqkv), dqkv);
  Tensor<float> glse(device(), static_cast<std::size_t>(batch) * heads * seq);
  ops<T>().flash_attention_forward(gqkv.data(), gout.data(), glse.data(), batch, seq, heads, h,
                                   key);
  CHECK_CLOSE_TO_REFERENCE(T, download(gout), out);
  ops<T>().flash_attention_backward(gqkv.data(), gout.data(), glse.data(), gdout.data(),
                                    gdqkv.data(), batch, seq, heads, h, key);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdqkv), dqkv);
  // Heads 2 and 3 alone, as the second of two tensor ranks holds them.
  const int hl = h / 2;
  std::vector<float> part(n * 3 * hl), part_dout(n * hl);
  for (int r = 0; r < n; ++r) {
    for (int third = 0; third < 3; ++third)
      for (int c = 0; c < hl; ++c)
        part[r * 3 * hl + third * hl + c] = qkv[r * 3 * h + third * h + hl + c];
    for (int c = 0; c < hl; ++c) part_dout[r * hl + c] = dout[r * h + hl + c];
  }
  kernels::DropoutKey rank_key = key;
  rank_key.first_head = heads / 2;
  auto gpart = upload<T>(part), gpart_dout = upload<T>(part_dout);
  Tensor<T> gpart_out(device(), part_dout.size()), gpart_d(device(), part.size());
  Tensor<float> gpart_lse(device(), static_cast<std::size_t>(batch) * heads / 2 * seq);
  ops<T>().flash_attention_forward(gpart.data(), gpart_out.data(), gpart_lse.data(), batch, seq,
                                   heads / 2, hl, rank_key);
  ops<T>().flash_attention_backward(gpart.data(), gpart_out.data(), gpart_lse.data(),
                                    gpart_dout.data(), gpart_d.data(), batch, seq, heads / 2, hl,
                                    rank_key);
  std::vector<float> want_out(part_dout.size()), want_d(part.size());
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < hl; ++c) want_out[r * hl + c] = out[r * h + hl + c];
    for (int third = 0; third < 3; ++third)
      for (int c = 0; c < hl; ++c)
        want_d[r * 3 * hl + third * hl + c] = dqkv[r * 3 * h + third * h + hl + c];
  }
  CHECK_CLOSE_TO_REFERENCE(T, download(gpart_out), want_out);
  CHECK_CLOSE_TO_REFERENCE(T, download(gpart_d), want_d);
}

// The vocabulary-parallel embedding, LM head and cross-entropy (tied embeddings): a vocabulary of
// 333 words split over 3 ranks padded to 336 (112 rows each, the last with 3 rows of padding);
// the slices' results, combined as the tensor group's all-reduces combine them, equal the whole
// vocabulary's.
TEMPLATE_TEST_CASE("vocabulary-parallel embedding, LM head and cross-entropy", "[ops][vocab]",
                   STORAGE_TYPES) {
  using T = TestType;
  const int vocab = 333, ranks = 3, rows = 112, seq = 8, n = 24, h = 40;
  auto table = rounded<T>(random_vector(static_cast<std::size_t>(ranks) * rows * h, 70));
  std::fill(table.begin() + static_cast<std::size_t>(vocab) * h, table.end(), 0.0f);  // padding
  auto pos = rounded<T>(random_vector(seq * h, 71)), x = rounded<T>(random_vector(n * h, 72));
  auto dx_in = rounded<T>(random_vector(n * h, 73));
  std::vector<std::int32_t> tokens(n), targets(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 41 + 5) % vocab, targets[i] = (i * 97 + 300) % vocab;
  // The whole vocabulary, on the CPU reference: embedding, logits, loss and their gradients.
  std::vector<float> emb(n * h), logits(n * vocab), log_sum(n), d_logits(n * vocab);
  std::vector<float> d_table(table.size(), 0.0f), d_pos(pos.size(), 0.0f), dx(n * h, 0.0f);
  cpu::embedding_forward(tokens.data(), table.data(), pos.data(), emb.data(), n, seq, h);
  cpu::lm_head_forward(x.data(), table.data(), logits.data(), n, h, vocab);
  const float loss =
      cpu::cross_entropy_loss(logits.data(), targets.data(), log_sum.data(), n, vocab);
  cpu::cross_entropy_backward(logits.data(), targets.data(), log_sum.data(), d_logits.data(), n,
                              vocab, 1.0f);
  cpu::embedding_backward(tokens.data(), dx_in.data(), d_table.data(), d_pos.data(), n, seq, h);
  cpu::lm_head_backward(x.data(), table.data(), d_logits.data(), dx.data(), d_table.data(), n, h,
                        vocab);
  // The LM head on the table is the linear layer on its transpose.
  std::vector<float> transposed(static_cast<std::size_t>(h) * vocab), linear(n * vocab);
  for (int v = 0; v < vocab; ++v)
    for (int c = 0; c < h; ++c) transposed[c * vocab + v] = table[v * h + c];
  cpu::linear_forward(x.data(), transposed.data(), static_cast<const float*>(nullptr),
                      linear.data(), n, h, vocab);
  CHECK(normalized_error(linear, logits) < 1e-6);

  // Each rank's slice on the backend; the position embedding added by rank 0 only.
  auto gtokens = upload_i32(tokens), gtargets = upload_i32(targets);
  auto gx = upload<T>(x), gpos = upload<T>(pos), gdx_in = upload<T>(dx_in);
  std::vector<float> emb_sum(n * h, 0.0f), max(n, -INFINITY), sums(2 * n, 0.0f);
  std::vector<Tensor<T>> slice_logits;
  for (int t = 0; t < ranks; ++t) {
    const int first = t * rows, words = std::min(rows, vocab - first);
    auto gtable =
        upload<T>(std::vector<float>(table.begin() + static_cast<std::size_t>(first) * h,
                                     table.begin() + static_cast<std::size_t>(first + rows) * h));
    Tensor<T> gemb(device(), emb.size());
    ops<T>().embedding_forward(gtokens.data(), gtable.data(), t == 0 ? gpos.data() : nullptr,
                               gemb.data(), n, seq, h, first, words);
    const auto part = download(gemb);
    for (std::size_t i = 0; i < part.size(); ++i) emb_sum[i] += part[i];
    slice_logits.emplace_back(device(), static_cast<std::size_t>(n) * rows);
    ops<T>().lm_head_forward(gx.data(), gtable.data(), slice_logits.back().data(), n, h, rows);
    Tensor<float> gmax(device(), n);
    ops<T>().cross_entropy_max(slice_logits.back().data(), gmax.data(), n, rows, words);
    const auto m = download(gmax);
    for (int i = 0; i < n; ++i) max[i] = std::max(max[i], m[i]);
  }
  CHECK_CLOSE_TO_REFERENCE(T, emb_sum, emb);
  auto gmax = upload<float>(max);
  for (int t = 0; t < ranks; ++t) {
    const int first = t * rows, words = std::min(rows, vocab - first);
    Tensor<float> gpartials(device(), 2 * static_cast<std::size_t>(n));
    ops<T>().cross_entropy_partials(slice_logits[t].data(), gtargets.data(), gmax.data(),
                                    gpartials.data(), n, rows, first, words);
    const auto part = download(gpartials);
    for (int i = 0; i < 2 * n; ++i) sums[i] += part[i];
  }
  auto gsums = upload<float>(sums);
  Tensor<float> glog_sum(device(), n);
  const double gloss = ops<T>().cross_entropy_finish(gmax.data(), gsums.data(), glog_sum.data(), n);
  // The logits are T on the backend, fp32 in the reference: T's tolerance.
  CHECK_CLOSE_TO_REFERENCE(T, std::vector<float>{static_cast<float>(gloss)},
                           std::vector<float>{loss});
  CHECK_CLOSE_TO_REFERENCE(T, download(glog_sum), log_sum);
  // Backward per slice: the logits' gradient (0 in the padding), the table's gradient from both
  // uses, and the LM head's input gradient summed over the slices.
  std::vector<float> dx_sum(n * h, 0.0f);
  for (int t = 0; t < ranks; ++t) {
    const int first = t * rows, words = std::min(rows, vocab - first);
    auto gtable =
        upload<T>(std::vector<float>(table.begin() + static_cast<std::size_t>(first) * h,
                                     table.begin() + static_cast<std::size_t>(first + rows) * h));
    ops<T>().cross_entropy_backward(slice_logits[t].data(), gtargets.data(), glog_sum.data(),
                                    slice_logits[t].data(), n, rows, 1.0f, first, words);
    const auto d = download(slice_logits[t]);
    std::vector<float> want(static_cast<std::size_t>(n) * rows, 0.0f);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < words; ++j) want[i * rows + j] = d_logits[i * vocab + first + j];
    CHECK_CLOSE_TO_REFERENCE(T, d, want);
    bool padding_zero = true;  // exactly: the padding rows are no parameter of the loss
    for (int i = 0; i < n; ++i)
      for (int j = words; j < rows; ++j) padding_zero &= d[i * rows + j] == 0.0f;
    CHECK(padding_zero);
    auto gd_table = zeros<float>(device(), static_cast<std::size_t>(rows) * h);
    auto gdx = zeros<T>(device(), static_cast<std::size_t>(n) * h);
    ops<T>().embedding_backward(gtokens.data(), gdx_in.data(), gd_table.data(), nullptr, n, seq, h,
                                first, words);
    ops<T>().lm_head_backward(gx.data(), gtable.data(), slice_logits[t].data(), gdx.data(),
                              gd_table.data(), n, h, rows);
    CHECK_CLOSE_TO_REFERENCE(
        T, download(gd_table),
        std::vector<float>(d_table.begin() + static_cast<std::size_t>(first) * h,
                           d_table.begin() + static_cast<std::size_t>(first + rows) * h));
    const auto part = download(gdx);
    for (std::size_t i = 0; i < part.size(); ++i) dx_sum[i] += part[i];
  }
  CHECK_CLOSE_TO_REFERENCE(T, dx_sum, dx);
}

// 16-bit gradients (training.grad_dtype = the storage type): the backward kernels add their
// contribution, summed in fp32, into the 16-bit gradient, rounded once (core/grad_out.hpp). The
// reference: the fp32 kernel's contribution from zero, added to the stored value and rounded.
TEMPLATE_TEST_CASE("parameter gradients into 16-bit storage, each call rounded once",
                   "[ops][grad16]", ted::Half, ted::BFloat16) {
  using T = TestType;
  const int n = 50, in = 24, out = 40, h = 300;
  auto x = rounded<T>(random_vector(n * in, 60)), w = rounded<T>(random_vector(in * out, 61));
  auto dy = rounded<T>(random_vector(n * out, 62));
  std::vector<float> dx(n * in, 0.0f), dw(in * out, 0.0f), db(out, 0.0f);
  cpu::linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), n, in, out);
  // A stored gradient far from the contribution's scale: the sum must be rounded once, from
  // the stored value (a kernel that overwrote it, or rounded its contribution first, fails).
  auto stored_w = rounded<T>(random_vector(in * out, 63, 3.0f));
  auto stored_b = rounded<T>(random_vector(out, 64, 3.0f));
  auto want = [](const std::vector<float>& stored, const std::vector<float>& contribution) {
    std::vector<float> sum(stored.size());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = round_to<T>(stored[i] + contribution[i]);
    return sum;
  };
  auto gx = upload<T>(x), gw = upload<T>(w), gdy = upload<T>(dy);
  auto gdw = upload<T>(stored_w), gdb = upload<T>(stored_b);
  ops<T>().linear_backward(gx.data(), gw.data(), gdy.data(), nullptr,
                           GradOut<T>::storage(gdw.data()), GradOut<T>::storage(gdb.data()), n, in,
                           out);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdw), want(stored_w, dw));
  CHECK_CLOSE_TO_REFERENCE(T, download(gdb), want(stored_b, db));

  // LayerNorm's gamma and beta.
  auto lx = rounded<T>(random_vector(n * h, 65, 2.0f)), ldy = rounded<T>(random_vector(n * h, 66));
  auto gamma = rounded<T>(random_vector(h, 67)), beta = rounded<T>(random_vector(h, 68));
  std::vector<float> y(n * h), mean(n), rstd(n), ldx(n * h, 0.0f), dg(h, 0.0f), dbeta(h, 0.0f);
  cpu::layernorm_forward(lx.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                         n, h);
  cpu::layernorm_backward(lx.data(), gamma.data(), mean.data(), rstd.data(), ldy.data(), ldx.data(),
                          dg.data(), dbeta.data(), n, h);
  auto stored_g = rounded<T>(random_vector(h, 69, 3.0f)),
       stored_beta = rounded<T>(random_vector(h, 70, 3.0f));
  auto glx = upload<T>(lx), gldy = upload<T>(ldy), ggamma = upload<T>(gamma),
       gbeta = upload<T>(beta);
  auto gdg = upload<T>(stored_g), gdbeta = upload<T>(stored_beta);
  Tensor<T> gy(device(), y.size());
  Tensor<T> gldx = zeros<T>(device(), ldx.size());
  Tensor<float> gmean(device(), n), grstd(device(), n);
  ops<T>().layernorm_forward(glx.data(), ggamma.data(), gbeta.data(), gy.data(), gmean.data(),
                             grstd.data(), n, h);
  ops<T>().layernorm_backward(glx.data(), ggamma.data(), gmean.data(), grstd.data(), gldy.data(),
                              gldx.data(), GradOut<T>::storage(gdg.data()),
                              GradOut<T>::storage(gdbeta.data()), n, h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdg), want(stored_g, dg));
  CHECK_CLOSE_TO_REFERENCE(T, download(gdbeta), want(stored_beta, dbeta));

  // The embeddings: each table row's tokens (each position's sequences) summed, then added in
  // once. A slice of the vocabulary (words 3 .. 9): the other tokens add nothing.
  const int vocab = 11, seq = 7, rows = 21, eh = 13, first_word = 3, words = 7;
  auto edx = rounded<T>(random_vector(rows * eh, 71));
  std::vector<std::int32_t> tokens(rows);
  for (int i = 0; i < rows; ++i) tokens[i] = (i * 5 + 3) % vocab;
  std::vector<float> dtok(vocab * eh, 0.0f), dpos(seq * eh, 0.0f);
  cpu::embedding_backward(tokens.data(), edx.data(), dtok.data(), dpos.data(), rows, seq, eh);
  const std::vector<float> dslice(dtok.begin() + first_word * eh,
                                  dtok.begin() + (first_word + words) * eh);
  auto stored_tok = rounded<T>(random_vector(words * eh, 73, 3.0f));
  auto stored_pos = rounded<T>(random_vector(seq * eh, 72, 3.0f));
  auto gtokens = upload_i32(tokens);
  auto gedx = upload<T>(edx), gdtok = upload<T>(stored_tok), gdpos = upload<T>(stored_pos);
  ops<T>().embedding_backward(gtokens.data(), gedx.data(), GradOut<T>::storage(gdtok.data()),
                              GradOut<T>::storage(gdpos.data()), rows, seq, eh, first_word, words);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdtok), want(stored_tok, dslice));
  CHECK_CLOSE_TO_REFERENCE(T, download(gdpos), want(stored_pos, dpos));
}
