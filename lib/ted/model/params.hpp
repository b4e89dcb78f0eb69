// All parameters of a model in one flat buffer (and their gradients in another of the same
// layout), as named tensors. One flat buffer keeps the optimizer, gradient clipping and ZeRO
// sharding simple loops over ranges. Initial values are a pure function of (seed, tensor name,
// element index in the whole tensor), so a shard of a tensor on any rank can be initialised
// alone and equal the same elements of the whole.
//
// Precision: the values are T, what the kernels read (fp32, fp64, or the bf16/fp16 copy of
// mixed precision, whose fp32 master the optimizer keeps). The gradients are the master type
// (fp32, or fp64 for fp64), or with 16-bit gradients (training.grad_dtype = the storage type,
// DeepSpeed's 16-bit ZeRO-1) T: then each kernel call adds its contribution, summed in the master
// type, into the 16-bit buffer, rounded once (gradient(id), core/grad_out.hpp), as autograd adds
// each op's weight gradient into a 16-bit `.grad` (the embedding's scatter-add a table row's
// tokens at a time). No fp32 copy of any gradient is kept.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ted/backend/ops.hpp"
#include "ted/core/slice_map.hpp"
#include "ted/device/tensor.hpp"

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
  // Local elements from this one on are padding, 0 from the start and kept 0 (their gradient is
  // 0): the tied embedding's rows past the vocabulary, padded to a multiple of T.
  std::size_t padding_from = static_cast<std::size_t>(-1);

  std::vector<int> local_shape() const;
  std::size_t size() const;  // elements held here
  SliceMap slice_map() const;
  // Index in the full tensor of local element i (the init key, so shards equal the whole).
  std::size_t global_index(std::size_t i) const { return model::global_index(slice_map(), i); }
};

// Where every tensor sits in the flat buffers: dense tensors first, then expert tensors, each
// part padded to a multiple of its pad (the size of the data group that shards it under ZeRO-1).
class ParamLayout {
 public:
  int add(ParamSpec spec);  // returns the id
  void lay_out(std::size_t dense_pad, std::size_t expert_pad);
  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::size_t total() const { return total_; }
  // [offset, size) of the dense part and of the expert part (padding included).
  std::pair<std::size_t, std::size_t> range(ParamKind kind) const {
    return kind == ParamKind::dense ? dense_range_ : expert_range_;
  }

 private:
  std::vector<ParamSpec> specs_;
  std::size_t total_ = 0;
  std::pair<std::size_t, std::size_t> dense_range_{0, 0}, expert_range_{0, 0};
  bool laid_out_ = false;
};

template <typename T>
class ParamSet {
 public:
  using M = master_t<T>;
  int add(ParamSpec spec) { return layout_.add(std::move(spec)); }
  // Lays out the flat buffers, allocates values and zeroed gradients (of the type
  // gradient_type(T, grad_dtype) decides, model/config.hpp: M, or T with 16-bit gradients) on
  // the ops' device and initialises the values there (padding stays 0).
  void allocate(Ops<T>& ops, std::uint64_t seed, double init_std, std::size_t dense_pad = 1,
                std::size_t expert_pad = 1, DataType grad_dtype = DataType::f32);

  T* value(int id) { return values_.data() + layout_.specs()[id].offset; }
  const T* value(int id) const { return values_.data() + layout_.specs()[id].offset; }
  // Where a kernel adds tensor id's gradient: the gradient buffer, of the master type or with
  // 16-bit gradients of T (each call's contribution rounded into it once).
  GradOut<T> gradient(int id);
  bool storage_gradients() const { return storage_gradients_; }
  // The flat gradient buffer and its element type (M, or T with 16-bit gradients).
  void* gradient_data() {
    return storage_gradients_ ? static_cast<void*>(low_grads_.data())
                              : static_cast<void*>(grads_.data());
  }
  DataType gradient_type() const {
    return storage_gradients_ ? dtype_of<T>::value : dtype_of<M>::value;
  }
  const ParamLayout& layout() const { return layout_; }
  const std::vector<ParamSpec>& specs() const { return layout_.specs(); }
  std::size_t total() const { return layout_.total(); }
  std::pair<std::size_t, std::size_t> range(ParamKind kind) const { return layout_.range(kind); }
  Tensor<T>& values() { return values_; }
  const Tensor<T>& values() const { return values_; }
  // The gradients in the master type (empty with 16-bit gradients).
  Tensor<M>& grads() { return grads_; }
  const Tensor<M>& grads() const { return grads_; }
  void zero_grads();

 private:
  ParamLayout layout_;
  Tensor<T> values_;
  Tensor<M> grads_;
  Tensor<T> low_grads_;  // 16-bit gradients
  bool storage_gradients_ = false;
  Device* device_ = nullptr;
};

// Stable 64-bit hash of a tensor name (FNV-1a), the init key.
std::uint64_t name_key(const std::string& name);

}  // namespace ted::model
