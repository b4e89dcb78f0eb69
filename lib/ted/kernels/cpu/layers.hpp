// The CPU reference kernels of the GPT model, forward and backward, for float and double
// (double for the gradient checks). Rows are tokens; weights are [in, out] so y = x W + b.
// Backward functions accumulate (+=) into parameter gradients and, where named d_in, into the
// input gradient too, so residual branches add up without extra buffers.
#pragma once

#include <cstdint>

namespace ted::kernels::cpu {

// y = x W + b; x [n, in], W [in, out], b [out] (may be null).
template <typename T>
void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out);
// dx += dy W^T (if dx), dW += x^T dy, db += sum_rows dy (if db).
template <typename T>
void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int n, int in,
                     int out);

// LayerNorm over the last dimension h, eps 1e-5; saves mean and 1/std per row.
template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int n,
                       int h);
template <typename T>
void layernorm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
                        T* dx, T* dgamma, T* dbeta, int n, int h);

template <typename T>
void gelu_forward(const T* x, T* y, std::int64_t count);
// dx = dy * gelu'(x) (overwrites dx; may alias dy).
template <typename T>
void gelu_backward(const T* x, const T* dy, T* dx, std::int64_t count);

// sums[j] += sum over rows of y[i, j] (a bias gradient).
template <typename T>
void add_column_sums(const T* y, T* sums, int rows, int width);

// Fused element-wise passes, one sweep over the rows each:
// hidden [rows, width] += bias, and act = gelu(hidden) (the FFN's first layer after its GEMM).
template <typename T>
void bias_gelu_forward(T* hidden, const T* bias, T* act, int rows, int width);
// d = d * gelu'(hidden) in place, and db += its column sums (if db).
template <typename T>
void gelu_bias_backward(const T* hidden, T* d, T* db, int rows, int width);
// y = (y + bias) + residual, row by row: a row-parallel layer's output, its bias and the skip.
template <typename T>
void add_bias_residual(T* y, const T* bias, const T* residual, int rows, int width);

// Causal multi-head self-attention core on qkv [batch*seq, 3h] (columns: all heads' q, then k,
// then v; head j uses columns j*d .. j*d+d-1 of each). Writes out [batch*seq, h] (heads
// side by side) and the softmax probabilities probs [batch, heads, seq, seq].
template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int batch, int seq, int heads, int h);
// d_qkv is overwritten.
template <typename T>
void attention_backward(const T* qkv, const T* probs, const T* d_out, T* d_qkv, int batch, int seq,
                        int heads, int h);

// Mean cross-entropy of logits [n, vocab] against targets; keeps each row's log-sum-exp
// (log_sum [n]) for the backward.
template <typename T>
T cross_entropy_loss(const T* logits, const std::int32_t* targets, T* log_sum, int n, int vocab);
// d_logits = ((softmax - onehot) / n) * scale from the forward's log_sum; d_logits may alias
// logits.
template <typename T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, const T* log_sum,
                            T* d_logits, int n, int vocab, T scale);

// x[i] = tok[tokens[i]] + pos[i mod seq]; backward accumulates into both tables.
template <typename T>
void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x, int n, int seq,
                       int h);
template <typename T>
void embedding_backward(const std::int32_t* tokens, const T* dx, T* dtok, T* dpos, int n, int seq,
                        int h);

}  // namespace ted::kernels::cpu
