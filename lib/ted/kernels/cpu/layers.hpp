// The CPU reference kernels of the GPT model, forward and backward, for float and double
// (double for the gradient checks). Rows are tokens; weights are [in, out] so y = x W + b.
// Backward functions accumulate (+=) into parameter gradients and, where named d_in, into the
// input gradient too, so residual branches add up without extra buffers.
#pragma once

#include <cstdint>

#include "ted/kernels/elementwise.hpp"

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

// Dropout (kernels/elementwise.hpp): y[r, j] = x[r, j] * the mask of (row r, feature j), the
// rows being tokens key.first_token + r; y may be x. Its own backward (the same mask).
template <typename T>
void dropout(const T* x, T* y, int rows, int width, const DropoutKey& key);
// y = residual + dropout(y + bias), bias [width] or null: a sub-layer's output, its dropout and
// the skip connection (Megatron's bias-dropout-add). Without dropout: (y + bias) + residual.
template <typename T>
void bias_dropout_residual(T* y, const T* bias, const T* residual, int rows, int width,
                           const DropoutKey& key);

// Causal multi-head self-attention core on qkv [batch*seq, 3h] (columns: all heads' q, then k,
// then v; head j uses columns j*d .. j*d+d-1 of each). Writes out [batch*seq, h] (heads
// side by side) and the softmax probabilities probs [batch, heads, seq, seq]. With `dropout`
// active, out = dropout(probs) v, probs kept undropped (the backward draws the mask again): row
// (b, i) is token first_token + b * seq + i, the feature of key j of head `head` is
// (first_head + head) * seq + j.
template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int batch, int seq, int heads, int h,
                       const DropoutKey& dropout = {});
// d_qkv is overwritten.
template <typename T>
void attention_backward(const T* qkv, const T* probs, const T* d_out, T* d_qkv, int batch, int seq,
                        int heads, int h, const DropoutKey& dropout = {});

// Mean cross-entropy of logits [n, vocab] against targets; keeps each row's log-sum-exp
// (log_sum [n]) for the backward.
template <typename T>
T cross_entropy_loss(const T* logits, const std::int32_t* targets, T* log_sum, int n, int vocab);
// d_logits = ((softmax - onehot) / n) * scale from the forward's log_sum; d_logits may alias
// logits. Vocabulary-parallel: logits [n, cols] hold the words first_word .. first_word +
// words - 1 in their first `words` columns (words <= cols; -1: all cols), the rest padding,
// whose gradient is 0; a target outside the slice has no one-hot term here.
template <typename T>
void cross_entropy_backward(const T* logits, const std::int32_t* targets, const T* log_sum,
                            T* d_logits, int n, int vocab, T scale, int first_word = 0,
                            int words = -1);

// The vocabulary-parallel cross-entropy's steps (Megatron's), around the tensor group's
// all-reduces: row_max [n] = each row's max over its `words` valid columns (-inf where none:
// all-reduced with max); partials [2n] = each row's sum of exp(logit - row_max) over them, then
// its target's logit where the target is in the slice, else 0 (all-reduced with sum); finish:
// log_sum = row_max + log(sum), and the mean of log_sum - target logit. Over one slice of the
// whole vocabulary these are cross_entropy_loss, bit for bit.
template <typename T>
void cross_entropy_max(const T* logits, T* row_max, int n, int cols, int words);
template <typename T>
void cross_entropy_partials(const T* logits, const std::int32_t* targets, const T* row_max,
                            T* partials, int n, int cols, int first_word, int words);
template <typename T>
T cross_entropy_finish(const T* row_max, const T* partials, T* log_sum, int n);

// x[i] = tok[tokens[i] - first_word] + pos[i mod seq]; backward accumulates into both tables.
// Vocabulary-parallel: tok holds the rows first_word .. first_word + words - 1 (words -1: every
// token is in it); a token outside gives a zero row, and no gradient here. pos may be null
// (nothing added; dpos null: no gradient).
template <typename T>
void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x, int n, int seq,
                       int h, int first_word = 0, int words = -1);
template <typename T>
void embedding_backward(const std::int32_t* tokens, const T* dx, T* dtok, T* dpos, int n, int seq,
                        int h, int first_word = 0, int words = -1);

// The output layer on the (tied) embedding table, table [rows, h] as the embedding keeps it:
// logits [n, rows] = x table^T; backward: dx += d_logits table (if dx), d_table += d_logits^T x.
template <typename T>
void lm_head_forward(const T* x, const T* table, T* logits, int n, int h, int rows);
template <typename T>
void lm_head_backward(const T* x, const T* table, const T* d_logits, T* dx, T* d_table, int n,
                      int h, int rows);

}  // namespace ted::kernels::cpu
