// Row-major GEMM through CBLAS for float and double:
//   C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, op = transpose when the flag is set.
// lda/ldb/ldc are row strides, so strided sub-matrices (one head of a QKV buffer) need no copy.
//
// Threads: with OpenBLAS, the suite's pool (core/parallel.hpp) is the only set of threads.
// OpenBLAS is told to stay on the calling thread (for the whole process in its pthread build,
// Debian's default; its OpenMP build keeps a count per calling thread, so with that one set
// OPENBLAS_NUM_THREADS=1 too), and with more than one pool thread a large
// GEMM's output is cut into one block of rows (or columns) per thread, each a one-thread BLAS
// call; so OpenBLAS's own workers, which spin for a while after each call, never take the cores
// the pool (or the other ranks of the machine) needs next. A GEMM inside a parallel_for (the
// fused attention's tiles, experts side by side) runs on its thread. Each element's k products
// are the same; OpenBLAS's kernels for the blocks' edges may add them in another order, so
// results follow TED_NUM_THREADS by rounding. With another CBLAS the BLAS threads its GEMMs as
// it is told (its own environment variables).
//
// The BLAS is loaded by the program at start-up, its kernels chosen from the CPU's features
// (blas_library.hpp): these call it through the pointers that loading found.
#pragma once

#include <cblas.h>

#include <string>

#include "ted/core/blas_library.hpp"

namespace ted::kernels::cpu {

// True when the pool threads the GEMMs (above); the first call settles it for the process (and
// with OpenBLAS keeps OpenBLAS on one thread).
bool pool_threads_blas();

// The BLAS the kernels call, for the programs' headers and the benchmarks' context: with OpenBLAS
// its build, the kernels in use and how they were chosen ("OpenBLAS 0.3.21 ... / Cooperlake
// kernels, chosen by cpuid (avx512)"), else the library's file name.
std::string blas_description();

// For the CSV rows: the BLAS and its version ("OpenBLAS 0.3.21"), and its kernels ("Cooperlake";
// "" where the library does not say). "" and "" when the BLAS could not be loaded.
std::string blas_name();
std::string blas_kernel();

namespace blas_detail {
void split_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                int lda, const float* b, int ldb, float beta, float* c, int ldc);
void split_gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                int lda, const double* b, int ldb, double beta, double* c, int ldc);
}  // namespace blas_detail

// One BLAS call on the calling thread, never cut by the pool: its result does not depend on
// the thread count (what every tensor rank computes alike, such as the gate logits, uses it).
inline void gemm_here(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  pool_threads_blas();  // OpenBLAS on this thread only
  blas_library().sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                       trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                       ldc);
}

inline void gemm_here(bool trans_a, bool trans_b, int m, int n, int k, double alpha,
                      const double* a, int lda, const double* b, int ldb, double beta, double* c,
                      int ldc) {
  pool_threads_blas();
  blas_library().dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                       trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c,
                       ldc);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                 int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  blas_detail::split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                 int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  blas_detail::split_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace ted::kernels::cpu
