// Causal self-attention, materialised (the fused one is flash_attention.hpp).
// CPU reference kernels in linear.hpp's conventions (float and double; rows are tokens;
// backward functions accumulate).
#pragma once

#include <cstdint>

#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

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

}  // namespace ted::kernels::cpu
