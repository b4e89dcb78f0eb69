// The MoE GPT, forward and backward written out (docs/algorithm.md section 1): token + position
// embedding, pre-LN blocks (causal multi-head attention, then a dense GeLU FFN or, every
// expert_interval-th block, an MoE FFN), final LayerNorm, LM head, cross-entropy.
// Loss = LM loss + aux_coeff * sum over MoE layers of the aux loss. As Megatron's GPT
// (model.tie_embeddings): the token embedding split over the tensor group by vocabulary and
// tied to the LM head, the cross-entropy vocabulary-parallel; dropout (model.dropout) on the
// attention probabilities and on each sub-layer's output, its masks counter-based.
//
// One model for every backend and precision: it runs on the device it is given through that
// backend's kernel table (backend/ops.hpp) and never touches a buffer element. T is the storage
// type of activations and weight copies: float (the reference), double (the gradient checks),
// BFloat16 or Half (mixed precision: gradients in the master type, fp32, or with
// grad_dtype = the storage type 16-bit, each kernel's contribution rounded in once). Split over a
// TED grid (ModelParallel) it runs Megatron tensor parallelism and the MoE exchange. With
// checkpointing a block keeps only its input and recomputes the rest in backward, through the same
// code, so results are bit-identical.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ted/backend/ops.hpp"
#include "ted/device/tensor.hpp"
#include "ted/model/config.hpp"
#include "ted/model/moe.hpp"
#include "ted/model/params.hpp"

namespace ted::model {

// One micro-batch: `sequences` rows of seq_len tokens and their targets, in host memory (the
// model copies them to its device).
struct Batch {
  const std::int32_t* tokens = nullptr;
  const std::int32_t* targets = nullptr;
  int sequences = 0;
  std::int64_t first_sample = 0;  // global index of the first sequence (keys the RNG)
  std::int64_t step = 0;          // optimizer step (keys the RNG)
  // Capacity is computed per gating group of this many sequences (0: the whole batch). A batch
  // of m micro-batches with gate_group_sequences = micro-batch size equals accumulating them.
  int gate_group_sequences = 0;
};

struct Losses {
  double lm = 0;
  double aux = 0;   // sum over MoE layers of the layer's aux (mean over its gating groups)
  int dropped = 0;  // choices dropped by capacity, all MoE layers
  // Per MoE layer in order, [experts]: the choices routed to each expert, before drops.
  std::vector<std::vector<std::int64_t>> expert_load;
};

// How a model is split over a TED grid (docs/algorithm.md section 3). Default: one process, the
// reference. The communicators carry device buffers.
struct ModelParallel {
  // The groups and the exchange's switches (exchange.hpp): `tensor` for Megatron tensor
  // parallelism and the experts' (size T; null: T = 1), `expert` for the all-to-alls (size Ep;
  // null: Ep = 1), the expert group's host MPI communicator `expert_control` (TedGroups::control:
  // the dropless capacity is agreed over it, outside the ledger; needed with `expert` and
  // gating.dropless); DTD, reduce-scatter (needs dtd), the overlap's chunks, and whether the
  // experts are tensor-parallel over T (TED; else whole experts, each tensor rank running its 1/T
  // share of the capacity, their gradients then reduced over the T x D ranks that hold them:
  // TedGroups::expert_replicas). The model sets the CAC stash's use per step.
  ExchangeSetup exchange;
  bool cac = false;             // communication-aware checkpointing (needs checkpointing)
  bool cac_all_reduce = false;  // CAC also keeps the tensor all-reduce outputs (needs cac)
  std::size_t dense_pad = 1;    // flat-buffer padding: the data groups' sizes (ZeRO-1)
  std::size_t expert_pad = 1;
};

// ConfigError when the model does not split over T tensor and Ep expert ranks, or the
// switches need each other (reduce-scatter needs dtd, cac needs checkpointing, ...): what the
// model checks when it is built, and --check before anything runs.
void check_layout(const ModelConfig& config, int tensor, int expert,
                  const ExchangeSwitches& exchange, bool cac, bool cac_all_reduce);

// Throws Error when a token or target id of the `count` given lies outside [0, vocab).
void check_token_ids(const std::int32_t* tokens, const std::int32_t* targets, int count, int vocab);

template <typename T>
class GptModel {
 public:
  using M = master_t<T>;
  // Throws ConfigError when the model does not split over the groups (experts not divisible by
  // Ep, heads or FFN width not divisible by T), the switches contradict each other, or the
  // device's backend has no kernels for T.
  GptModel(const ModelConfig& config, Device& device, const ModelParallel& parallel = {});

  const ModelConfig& config() const { return config_; }
  ParamSet<T>& params() { return params_; }
  const ParamSet<T>& params() const { return params_; }
  Ops<T>& ops() { return *ops_; }

  // Runs the forward pass and keeps what backward needs.
  Losses forward(const Batch& batch);
  // Accumulates the gradients of loss_scale * (lm + aux_coeff * aux) of the last forward.
  void backward(M loss_scale);
  // Training (the default) drops with model.dropout; evaluation drops nothing, as a model in
  // PyTorch's eval mode.
  void set_training(bool training) { dropout_ = training ? config_.dropout : 0.0; }

  // GEMM FLOPs of the last forward (backward is twice this; recompute adds a forward).
  double last_forward_flops() const { return last_forward_flops_; }
  // The attention that runs (model.attention resolved on this backend for this shape):
  // "cudnn" (cuDNN's fused attention), "flash" (the suite's FlashAttention-2) or
  // "materialized". For CSV rows and benchmark lines.
  const std::string& attention() const { return attention_; }
  // The most bytes the model has held at once, since it was built, of what it keeps for
  // backward: the batch's ids, the block checkpoints, the block internals it keeps (every
  // block's, or the one just recomputed), the final LayerNorm's input, output and statistics,
  // the logits and their log-sum-exp; not the gradients of activations, the forward's
  // temporaries or the CAC stash. What autograd's saved tensors are to PyTorch, so it compares
  // with DeepSpeed's count of them (baselines/deepspeed/memory_count.py); its own tensors
  // counted at the points where they are largest: the end of forward, each block's recompute.
  std::size_t saved_peak_bytes() const { return saved_peak_; }

 private:
  struct BlockIds {
    int ln1_g, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_g, ln2_b;
    int fc1_w = -1, fc1_b = -1, fc2_w = -1, fc2_b = -1;           // dense FFN
    int gate_w = -1, e_w1 = -1, e_b1 = -1, e_w2 = -1, e_b2 = -1;  // MoE FFN
    bool moe = false;
  };
  struct BlockActs {
    Tensor<T> input;                           // the checkpoint: always kept
    Tensor<T> ln1, qkv, probs, att, mid, ln2;  // probs: materialised attention only
    Tensor<M> ln1_mean, ln1_rstd, ln2_mean, ln2_rstd;
    Tensor<M> lse;  // fused attention: each row's log-sum-exp [B, heads, S]
    Tensor<T> fc1, act;
    Tensor<T> proj_stash, ffn_stash;  // CAC: the tensor all-reduce outputs, for the recompute
    std::vector<MoeActivations<T>> moe;
    M aux = 0;
    int dropped = 0;
    std::vector<std::int64_t> load;  // [experts], this forward's groups (MoE blocks)
  };

  void resolve_attention();
  // The dropout of `site` (kernels/elementwise.hpp) in block `layer` for the current batch.
  kernels::DropoutKey dropout_key(int layer, std::int64_t site) const;
  // The tied LM head and the vocabulary-parallel cross-entropy (forward), the LM loss.
  double tied_head_forward();
  // A block's sizes on this rank for the current batch: N tokens, h hidden, S sequence, B
  // sequences, hl = h/T, Hl = heads/T, fl = f/T, Nh = N h.
  struct Dims {
    int N, h, S, B, hl, Hl, fl;
    std::size_t Nh;
  };
  Dims dims() const;
  MoeShape moe_shape() const;  // one gating group's
  // A block's steps, forward: the attention half (a.mid), then the dense FFN or the MoE layer,
  // each with its output's dropout and the skip; backward in reverse.
  void block_forward(int layer, const T* x, T* out, BlockActs& acts, bool recompute);
  double attention_forward(int layer, const T* x, BlockActs& acts, bool recompute);
  double dense_ffn_forward(int layer, T* out, BlockActs& acts, bool recompute);
  void moe_block_forward(int layer, T* out, BlockActs& acts, bool recompute, double& flops);
  void block_backward(int layer, const T* d_out, T* d_in, BlockActs& acts);
  Tensor<T> ffn_backward(int layer, const T* d_out, BlockActs& acts);
  void moe_block_backward(int layer, const T* d_ffn, T* d_ln2, BlockActs& acts);
  void attention_backward(int layer, const T* d_mid, T* d_in, BlockActs& acts);
  // A row-parallel layer's output (weights and bias by parameter id) with its dropout and skip.
  void row_parallel_output(const T* in, int w, int b, const T* residual, T* out, int k,
                           Tensor<T>& stash, bool recompute, const kernels::DropoutKey& key);
  void release_internals(BlockActs& acts);
  std::size_t saved_bytes() const;  // what the model keeps for backward now (saved_peak_bytes)
  void note_saved() { saved_peak_ = std::max(saved_peak_, saved_bytes()); }
  MoeParams<T> moe_params(const BlockIds& ids) const;
  ExchangeSetup exchange_setup(bool recompute) const;
  void tensor_all_reduce(T* data, std::size_t count);
  // A row-parallel layer's output summed over the tensor group; under CAC with all-reduce
  // stashing the forward keeps it and the recompute takes it instead of computing and reducing.
  template <typename Partial>
  void reduced_output(T* out, std::size_t count, Tensor<T>& stash, bool recompute,
                      Partial&& partial);

  ModelConfig config_;
  Device& device_;
  std::unique_ptr<Ops<T>> ops_;
  ModelParallel parallel_;
  int T_ = 1, t_ = 0, Ep_ = 1, e_ = 0;
  bool fused_attention_ = true;
  double dropout_ = 0;  // model.dropout while training, 0 in evaluation (set_training)
  std::string attention_;
  ParamSet<T> params_;
  int tok_emb_, pos_emb_, lnf_g_, lnf_b_, lm_head_ = -1;  // lm_head_: untied only
  // The vocabulary this rank's table and logits hold: vocab_rows_ rows (columns of the logits),
  // the words first_word_ .. first_word_ + words_ - 1, the rest padding. Untied: all of it.
  bool tied_ = false;
  int vocab_rows_ = 0, first_word_ = 0, words_ = 0;
  std::vector<BlockIds> blocks_;

  // State of the last forward.
  Batch batch_;
  int tokens_ = 0;
  int group_sequences_ = 0;
  Tensor<std::int32_t> token_ids_, target_ids_;  // the batch on the device
  std::vector<BlockActs> acts_;
  Tensor<T> final_input_, lnf_, logits_;     // logits_ becomes their gradient in backward
  Tensor<M> lnf_mean_, lnf_rstd_, log_sum_;  // log_sum_: each row's log-sum-exp of the logits
  double last_forward_flops_ = 0;
  M loss_scale_ = 1;
  std::size_t saved_peak_ = 0;
};

}  // namespace ted::model
