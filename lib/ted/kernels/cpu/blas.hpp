// Row-major GEMM through CBLAS for float and double:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, op = transpose when the flag is set.
// lda/ldb/ldc are row strides, so strided sub-matrices (one head of a QKV buffer) need no copy.
#pragma once

#include <cblas.h>

namespace ted::kernels::cpu {

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                 int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ted::kernels::cpu
