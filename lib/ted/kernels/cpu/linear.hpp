// The dense layers' GEMMs: y = x W + b and its backward. The CPU reference kernels (this file,
// layernorm, elementwise, attention, vocabulary), forward and backward, for float and double
// (double for the gradient checks). Rows are tokens; weights are [in, out] so y = x W + b. Backward
// functions accumulate (+=) into parameter gradients and, where named d_in, into the input gradient
// too, so residual branches add up without extra buffers.
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

}  // namespace ted::kernels::cpu
