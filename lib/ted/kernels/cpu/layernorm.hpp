// LayerNorm over a row, forward and backward.
// CPU reference kernels in linear.hpp's conventions (float and double; rows are tokens;
// backward functions accumulate).
#pragma once

#include <cstdint>

namespace ted::kernels::cpu {

// LayerNorm over the last dimension h, eps 1e-5; saves mean and 1/std per row.
template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int n,
                       int h);
template <typename T>
void layernorm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
                        T* dx, T* dgamma, T* dbeta, int n, int h);

}  // namespace ted::kernels::cpu
