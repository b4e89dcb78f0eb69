#include "ted/model/config.hpp"

#include <string>

#include "ted/core/config_schema.hpp"
#include "ted/core/error.hpp"

namespace ted::model {

DataType gradient_type(DataType storage, DataType asked) {
  const DataType master = storage == DataType::f64 ? DataType::f64 : DataType::f32;
  if (asked == DataType::f32) return master;
  if (asked == storage && storage != master) return storage;
  throw ConfigError("training.grad_dtype must be fp32 or the storage type run.dtype (" +
                    std::string(precision_name(storage)) + "), got '" +
                    std::string(precision_name(asked)) + "'");
}

void check_tensor_elements(double elements, const std::string& what) {
  if (elements > kMaxTensorElements)
    throw ConfigError(what + " makes one tensor of " + std::to_string(elements) +
                      " elements; at most 2^31 - 1 (32-bit GEMM dimensions and indices)");
}

void ModelConfig::validate() const {
  // Upper bounds far above any real model; they keep every size product below overflow.
  in_range(vocab, 2, 1 << 24, "model.vocab");
  in_range(seq_len, 1, 1 << 20, "model.seq_len");
  in_range(hidden, 1, 1 << 20, "model.hidden");
  in_range(heads, 1, 1 << 16, "model.heads");
  in_range(layers, 1, 1 << 14, "model.layers");
  in_range(ffn_mult, 1, 64, "model.ffn_mult");
  in_range(expert_interval, 1, 1 << 14, "model.expert_interval");
  in_range(gate.experts, 1, 1 << 16, "model.experts");
  if (hidden % heads != 0)
    throw ConfigError("model.heads (" + std::to_string(heads) + ") must divide model.hidden (" +
                      std::to_string(hidden) + ")");
  if (gate.top_k != 1 && gate.top_k != 2)
    throw ConfigError("gating.top_k must be 1 or 2, got " + std::to_string(gate.top_k));
  if (gate.top_k > gate.experts)
    throw ConfigError("gating.top_k (" + std::to_string(gate.top_k) +
                      ") must not exceed model.experts (" + std::to_string(gate.experts) + ")");
  if (!(gate.capacity_factor > 0) || gate.capacity_factor > gate.experts)
    throw ConfigError("gating.capacity_factor must be positive and at most model.experts (" +
                      std::to_string(gate.experts) +
                      ": a capacity of every token routed to one expert), got " +
                      std::to_string(gate.capacity_factor));
  in_range(gate.min_capacity, 0, 1 << 24, "gating.min_capacity");
  if (gate.aux_coeff < 0)
    throw ConfigError("gating.aux_coeff must not be negative, got " +
                      std::to_string(gate.aux_coeff));
  routing::validate(gate.workload, gate.experts, gate.top_k);
  if (!(dropout >= 0 && dropout < 1))
    throw ConfigError(
        "model.dropout must be in [0, 1) (the probability of dropping an element), "
        "got " +
        std::to_string(dropout));
  if (!(init_std > 0) || init_std > 1)
    throw ConfigError("model.init_std must be in (0, 1], got " + std::to_string(init_std));
  check_tensor_elements(double(vocab) * hidden, "model.vocab x model.hidden");
  check_tensor_elements(double(hidden) * ffn(), "model.hidden x model.ffn_mult x model.hidden");
}

void ModelConfig::validate_batch(int micro_batch) const {
  const double tokens = double(micro_batch) * seq_len;
  check_tensor_elements(tokens * vocab, "data.micro_batch x model.seq_len x model.vocab");
  check_tensor_elements(tokens * ffn(), "data.micro_batch x model.seq_len x the FFN width");
  if (!fused_attention())  // fused attention holds one tile of scores, never [seq, seq]
    check_tensor_elements(double(micro_batch) * heads * seq_len * seq_len,
                          "data.micro_batch x model.heads x model.seq_len^2 (attention scores)");
}

}  // namespace ted::model
