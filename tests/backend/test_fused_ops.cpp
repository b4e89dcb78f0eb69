// The fused ops of the kernel table on the device under test against the unfused CPU fp32
// kernels (kernels/cpu) on random data, in fp32, fp16 and bf16 storage: FlashAttention-2
// against the materialised attention, and the one-pass element-wise ops (bias + GeLU, GeLU
// backward + bias gradient, bias + residual) against their parts.
#include "catch.hpp"

#include <cmath>

#include "backend/backend.hpp"
#include "ted/kernels/cpu/attention.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/model/gpt.hpp"

using namespace ted;
using namespace ted::test;
namespace cpu = ted::kernels::cpu;

#define STORAGE_TYPES float, ted::Half, ted::BFloat16

// 70 positions cross the tile edges of both backends (64 on the CPU, 32 or 16 on a GPU) and end
// in a ragged tile; heads of 8 columns.
TEMPLATE_TEST_CASE("fused causal attention equals the materialised one", "[ops][attention]",
                   STORAGE_TYPES) {
  using T = TestType;
  const int batch = 2, seq = 70, heads = 3, h = 24;
  const int n = batch * seq;
  auto qkv = rounded<T>(random_vector(n * 3 * h, 31, 2.0f));
  auto dout = rounded<T>(random_vector(n * h, 32));
  std::vector<float> out(n * h), probs(batch * heads * seq * seq), dqkv(n * 3 * h);
  cpu::attention_forward(qkv.data(), out.data(), probs.data(), batch, seq, heads, h);
  cpu::attention_backward(qkv.data(), probs.data(), dout.data(), dqkv.data(), batch, seq, heads, h);
  // Each row's log-sum-exp of its scaled scores, from the scores themselves (in double).
  const int d = h / heads;
  std::vector<float> lse(batch * heads * seq);
  for (int b = 0; b < batch; ++b)
    for (int head = 0; head < heads; ++head)
      for (int i = 0; i < seq; ++i) {
        double sum = 0;
        for (int j = 0; j <= i; ++j) {
          double score = 0;
          for (int c = 0; c < d; ++c)
            score += double(qkv[(b * seq + i) * 3 * h + head * d + c]) *
                     qkv[(b * seq + j) * 3 * h + h + head * d + c];
          sum += std::exp(score / std::sqrt(double(d)));
        }
        lse[(b * heads + head) * seq + i] = static_cast<float>(std::log(sum));
      }
  auto gqkv = upload<T>(qkv), gdout = upload<T>(dout);
  Tensor<T> gout(device(), out.size()), gdqkv(device(), dqkv.size());
  Tensor<float> glse(device(), lse.size());
  ops<T>().flash_attention_forward(gqkv.data(), gout.data(), glse.data(), batch, seq, heads, h, {});
  CHECK_CLOSE_TO_REFERENCE(T, download(gout), out);
  CHECK_CLOSE_TO_REFERENCE(float, download(glse), lse);
  ops<T>().flash_attention_backward(gqkv.data(), gout.data(), glse.data(), gdout.data(),
                                    gdqkv.data(), batch, seq, heads, h, {});
  CHECK_CLOSE_TO_REFERENCE(T, download(gdqkv), dqkv);
}

TEMPLATE_TEST_CASE("bias + residual in one pass", "[ops][fused]", STORAGE_TYPES) {
  using T = TestType;
  const int rows = 37, width = 150;
  const std::size_t count = static_cast<std::size_t>(rows) * width;
  auto hidden0 = rounded<T>(random_vector(count, 33, 2.0f));
  auto bias = rounded<T>(random_vector(width, 34));
  auto residual = rounded<T>(random_vector(count, 36));
  // The reference, unfused: bias, then the skip.
  std::vector<float> y = hidden0;
  for (std::size_t i = 0; i < count; ++i) y[i] = (y[i] + bias[i % width]) + residual[i];

  auto gbias = upload<T>(bias), gy = upload<T>(hidden0), gresidual = upload<T>(residual);
  ops<T>().add_bias_residual(gy.data(), gbias.data(), gresidual.data(), rows, width);
  CHECK_CLOSE_TO_REFERENCE(T, download(gy), y);
}

// model.attention = auto takes the kernel table's fastest attention for the shape: the CPU's
// FlashAttention-2; cuDNN's fused attention on a GPU where it takes the shape (bf16, fp16);
// else the materialised one (fp32 on a GPU, the emulated GPU), never the GPU's own slower kernel.
TEMPLATE_TEST_CASE("model.attention = auto runs the backend's fastest attention",
                   "[attention][model]", STORAGE_TYPES) {
  using T = TestType;
  model::ModelConfig c;
  c.vocab = 32;
  c.seq_len = 128;
  c.hidden = 256;
  c.heads = 4;
  c.layers = 1;
  const auto fused = ops<T>().fused_attention(c.seq_len, c.heads, c.hidden, false);
  model::GptModel<T> model(c, device());
  INFO("kernel table: " << fused.kernel << (fused.fastest ? " (fastest)" : "") << " "
                        << fused.note);
  CHECK(model.attention() == (fused.fastest ? fused.kernel : std::string("materialized")));
  if (ops<T>().name() == "cpu") CHECK(model.attention() == "flash");
  if (fused.kernel == "cudnn") CHECK(!std::is_same_v<T, float>);
  c.attention = model::AttentionKind::materialized;
  CHECK(model::GptModel<T>(c, device()).attention() == "materialized");
}
