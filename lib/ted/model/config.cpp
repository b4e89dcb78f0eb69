#include "ted/model/config.hpp"

#include <string>

#include "ted/core/error.hpp"

namespace ted::model {

namespace {
void at_least(long long value, long long minimum, const char* key) {
  if (value < minimum)
    throw ConfigError(std::string(key) + " must be at least " + std::to_string(minimum) + ", got " +
                      std::to_string(value));
}
}  // namespace

void ModelConfig::validate() const {
  at_least(vocab, 2, "model.vocab");
  at_least(seq_len, 1, "model.seq_len");
  at_least(hidden, 1, "model.hidden");
  at_least(heads, 1, "model.heads");
  at_least(layers, 1, "model.layers");
  at_least(ffn_mult, 1, "model.ffn_mult");
  at_least(expert_interval, 1, "model.expert_interval");
  at_least(gate.experts, 1, "model.experts");
  if (hidden % heads != 0)
    throw ConfigError("model.heads (" + std::to_string(heads) + ") must divide model.hidden (" +
                      std::to_string(hidden) + ")");
  if (gate.top_k != 1 && gate.top_k != 2)
    throw ConfigError("gating.top_k must be 1 or 2, got " + std::to_string(gate.top_k));
  if (gate.top_k > gate.experts)
    throw ConfigError("gating.top_k (" + std::to_string(gate.top_k) +
                      ") must not exceed model.experts (" + std::to_string(gate.experts) + ")");
  if (!(gate.capacity_factor > 0))
    throw ConfigError("gating.capacity_factor must be positive, got " +
                      std::to_string(gate.capacity_factor));
  at_least(gate.min_capacity, 0, "gating.min_capacity");
  if (gate.aux_coeff < 0)
    throw ConfigError("gating.aux_coeff must not be negative, got " +
                      std::to_string(gate.aux_coeff));
  if (!(init_std > 0)) throw ConfigError("model.init_std must be positive");
}

}  // namespace ted::model
