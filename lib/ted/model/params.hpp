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

struct ParamSpec {
  std::string name;        // e.g. "block1.moe.w1"
  std::vector<int> shape;  // e.g. {E, h, f}
  ParamKind kind = ParamKind::dense;
  ParamInit init = ParamInit::normal;
  bool decay = true;       // AdamW weight decay applies (matrices), not to biases and norms
  std::size_t offset = 0;  // in the flat buffers
  std::size_t size() const;
};

template <typename T>
class ParamSet {
 public:
  int add(ParamSpec spec);  // returns the id
  // Allocates values and (zeroed) gradients and initialises the values.
  void allocate(Device& device, std::uint64_t seed, double init_std);

  T* value(int id) { return values_.data() + specs_[id].offset; }
  T* grad(int id) { return grads_.data() + specs_[id].offset; }
  const T* value(int id) const { return values_.data() + specs_[id].offset; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::size_t total() const { return total_; }
  Tensor<T>& values() { return values_; }
  Tensor<T>& grads() { return grads_; }
  const Tensor<T>& values() const { return values_; }
  void zero_grads();

 private:
  std::vector<ParamSpec> specs_;
  std::size_t total_ = 0;
  Tensor<T> values_;
  Tensor<T> grads_;
  Device* device_ = nullptr;
};

// Stable 64-bit hash of a tensor name (FNV-1a), the init key.
std::uint64_t name_key(const std::string& name);

}  // namespace ted::model
