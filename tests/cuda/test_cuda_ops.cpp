// Every dense GPU op against the CPU reference (kernels/cpu) on random data, for fp32, fp16 and
// bf16 storage. Inputs are rounded to the storage type before the reference sees them, so the
// score measures the GPU's arithmetic and output rounding only.
#include <catch2/catch.hpp>

#include "cuda/gpu.hpp"
#include "ted/kernels/adamw.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/cpu/layers.hpp"

using namespace ted;
using namespace ted::test;
namespace cpu = ted::kernels::cpu;

#define STORAGE_TYPES float, ted::Half, ted::BFloat16

TEMPLATE_TEST_CASE("gemm and batched gemm match CBLAS", "[cuda][gemm]", STORAGE_TYPES) {
  using T = TestType;
  const int m = 37, n = 29, k = 45, batch = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto a = rounded<T>(random_vector(static_cast<std::size_t>(batch) * m * k, 1));
      auto b = rounded<T>(random_vector(static_cast<std::size_t>(batch) * k * n, 2));
      auto c0 = rounded<T>(random_vector(static_cast<std::size_t>(batch) * m * n, 3));
      const int lda = ta ? m : k, ldb = tb ? k : n;
      std::vector<float> want = c0;
      for (int i = 0; i < batch; ++i)
        cpu::gemm(ta, tb, m, n, k, 0.5f, a.data() + i * m * k, lda, b.data() + i * k * n, ldb,
                  0.25f, want.data() + i * m * n, n);
      auto da = upload<T>(a), db = upload<T>(b), dc = upload<T>(c0);
      kc::gemm_batched<T>(gpu(), ta, tb, m, n, k, 0.5f, da.data(), lda, m * k, db.data(), ldb,
                          k * n, 0.25f, dc.data(), n, m * n, batch);
      CHECK_CLOSE_TO_REFERENCE(T, download(dc), want);
      Tensor<float> f32 = upload_f32(c0);
      kc::gemm_f32_out<T>(gpu(), ta, tb, m, n, k, 0.5f, da.data(), lda, db.data(), ldb, 0.25f,
                          f32.data(), n);
      std::vector<float> first(want.begin(), want.begin() + m * n);
      CHECK_CLOSE_TO_REFERENCE(float, download_f32(f32.data(), m * n), first);
    }
}

TEMPLATE_TEST_CASE("linear forward and backward", "[cuda][linear]", STORAGE_TYPES) {
  using T = TestType;
  const int n = 50, in = 24, out = 40;
  auto x = rounded<T>(random_vector(n * in, 4)), w = rounded<T>(random_vector(in * out, 5));
  auto b = random_vector(out, 6), dy = rounded<T>(random_vector(n * out, 7));
  std::vector<float> y(n * out), dx = rounded<T>(random_vector(n * in, 8));
  std::vector<float> dx0 = dx, dw(in * out, 0.5f), db(out, 0.25f);
  std::vector<float> dw0 = dw, db0 = db;
  cpu::linear_forward(x.data(), w.data(), b.data(), y.data(), n, in, out);
  cpu::linear_backward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), n, in, out);
  auto gx = upload<T>(x), gw = upload<T>(w), gdy = upload<T>(dy), gdx = upload<T>(dx0);
  auto gb = upload_f32(b), gdw = upload_f32(dw0), gdb = upload_f32(db0);
  Tensor<T> gy(gpu().device(), y.size());
  kc::linear_forward<T>(gpu(), gx.data(), gw.data(), gb.data(), gy.data(), n, in, out);
  kc::linear_backward<T>(gpu(), gx.data(), gw.data(), gdy.data(), gdx.data(), gdw.data(),
                         gdb.data(), n, in, out);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdx), dx);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdw), dw);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb), db);
}

TEMPLATE_TEST_CASE("layernorm forward and backward", "[cuda][layernorm]", STORAGE_TYPES) {
  using T = TestType;
  const int n = 33, h = 300;  // h not a multiple of the block: the strided loops' tails
  auto x = rounded<T>(random_vector(n * h, 9, 2.0f)), dy = rounded<T>(random_vector(n * h, 10));
  auto gamma = random_vector(h, 11), beta = random_vector(h, 12);
  std::vector<float> y(n * h), mean(n), rstd(n), dx = rounded<T>(random_vector(n * h, 13));
  std::vector<float> dx0 = dx, dgamma(h, 0.1f), dbeta(h, -0.1f);
  std::vector<float> dgamma0 = dgamma, dbeta0 = dbeta;
  cpu::layernorm_forward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), n,
                         h);
  cpu::layernorm_backward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                          dgamma.data(), dbeta.data(), n, h);
  auto gx = upload<T>(x), gdy = upload<T>(dy), gdx = upload<T>(dx0);
  auto gg = upload_f32(gamma), gbeta = upload_f32(beta), gdg = upload_f32(dgamma0),
       gdb = upload_f32(dbeta0);
  Tensor<T> gy(gpu().device(), y.size());
  Tensor<float> gmean(gpu().device(), n), grstd(gpu().device(), n);
  kc::layernorm_forward<T>(gpu(), gx.data(), gg.data(), gbeta.data(), gy.data(), gmean.data(),
                           grstd.data(), n, h);
  kc::layernorm_backward<T>(gpu(), gx.data(), gg.data(), gmean.data(), grstd.data(), gdy.data(),
                            gdx.data(), gdg.data(), gdb.data(), n, h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(float, download(gmean), mean);
  CHECK_CLOSE_TO_REFERENCE(float, download(grstd), rstd);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdx), dx);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdg), dgamma);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdb), dbeta);
}

TEMPLATE_TEST_CASE("gelu forward and backward", "[cuda][gelu]", STORAGE_TYPES) {
  using T = TestType;
  const std::size_t n = 5000;
  auto x = rounded<T>(random_vector(n, 14, 3.0f)), dy = rounded<T>(random_vector(n, 15));
  std::vector<float> y(n), dx(n);
  cpu::gelu_forward(x.data(), y.data(), n);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
  auto gx = upload<T>(x), gdy = upload<T>(dy);
  Tensor<T> gy(gpu().device(), n);
  kc::gelu_forward<T>(gpu(), gx.data(), gy.data(), n);
  kc::gelu_backward<T>(gpu(), gx.data(), gdy.data(), gdy.data(), n);  // in place, as allowed
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdy), dx);
}

TEMPLATE_TEST_CASE("causal attention forward and backward", "[cuda][attention]", STORAGE_TYPES) {
  using T = TestType;
  const int batch = 2, seq = 19, heads = 3, h = 24;
  const int n = batch * seq;
  auto qkv = rounded<T>(random_vector(n * 3 * h, 16)), dout = rounded<T>(random_vector(n * h, 17));
  std::vector<float> out(n * h), probs(batch * heads * seq * seq), dqkv(n * 3 * h);
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), batch, seq, heads, h);
  // The GPU's backward reads its own (rounded) probabilities: give the reference the same.
  auto gqkv = upload<T>(qkv), gdout = upload<T>(dout);
  Tensor<T> gout(gpu().device(), out.size()), gprobs(gpu().device(), probs.size()),
      gdqkv(gpu().device(), dqkv.size()), scratch(gpu().device(), heads * seq * seq);
  kc::attention_forward<T>(gpu(), gqkv.data(), gout.data(), gprobs.data(), batch, seq, heads, h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gprobs), probs);
  CHECK_CLOSE_TO_REFERENCE(T, download(gout), out);
  auto probs_seen = download(gprobs);
  cpu::attention_backward(qkv.data(), probs_seen.data(), dout.data(), dqkv.data(), batch, seq,
                          heads, h);
  kc::attention_backward<T>(gpu(), gqkv.data(), gprobs.data(), gdout.data(), gdqkv.data(),
                            scratch.data(), batch, seq, heads, h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gdqkv), dqkv);
}

TEMPLATE_TEST_CASE("cross-entropy", "[cuda][loss]", STORAGE_TYPES) {
  using T = TestType;
  const int n = 40, vocab = 333;
  auto logits = rounded<T>(random_vector(n * vocab, 18, 2.0f));
  std::vector<std::int32_t> targets(n);
  for (int i = 0; i < n; ++i) targets[i] = (i * 37) % vocab;
  std::vector<float> d(n * vocab);
  float loss =
      cpu::cross_entropy_forward_backward(logits.data(), targets.data(), d.data(), n, vocab, 2.0f);
  auto glogits = upload<T>(logits);
  Tensor<std::int32_t> gtargets(gpu().device(), n);
  gpu().device().copy_from_host(gtargets.data(), targets.data(), n * sizeof(std::int32_t));
  Tensor<T> gd(gpu().device(), d.size());
  Tensor<float> rows(gpu().device(), n);
  kc::cross_entropy<T>(gpu(), glogits.data(), gtargets.data(), gd.data(), rows.data(), n, vocab,
                       2.0f);
  float gloss = kc::sum(gpu(), rows.data(), n) / n;
  CHECK_CLOSE_TO_REFERENCE(float, std::vector<float>{gloss}, std::vector<float>{loss});
  CHECK_CLOSE_TO_REFERENCE(T, download(gd), d);
}

TEMPLATE_TEST_CASE("embedding forward and backward", "[cuda][embedding]", STORAGE_TYPES) {
  using T = TestType;
  const int vocab = 11, seq = 7, n = 21, h = 13;
  auto tok = random_vector(vocab * h, 19), pos = random_vector(seq * h, 20);
  auto dx = rounded<T>(random_vector(n * h, 21));
  std::vector<std::int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 5 + 3) % vocab;
  std::vector<float> x(n * h), dtok(vocab * h, 0.0f), dpos(seq * h, 0.0f);
  cpu::embedding_forward(tokens.data(), tok.data(), pos.data(), x.data(), n, seq, h);
  cpu::embedding_backward(tokens.data(), dx.data(), dtok.data(), dpos.data(), n, seq, h);
  Tensor<std::int32_t> gtokens(gpu().device(), n);
  gpu().device().copy_from_host(gtokens.data(), tokens.data(), n * sizeof(std::int32_t));
  auto gtok = upload_f32(tok), gpos = upload_f32(pos), gdx = upload<T>(dx);
  auto gdtok = zeros<float>(gpu().device(), dtok.size()),
       gdpos = zeros<float>(gpu().device(), dpos.size());
  Tensor<T> gx(gpu().device(), x.size());
  kc::embedding_forward<T>(gpu(), gtokens.data(), gtok.data(), gpos.data(), gx.data(), n, seq, h);
  kc::embedding_backward<T>(gpu(), gtokens.data(), gdx.data(), gdtok.data(), gdpos.data(), n, seq,
                            h);
  CHECK_CLOSE_TO_REFERENCE(T, download(gx), x);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdtok), dtok);
  CHECK_CLOSE_TO_REFERENCE(float, download(gdpos), dpos);
}

TEMPLATE_TEST_CASE("fused AdamW equals the CPU optimizer's per-element update", "[cuda][adam]",
                   STORAGE_TYPES) {
  using T = TestType;
  const std::size_t n = 3000;
  auto master = random_vector(n, 22), grad = random_vector(n, 23), m = random_vector(n, 24, 0.1f);
  auto v = random_vector(n, 25, 0.1f);
  for (float& x : v) x = x * x;
  kc::AdamStep step{1e-3f, 0.9f, 0.95f, 1e-8f, 0.01f, 1 - 0.9f * 0.9f, 1 - 0.95f * 0.95f, 0.5f};
  auto gmaster = upload_f32(master), ggrad = upload_f32(grad), gm = upload_f32(m),
       gv = upload_f32(v);
  Tensor<T> copy(gpu().device(), n);
  kc::adamw<T>(gpu(), gmaster.data(), ggrad.data(), gm.data(), gv.data(), copy.data(), n, step,
               true);
  kernels::AdamHyper<float> hyper{step.lr,           step.beta1,       step.beta2,      step.eps,
                                  step.weight_decay, step.correction1, step.correction2};
  for (std::size_t i = 0; i < n; ++i)
    kernels::adamw_update(master[i], m[i], v[i], grad[i] * step.grad_scale, hyper);
  CHECK_CLOSE_TO_REFERENCE(float, download(gmaster), master);
  CHECK_CLOSE_TO_REFERENCE(float, download(gm), m);
  CHECK_CLOSE_TO_REFERENCE(float, download(gv), v);
  CHECK_CLOSE_TO_REFERENCE(T, download(copy), rounded<T>(master));
}

TEST_CASE("gradient norm and the overflow check", "[cuda][scaling]") {
  auto g = random_vector(10000, 26);
  double want = 0;
  for (float x : g) want += static_cast<double>(x) * x;
  auto dg = upload_f32(g);
  CHECK(kc::squared_norm(gpu(), dg.data(), g.size()) == Approx(want).epsilon(1e-5));
  CHECK_FALSE(kc::has_non_finite(gpu(), dg.data(), g.size()));
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    g[7777] = bad;
    auto with_bad = upload_f32(g);
    CHECK(kc::has_non_finite(gpu(), with_bad.data(), g.size()));
  }
}
