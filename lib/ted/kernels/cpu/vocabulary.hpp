// The vocabulary's kernels: the embedding, the output layer on its table (LM head) and the
// (vocabulary-parallel) cross-entropy.
// CPU reference kernels in linear.hpp's conventions (float and double; rows are tokens;
// backward functions accumulate).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ted/core/grad_out.hpp"

namespace ted::kernels::cpu {

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
// (nothing added; dpos null: no gradient). The one embedding of the CPU backend: T is any storage
// type (float, double, Half, BFloat16), added in its master type and rounded once. The gradients
// are GradOut's (a master-type pointer converts): into the master type, each column summed in row
// order; or into the 16-bit table, each word's (position's) rows summed in row order and added in
// once.
template <typename T>
void embedding_forward(const std::int32_t* tokens, const T* tok, const T* pos, T* x, int n, int seq,
                       int h, int first_word = 0, int words = -1);
template <typename T>
void embedding_backward(const std::int32_t* tokens, const T* dx,
                        std::type_identity_t<GradOut<T>> dtok,
                        std::type_identity_t<GradOut<T>> dpos, int n, int seq, int h,
                        int first_word = 0, int words = -1);

// The output layer on the (tied) embedding table, table [rows, h] as the embedding keeps it:
// logits [n, rows] = x table^T; backward: dx += d_logits table (if dx), d_table += d_logits^T x.
template <typename T>
void lm_head_forward(const T* x, const T* table, T* logits, int n, int h, int rows);
template <typename T>
void lm_head_backward(const T* x, const T* table, const T* d_logits, T* dx, T* d_table, int n,
                      int h, int rows);

}  // namespace ted::kernels::cpu
