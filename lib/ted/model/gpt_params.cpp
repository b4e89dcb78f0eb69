#include "ted/model/gpt_params.hpp"

#include <algorithm>

#include "ted/core/error.hpp"

namespace ted::model {

int GptParamSpecs::id(const std::string& name) const {
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (specs[i].name == name) return static_cast<int>(i);
  throw Error("the GPT has no parameter named " + name);
}

std::pair<std::size_t, std::size_t> GptParamSpecs::elements(Ids ids) const {
  std::pair<std::size_t, std::size_t> sum{0, 0};
  for (int i = ids.first; i < ids.second; ++i) {
    const ParamSpec& spec = specs[static_cast<std::size_t>(i)];
    (spec.kind == ParamKind::dense ? sum.first : sum.second) += spec.size();
  }
  return sum;
}

GptParamSpecs gpt_param_specs(const ModelConfig& config, const ParamShard& shard) {
  const int h = config.hidden, f = config.ffn(), E = config.gate.experts, V = config.vocab;
  const int T = shard.tensor_ranks, t = shard.tensor_rank;
  const int hl = h / T, El = E / shard.expert_ranks;
  const DimSlice all{};
  auto part = [&](int width) { return DimSlice{{t * (width / T), width / T}}; };
  const DimSlice qkv_cols{{t * hl, hl}, {h + t * hl, hl}, {2 * h + t * hl, hl}};
  const DimSlice experts{{shard.expert_rank * El, El}};
  const DimSlice expert_f = shard.split_experts ? part(f) : all;
  const auto X = ParamKind::expert;
  const auto normal = ParamInit::normal, zeros = ParamInit::zeros, ones = ParamInit::ones;

  GptParamSpecs out;
  auto add = [&](std::string name, std::vector<int> shape, ParamInit init, bool decay,
                 std::vector<DimSlice> slice = {}, ParamKind kind = ParamKind::dense) {
    ParamSpec spec;
    spec.name = std::move(name);
    spec.shape = std::move(shape);
    spec.kind = kind;
    spec.init = init;
    spec.decay = decay;
    // Tensor-split: a dimension other than the expert one is cut by t.
    for (std::size_t d = 0; d < slice.size(); ++d)
      if (!slice[d].empty() && !(kind == ParamKind::expert && d == 0) && T > 1)
        spec.tensor_replicated = false;
    spec.slice = std::move(slice);
    out.specs.push_back(std::move(spec));
  };

  if (config.tie_embeddings) {
    // One [V', h] table for the embedding and the LM head (V' the vocabulary padded to a
    // multiple of T, as Megatron pads it), split by vocabulary: rows [t V'/T, (t + 1) V'/T) on
    // tensor rank t, the rows past V padding (0 from the start, their gradient 0). No weight
    // decay, as for every embedding here.
    const int rows = config.vocab_rows(T), first_word = t * rows;
    add("tok_emb", {config.padded_vocab(T), h}, normal, false,
        T > 1 ? std::vector<DimSlice>{{{first_word, rows}}} : std::vector<DimSlice>{});
    const int words = std::clamp(V - first_word, 0, rows);
    out.specs.back().padding_from = static_cast<std::size_t>(words) * h;
  } else {
    add("tok_emb", {V, h}, normal, false);
  }
  add("pos_emb", {config.seq_len, h}, normal, false);
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = "block" + std::to_string(l) + ".";
    add(p + "ln1.g", {h}, ones, false);
    add(p + "ln1.b", {h}, zeros, false);
    add(p + "attn.qkv.w", {h, 3 * h}, normal, true, {all, qkv_cols});
    add(p + "attn.qkv.b", {3 * h}, zeros, false, {qkv_cols});
    add(p + "attn.proj.w", {h, h}, normal, true, {part(h)});
    add(p + "attn.proj.b", {h}, zeros, false);
    add(p + "ln2.g", {h}, ones, false);
    add(p + "ln2.b", {h}, zeros, false);
    if (config.is_moe(l)) {
      add(p + "moe.gate.w", {h, E}, normal, true);
      add(p + "moe.w1", {E, h, f}, normal, true, {experts, all, expert_f}, X);
      add(p + "moe.b1", {E, f}, zeros, false, {experts, expert_f}, X);
      add(p + "moe.w2", {E, f, h}, normal, true, {experts, expert_f}, X);
      add(p + "moe.b2", {E, h}, zeros, false, {experts}, X);
    } else {
      add(p + "ffn.fc1.w", {h, f}, normal, true, {all, part(f)});
      add(p + "ffn.fc1.b", {f}, zeros, false, {part(f)});
      add(p + "ffn.fc2.w", {f, h}, normal, true, {part(f)});
      add(p + "ffn.fc2.b", {h}, zeros, false);
    }
  }
  add("lnf.g", {h}, ones, false);
  add("lnf.b", {h}, zeros, false);
  if (!config.tie_embeddings) add("lm_head.w", {h, V}, normal, true);
  return out;
}

}  // namespace ted::model
