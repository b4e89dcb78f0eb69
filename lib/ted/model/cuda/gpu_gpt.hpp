// The MoE GPT of model/gpt.hpp on one GPU, in mixed precision: activations and the weight
// copies the GEMMs read are T (float, Half or BFloat16); master weights, their gradients and
// everything the optimizer touches are fp32. Built from kernels/cuda/ops.hpp only, so it
// compiles as plain C++; built where CUDA is (TED_HAVE_CUDA).
//
// One forward is one micro-batch and one gating group, keyed like the CPU model (seed, step,
// layer, global token), so routing makes the CPU's choices given the same logits. The initial
// parameters are the CPU reference's (same names, seed and init), copied over.
// Not here (the CPU model has them): activation checkpointing and the TED split over ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ted/backend/tensor.hpp"
#include "ted/kernels/cuda/ops.hpp"
#include "ted/model/config.hpp"

namespace ted::model::cuda {

namespace kc = ted::kernels::cuda;

// Device pointers of one block's parameters: matrices as T copies, vectors as fp32 masters.
template <typename T>
struct BlockWeights {
  const float *ln1_g, *ln1_b, *qkv_b, *proj_b, *ln2_g, *ln2_b;
  const T *qkv_w, *proj_w;
  const T *fc1_w = nullptr, *fc2_w = nullptr;  // dense FFN
  const float *fc1_b = nullptr, *fc2_b = nullptr;
  const T *gate_w = nullptr, *w1 = nullptr, *w2 = nullptr;  // MoE FFN
  const float *b1 = nullptr, *b2 = nullptr;
};
struct BlockGrads {  // fp32, accumulated
  float *ln1_g, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_g, *ln2_b;
  float *fc1_w = nullptr, *fc1_b = nullptr, *fc2_w = nullptr, *fc2_b = nullptr;
  float *gate_w = nullptr, *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr;
};

struct BlockShape {
  int sequences, seq, hidden, heads, ffn;
  bool moe;
  GateConfig gate;
};

// One pre-LN transformer block (attention, then a dense or MoE FFN) forward and backward on
// the GPU; keeps its activations between the two.
template <typename T>
class GpuBlock {
 public:
  GpuBlock(kc::Context& ctx, const BlockShape& shape);
  void forward(const T* x, T* out, const BlockWeights<T>& w, const RoutingKey& key);
  // d_in overwritten; gradients accumulate. aux_scale = aux_coeff x loss scale.
  void backward(const T* x, const T* d_out, T* d_in, const BlockWeights<T>& w, const BlockGrads& g,
                float aux_scale);
  const kc::DeviceRouting& routing() const { return routing_; }
  // GEMM FLOPs of the last forward (backward is twice this), counted as the CPU model does.
  double forward_flops() const;

 private:
  template <typename U>
  Tensor<U> make(std::size_t n) {
    return Tensor<U>(ctx_.device(), n);
  }
  kc::Context& ctx_;
  BlockShape shape_;
  int tokens_;
  Tensor<T> ln1_, qkv_, probs_, att_, mid_, ln2_, fc1_, act_, dispatched_, hidden_, expert_out_;
  Tensor<float> mean1_, rstd1_, mean2_, rstd2_, logits_, d_weight_;
  kc::DeviceRouting routing_;
  // backward scratch
  Tensor<T> d_mid_, d_ln2_, d_act_, d_att_, d_qkv_, d_ln1_, scratch_, d_expert_out_, d_dispatched_,
      d_logits_;
};

template <typename T>
struct GpuLosses {
  float lm = 0, aux = 0;
  int dropped = 0;
};

template <typename T>
class GpuGpt {
 public:
  // Throws ConfigError for what the GPU model does not do (model.checkpoint).
  GpuGpt(kc::Context& ctx, const ModelConfig& config);
  ~GpuGpt();

  // tokens and targets on the host, sequences x seq_len each.
  GpuLosses<T> forward(const std::int32_t* tokens, const std::int32_t* targets, int sequences,
                       std::int64_t first_sample, std::int64_t step);
  void backward(float loss_scale);
  double last_forward_flops() const { return flops_; }

  struct Tensor1 {  // one parameter tensor in the flat buffers
    std::string name;
    std::size_t offset, size;
    bool decay;
  };
  const std::vector<Tensor1>& tensors() const { return tensors_; }
  std::size_t parameter_count() const { return total_; }
  float* master() { return master_.data(); }
  T* copy() { return copy_.data(); }
  float* grads() { return grads_.data(); }
  void zero_grads();
  // The sum of squares of the fp32 master weights (the CPU Trainer's fingerprint, one process).
  double fingerprint();

 private:
  std::size_t offset_of(const std::string& name) const;
  BlockWeights<T> weights(int layer) const;
  BlockGrads grads_of(int layer);

  kc::Context& ctx_;
  ModelConfig config_;
  std::vector<Tensor1> tensors_;
  std::size_t total_ = 0;
  Tensor<float> master_, grads_;
  Tensor<T> copy_;
  std::vector<BlockWeights<T>> block_weights_;
  std::vector<BlockGrads> block_grads_;
  std::vector<std::unique_ptr<GpuBlock<T>>> blocks_;
  int sequences_ = 0, tokens_ = 0;
  double flops_ = 0;
  Tensor<std::int32_t> tokens_dev_, targets_dev_;
  std::vector<Tensor<T>> xs_;  // block inputs, then the final LayerNorm's input
  Tensor<T> lnf_, logits_, d_logits_, d_a_, d_b_, d_lnf_;
  Tensor<float> lnf_mean_, lnf_rstd_, row_loss_;
};

}  // namespace ted::model::cuda
