// The element-wise passes: GeLU, the bias and its gradient, dropout and the residual adds.
// CPU reference kernels in linear.hpp's conventions (float and double; rows are tokens;
// backward functions accumulate).
#pragma once

#include <cstdint>

#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

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

}  // namespace ted::kernels::cpu
