// All parameters of a model in one flat buffer (and their gradients in another of the same
// layout), as named tensors. One flat buffer keeps the optimizer, gradient clipping and, later,
// ZeRO sharding simple loops. Initial values are a pure function of (seed, tensor name,
// element index), so a shard of a tensor on any rank can be initialised alone and equal the
// same elements of the whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/backend/tensor.hpp"

namespace ted::model {

enum class ParamKind { dense, expert };
enum class ParamInit { normal, zeros, ones };

// The part of a dimension a rank holds: segments (start, length) of the full dimension, in
// order. Empty: the whole dimension. qkv's column-parallel shard, for example, is three
// segments, one in each of the q, k and v blocks.
using DimSlice = std::vector<std::pair<int, int>>;

struct ParamSpec {
  std::string name;        // e.g. "block1.moe.w1"
  std::vector<int> shape;  // full shape, e.g. {E, h, f}
  ParamKind kind = ParamKind::dense;
  ParamInit init = ParamInit::normal;
  bool decay = true;              // AdamW weight decay applies (matrices), not to biases and norms
  std::vector<DimSlice> slice;    // this rank's shard (empty: the whole tensor)
  bool tensor_replicated = true;  // every rank of a tensor group holds the same values
  std::size_t offset = 0;         // in the flat buffers

  std::vector<int> local_shape() const;
  std::size_t size() const;  // elements held here
  // Index in the full tensor of local element i (the init key, so shards equal the whole).
  std::size_t global_index(std::size_t i) const;
};

template <typename T>
class ParamSet {
 public:
  int add(ParamSpec spec);  // returns the id
  // Lays out the flat buffers, dense tensors first then expert tensors, each part padded to a
  // multiple of its pad (the size of the data group that shards it under ZeRO-1); allocates
  // values and zeroed gradients and initialises the values.
  void allocate(Device& device, std::uint64_t seed, double init_std, std::size_t dense_pad = 1,
                std::size_t expert_pad = 1);

  T* value(int id) { return values_.data() + specs_[id].offset; }
  T* grad(int id) { return grads_.data() + specs_[id].offset; }
  const T* value(int id) const { return values_.data() + specs_[id].offset; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::size_t total() const { return total_; }
  // [offset, offset + size) of the dense part and of the expert part (padding included).
  std::pair<std::size_t, std::size_t> range(ParamKind kind) const {
    return kind == ParamKind::dense ? dense_range_ : expert_range_;
  }
  Tensor<T>& values() { return values_; }
  Tensor<T>& grads() { return grads_; }
  const Tensor<T>& values() const { return values_; }
  void zero_grads();

 private:
  std::vector<ParamSpec> specs_;
  std::size_t total_ = 0;
  std::pair<std::size_t, std::size_t> dense_range_{0, 0}, expert_range_{0, 0};
  Tensor<T> values_;
  Tensor<T> grads_;
  Device* device_ = nullptr;
};

// Stable 64-bit hash of a tensor name (FNV-1a), the init key.
std::uint64_t name_key(const std::string& name);

}  // namespace ted::model
