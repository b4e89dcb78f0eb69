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

// Whole GEMMs side by side on the caller's threads: while a SingleThreadedBlas lives, every
// BLAS call runs on the thread that makes it (OpenBLAS's thread count is set to 1 and restored
// after). Only where that can be done (`available`); it must be created and destroyed on the
// thread that makes the process's other BLAS calls, with no other BLAS call in flight.
class SingleThreadedBlas {
 public:
#if defined(TED_HAVE_OPENBLAS_THREADS)
  static constexpr bool available = true;
  SingleThreadedBlas() : threads_(openblas_get_num_threads()) {
    if (threads_ > 1) openblas_set_num_threads(1);
  }
  ~SingleThreadedBlas() {
    if (threads_ > 1) openblas_set_num_threads(threads_);
  }

 private:
  int threads_;
#else
  static constexpr bool available = false;
  SingleThreadedBlas() = default;
#endif
 public:
  SingleThreadedBlas(const SingleThreadedBlas&) = delete;
  SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;
};

}  // namespace ted::kernels::cpu
