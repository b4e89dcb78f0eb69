// The dense layers' GEMMs on the GPU (linear, its GeLU and residual, the gate's logits, a
// weight gradient's GEMM), their bias, residual and GeLU in the epilogue (gemm.cu). The same
// shapes and conventions as kernels/cpu/linear.cpp (backend/ops.hpp).
#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {

// A weight gradient's GEMM, C += A B: into the fp32 gradient, or into the 16-bit one, cuBLAS
// accumulating in fp32 and rounding once on store (beta = 1).
template <typename T>
void weight_gemm(Context& ctx, bool ta, bool tb, int m, int n, int k, const T* a, int lda,
                 const T* b, int ldb, GradOut<T> c, int ldc) {
  if (c.low)
    gemm<T>(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c.low, ldc);
  else
    gemm_f32_out<T>(ctx, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 1.0f, c.master, ldc);
}

// The dense layers' GEMMs carry their bias, residual and GeLU in the epilogue (gemm_fused).
template <typename T>
void linear_forward(Context& ctx, const T* x, const T* w, const T* b, T* y, int n, int in,
                    int out) {
  if (n == 0) return;
  if (!b) {
    gemm<T>(ctx, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, y, out);
    return;
  }
  GemmEpilogue<T> e;
  e.kind = Epilogue::bias;
  e.bias = b;
  gemm_fused<T>(ctx, false, false, n, out, in, x, in, 0, w, out, 0, y, out, 0, 1, e);
}

template <typename T>
void linear_residual_forward(Context& ctx, const T* x, const T* w, const T* b, const T* residual,
                             T* y, int n, int in, int out) {
  if (n == 0) return;
  GemmEpilogue<T> e;
  e.kind = b ? Epilogue::bias : Epilogue::none;
  e.bias = b;
  e.residual = residual;
  gemm_fused<T>(ctx, false, false, n, out, in, x, in, 0, w, out, 0, y, out, 0, 1, e);
}

template <typename T>
void linear_gelu_forward(Context& ctx, const T* x, const T* w, const T* b, T* hidden, T* act, int n,
                         int in, int out) {
  if (n == 0) return;
  GemmEpilogue<T> e;
  e.kind = Epilogue::gelu_aux_bias;
  e.bias = b;
  e.aux = hidden;
  e.ld_aux = out;
  gemm_fused<T>(ctx, false, false, n, out, in, x, in, 0, w, out, 0, act, out, 0, 1, e);
}

template <typename T>
void linear_dgelu_backward(Context& ctx, const T* dy, const T* w, const T* hidden, T* d_hidden,
                           GradOut<T> db, int n, int in, int out) {
  if (n == 0) return;
  GemmEpilogue<T> e;
  e.kind = Epilogue::dgelu;
  e.aux = const_cast<T*>(hidden);  // read only: dgelu reads its aux
  e.ld_aux = in;
  gemm_fused<T>(ctx, false, true, n, in, out, dy, out, 0, w, out, 0, d_hidden, in, 0, 1, e);
  bias_grad_into<T>(ctx, d_hidden, db, n, in, n, 1);
}

template <typename T>
void linear_backward(Context& ctx, const T* x, const T* w, const T* dy, T* dx, GradOut<T> dw,
                     GradOut<T> db, int n, int in, int out) {
  if (n == 0) return;
  if (dx) gemm<T>(ctx, false, true, n, in, out, 1.0f, dy, out, w, out, 1.0f, dx, in);
  weight_gemm<T>(ctx, true, false, in, out, n, x, in, dy, out, dw, out);
  bias_grad_into<T>(ctx, dy, db, n, out, n, 1);
}

template <typename T>
void gate_logits(Context& ctx, const T* x, const T* w, float* logits, int n, int in, int out) {
  if (n == 0) return;
  gemm_f32_out<T>(ctx, false, false, n, out, in, 1.0f, x, in, w, out, 0.0f, logits, out);
}

#define TED_INSTANTIATE_LINEAR(T)                                                                 \
  template void linear_forward<T>(Context&, const T*, const T*, const T*, T*, int, int, int);     \
  template void linear_residual_forward<T>(Context&, const T*, const T*, const T*, const T*, T*,  \
                                           int, int, int);                                        \
  template void linear_gelu_forward<T>(Context&, const T*, const T*, const T*, T*, T*, int, int,  \
                                       int);                                                      \
  template void linear_dgelu_backward<T>(Context&, const T*, const T*, const T*, T*, GradOut<T>,  \
                                         int, int, int);                                          \
  template void linear_backward<T>(Context&, const T*, const T*, const T*, T*, GradOut<T>,        \
                                   GradOut<T>, int, int, int);                                    \
  template void weight_gemm<T>(Context&, bool, bool, int, int, int, const T*, int, const T*, int, \
                               GradOut<T>, int);                                                  \
  template void gate_logits<T>(Context&, const T*, const T*, float*, int, int, int);
TED_INSTANTIATE_LINEAR(float)
TED_INSTANTIATE_LINEAR(Half)
TED_INSTANTIATE_LINEAR(BFloat16)

}  // namespace ted::kernels::cuda
