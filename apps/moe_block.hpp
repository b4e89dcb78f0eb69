// What both block benchmarks (bench_moe_block on the CPU, bench_moe_block_cuda on a GPU) run:
// the suite's model with one MoE block (and the small LM head such a model needs), and one
// batch of the synthetic data for it. Header-only, shared by the two programs.
#pragma once

#include <cstdint>
#include <vector>

#include "ted/model/gpt.hpp"
#include "ted/train/data.hpp"

namespace ted::bench {

struct BlockShape {
  int hidden, heads, seq, sequences, experts, top_k;
  model::AttentionKind attention = model::AttentionKind::automatic;  // model.attention
};

inline model::ModelConfig one_moe_block(const BlockShape& shape) {
  model::ModelConfig config;
  config.vocab = 256;
  config.seq_len = shape.seq;
  config.hidden = shape.hidden;
  config.heads = shape.heads;
  config.layers = 1;
  config.expert_interval = 1;  // the one block is an MoE block
  config.gate.experts = shape.experts;
  config.gate.top_k = shape.top_k;
  config.gate.capacity_factor = 1.0;
  config.attention = shape.attention;
  return config;
}

// sequences x seq tokens of the synthetic source and their targets, as one gating group.
struct BlockBatch {
  std::vector<std::int32_t> tokens, targets;
  model::Batch batch;
  explicit BlockBatch(const BlockShape& shape) {
    train::SyntheticSource source(256, 7);
    tokens.resize(static_cast<std::size_t>(shape.sequences) * shape.seq);
    targets.resize(tokens.size());
    for (int s = 0; s < shape.sequences; ++s)
      source.sample(s, shape.seq, tokens.data() + s * shape.seq, targets.data() + s * shape.seq);
    batch = {tokens.data(), targets.data(), shape.sequences, 0, 0, 0};
  }
};

}  // namespace ted::bench
