// The CPU backend's MoE kernels on host arrays, after the routing (kernels/cpu/gating.hpp): the
// token permutation into the experts' capacity buffer and back (dispatch, combine and their
// backwards), and the experts' FFNs over that buffer. The CUDA backend's counterparts are in
// kernels/cuda/moe.cu; the tests hold those to these.
//
// The permutation is templated on the storage type T (float, double, Half, BFloat16) and works
// in its compute type master_t<T>: rows are copied or summed there and rounded into T once.
// The experts work in the compute type only (float, double); the kernel table widens 16-bit
// operands before it calls them. A token's choices are read from a routing's arrays: choice k
// of token s is kept when slot[s * top_k + k] >= 0, and then goes to row
// expert * capacity + slot of the buffer [experts, capacity, h].
#pragma once

#include <cstdint>

#include "ted/core/dtype.hpp"
#include "ted/kernels/cpu/gating.hpp"

namespace ted::kernels::cpu {

// buffer [experts, capacity, h] (overwritten; empty slots 0) = the kept choices' token rows of
// x [tokens, h].
template <typename T>
void dispatch(const T* x, const RoutingArrays<const master_t<T>>& routing, int tokens, int experts,
              int top_k, T* buffer, int h, int capacity);
// dx [tokens, h] += the buffer rows of each token's kept choices.
template <typename T>
void dispatch_backward(const T* d_buffer, const RoutingArrays<const master_t<T>>& routing,
                       int tokens, int top_k, T* dx, int h, int capacity);

// y [tokens, h] (overwritten) = sum over a token's kept choices of weight * the expert's output
// row, summed in the compute type.
template <typename T>
void combine(const T* expert_out, const RoutingArrays<const master_t<T>>& routing, int tokens,
             int top_k, T* y, int h, int capacity);
// d_expert_out [experts, capacity, h] (overwritten; empty slots 0) = weight * dy, and d_weight
// [tokens, top_k] (overwritten; dropped choices 0) = dy . the expert's output row.
template <typename T>
void combine_backward(const T* expert_out, const T* dy,
                      const RoutingArrays<const master_t<T>>& routing, int tokens, int experts,
                      int top_k, T* d_expert_out, master_t<T>* d_weight, int h, int capacity);

// The experts' FFNs: in [sources, experts, rows, h], block b on local expert b mod experts,
// out = GeLU(in W1 + b1) W2 (no b2), keeping hidden (in W1 + b1) and act (its GeLU) for the
// backward. W1 [experts, h, f], b1 [experts, f], W2 [experts, f, h]. used_rows [blocks]: the
// rows of each block that hold tokens (the rest are empty slots: out 0, hidden and act not
// written), or null: all of them.
template <typename T>
void experts_forward(const T* in, const T* w1, const T* b1, const T* w2, T* hidden, T* act, T* out,
                     int sources, int experts, int rows, int h, int f,
                     const std::int32_t* used_rows);
// d_in (overwritten; empty slots 0); dw1, db1, dw2, db2 accumulate (+=), each local expert's
// blocks in source order; db2 gets d_out's column sums. d_hidden [sources, experts, rows, f]:
// scratch for the hidden layer's gradient.
template <typename T>
void experts_backward(const T* in, const T* w1, const T* w2, const T* hidden, const T* act,
                      const T* d_out, T* d_in, T* d_hidden, T* dw1, T* db1, T* dw2, T* db2,
                      int sources, int experts, int rows, int h, int f,
                      const std::int32_t* used_rows);

}  // namespace ted::kernels::cpu
