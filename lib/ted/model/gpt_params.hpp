// The GPT's parameters, written once: every tensor's name, full shape, kind (dense or expert),
// initialisation, weight decay and this rank's shard under a layout. The model allocates what
// gpt_param_specs gives (gpt.cpp); the projection sums the same specs (projection/step.cpp), so
// the parameter counts and the ZeRO-1 shards cannot drift apart.
// A new parameter is one line here, and its use in gpt.cpp.
//
// Shards (Megatron tensor parallelism, docs/algorithm.md section 3): column-parallel tensors
// (qkv, fc1, the experts' w1) keep columns t of T, row-parallel ones (proj, fc2, the experts'
// w2) rows t of T; expert tensors keep experts e of Ep (and, with unsplit experts, their whole
// FFN width); everything else is whole on every rank.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ted/model/config.hpp"
#include "ted/model/params.hpp"

namespace ted::model {

// Where one rank sits in the layout, as the parameters see it.
struct ParamShard {
  int tensor_ranks = 1, tensor_rank = 0;
  int expert_ranks = 1, expert_rank = 0;
  bool split_experts = true;  // experts tensor-parallel (parallel.split_experts)
};

struct GptParamSpecs {
  std::vector<ParamSpec> specs;     // in id order: ParamSet::add returns these positions
  using Ids = std::pair<int, int>;  // ids [first, end)

  // The id of the tensor `name`; Error when there is none.
  int id(const std::string& name) const;
  // Elements held on this rank by the tensors of `ids`, per kind (unpadded).
  std::pair<std::size_t, std::size_t> elements(Ids ids) const;  // {dense, expert}
};

GptParamSpecs gpt_param_specs(const ModelConfig& config, const ParamShard& shard);

}  // namespace ted::model
