#include "ted/kernels/cpu/blas.hpp"

#include <algorithm>
#include <cstdint>

#include "ted/core/error.hpp"
#include "ted/core/parallel.hpp"

namespace ted::kernels::cpu {

bool pool_threads_blas() {
  // One set of threads: OpenBLAS stays on the calling thread whatever OPENBLAS_NUM_THREADS says
  // (its workers spin after each call and would take the cores the pool, or the other ranks of
  // this machine, need next); the pool cuts the large GEMMs when it has more than one thread.
  static const bool settled = [] {
    const auto set_num_threads = blas_library().set_num_threads;
    if (!set_num_threads) return false;
    set_num_threads(1);
    return parallel_threads() > 1;
  }();
  return settled;
}

std::string blas_description() {
  try {
    const BlasLibrary& blas = blas_library();
    if (blas.kernel.empty()) return blas.name + " (" + blas.path + ")";
    return blas.config + " / " + blas.kernel + " kernels, chosen by " + blas.chosen_by;
  } catch (const Error& e) {
    return std::string("no BLAS: ") + e.what();
  }
}

std::string blas_name() {
  try {
    return blas_library().name;
  } catch (const Error&) {
    return "";
  }
}

std::string blas_kernel() {
  try {
    return blas_library().kernel;
  } catch (const Error&) {
    return "";
  }
}

namespace blas_detail {
namespace {

// Below this many multiply-adds a GEMM is not worth a wake-up of the pool (OpenBLAS's own
// threshold for threading is the same, 2^18).
constexpr std::int64_t kSplitWork = std::int64_t(1) << 18;
constexpr int kMinBlock = 32;  // rows or columns per thread at least

template <typename T>
void split(bool ta, bool tb, int m, int n, int k, T alpha, const T* a, int lda, const T* b, int ldb,
           T beta, T* c, int ldc) {
  const int threads = parallel_threads();
  const auto work = static_cast<std::int64_t>(m) * n * k;
  if (!pool_threads_blas() || in_parallel_region() || work < kSplitWork ||
      std::max(m, n) < 2 * kMinBlock) {
    gemm_here(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // One block per thread: each block packs the other operand again, so no more blocks than
  // threads (a thread that is late leaves its block to the one that finished first).
  if (m >= n || m >= threads * kMinBlock) {  // blocks of rows of C and of op(A)
    parallel_chunks(m, std::min(threads, m / kMinBlock),
                    [&](std::int64_t first, std::int64_t last) {
                      const T* a_rows = ta ? a + first : a + first * lda;
                      gemm_here(ta, tb, static_cast<int>(last - first), n, k, alpha, a_rows, lda, b,
                                ldb, beta, c + first * ldc, ldc);
                    });
  } else {  // blocks of columns of C and of op(B)
    parallel_chunks(n, std::min(threads, n / kMinBlock),
                    [&](std::int64_t first, std::int64_t last) {
                      const T* b_cols = tb ? b + first * ldb : b + first;
                      gemm_here(ta, tb, m, static_cast<int>(last - first), k, alpha, a, lda, b_cols,
                                ldb, beta, c + first, ldc);
                    });
  }
}

}  // namespace

void split_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void split_gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  split(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace blas_detail
}  // namespace ted::kernels::cpu
