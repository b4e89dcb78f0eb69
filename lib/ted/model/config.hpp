// The shape of the MoE GPT (docs/algorithm.md section 1) and its gating, with the rules a config
// must keep. Each field is a key of the training config (train/train_config.cpp binds them):
// model.* (model.experts in gate.experts), gating.* and routing.* (gate), and training.seed and
// training.grad_dtype.
#pragma once

#include <cstdint>
#include <string>

#include "ted/core/dtype.hpp"
#include "ted/routing/gating.hpp"

namespace ted::model {

// model.attention: "fused" (scores one tile at a time, each row's log-sum-exp kept: the
// backend's FlashAttention-2, or cuDNN's fused attention on a GPU where it takes the shape),
// "materialized" (the [seq, seq] probabilities kept per head, as the Megatron of the paper's
// time did), or "auto": the backend's fastest of the two for the shape (GptModel::attention()
// says which ran). The projection counts auto as fused.
enum class AttentionKind { automatic, fused, materialized };
inline constexpr const char* kAttentionNames[] = {"auto", "fused", "materialized"};
inline const char* to_string(AttentionKind kind) {
  return kAttentionNames[static_cast<int>(kind)];
}

// The parameter gradients' element type of a model whose weights are `storage` (fp32, fp64,
// bf16, fp16) when training.grad_dtype asks for `asked`: the master type (fp32; fp64 for fp64)
// when fp32 is asked, or a 16-bit storage type itself (DeepSpeed's fp16 ZeRO-1 keeps them so:
// accumulated once per micro-batch and reduced in 16-bit). ConfigError naming
// training.grad_dtype otherwise. The one rule: the training config, the model, its parameters,
// the projection and ted_project all ask it.
DataType gradient_type(DataType storage, DataType asked);

struct ModelConfig {
  int vocab = 64;
  int seq_len = 32;
  int hidden = 64;
  int heads = 4;
  int layers = 2;
  int ffn_mult = 4;          // FFN width = ffn_mult * hidden (dense and experts)
  int expert_interval = 2;   // every expert_interval-th block is MoE (blocks 1, 3, ... for 2)
  routing::GateConfig gate;  // gate.experts is the number of experts
  bool checkpoint = false;   // activation checkpointing per block
  // Megatron's GPT: the input embedding split over the tensor group by vocabulary and tied to
  // the output layer (one [vocab, hidden] table, both uses' gradients summed in it), the
  // cross-entropy vocabulary-parallel. false: an embedding and an LM head of their own, each
  // whole on every tensor rank.
  bool tie_embeddings = true;
  // Dropout after the attention probabilities and after each sub-layer's output (attention and
  // FFN or MoE, before the residual add), as GPT-3 and Megatron place it (GPT-3: 0.1); masks
  // drawn from counters of (seed, step, layer, global token, feature), the same on every layout.
  double dropout = 0;
  AttentionKind attention = AttentionKind::automatic;  // causal attention (AttentionKind)
  // training.grad_dtype: f32, or the storage type (gradient_type decides what it means).
  DataType grad_dtype = DataType::f32;
  std::uint64_t seed = 1234;
  double init_std = 0.02;

  int ffn() const { return ffn_mult * hidden; }
  // The vocabulary as a tensor group of T ranks splits it (tied embeddings): padded to a
  // multiple of T, as Megatron pads it, each rank holding padded_vocab(T) / T rows; the padding
  // rows stay 0 and are left out of the softmax, so every T computes the same function.
  int padded_vocab(int tensor) const {
    return tie_embeddings ? (vocab + tensor - 1) / tensor * tensor : vocab;
  }
  // The vocabulary rows one of T tensor ranks holds (the LM head's columns there): the padded
  // vocabulary over T when tied, else the whole vocabulary.
  int vocab_rows(int tensor) const {
    return tie_embeddings ? padded_vocab(tensor) / tensor : vocab;
  }
  bool is_moe(int layer) const { return (layer + 1) % expert_interval == 0; }
  bool fused_attention() const { return attention != AttentionKind::materialized; }
  // Throws ConfigError naming the key and the rule.
  void validate() const;
  // The tensors that grow with the micro-batch stay within kMaxTensorElements.
  void validate_batch(int micro_batch) const;
};

// The most elements one tensor may have: GEMM dimensions and many indices are 32-bit.
constexpr double kMaxTensorElements = 2147483647.0;
// ConfigError "<what> makes one tensor of N elements; at most ..." when over the limit.
void check_tensor_elements(double elements, const std::string& what);

}  // namespace ted::model
