// The pool-threaded GEMM (kernels/cpu/blas.hpp) cuts a large GEMM into blocks of rows or
// columns, one per thread: every element must come out as one BLAS call gives it, up to the
// rounding of OpenBLAS's edge kernels (another order of the same k products), for each transpose
// and for shapes that split unevenly; the padding between rows untouched. CTest runs this with
// TED_NUM_THREADS=2.
#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"

namespace {

template <typename T>
std::vector<T> values(std::size_t n, unsigned seed) {
  std::vector<T> v(n);
  unsigned x = seed;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = static_cast<T>(static_cast<int>(x >> 9) % 2001 - 1000) / T(997);
  }
  return v;
}

template <typename T>
void check_shapes() {
  using ted::kernels::cpu::gemm;
  using ted::kernels::cpu::gemm_here;
  struct Shape {
    int m, n, k;
  };
  // Rows split (m large), columns split (n large, m small), uneven blocks, below the threshold.
  for (Shape s : {Shape{257, 96, 70}, Shape{40, 515, 64}, Shape{1000, 33, 17}, Shape{8, 8, 8}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int lda = (ta ? s.m : s.k) + 3, ldb = (tb ? s.k : s.n) + 5, ldc = s.n + 2;
        auto a = values<T>(static_cast<std::size_t>(ta ? s.k : s.m) * lda, 1);
        auto b = values<T>(static_cast<std::size_t>(tb ? s.n : s.k) * ldb, 2);
        auto c0 = values<T>(static_cast<std::size_t>(s.m) * ldc, 3), c1 = c0;
        gemm_here(ta, tb, s.m, s.n, s.k, T(0.75), a.data(), lda, b.data(), ldb, T(0.5), c0.data(),
                  ldc);
        gemm(ta, tb, s.m, s.n, s.k, T(0.75), a.data(), lda, b.data(), ldb, T(0.5), c1.data(), ldc);
        INFO(s.m << "x" << s.n << "x" << s.k << " ta " << ta << " tb " << tb);
        const double tolerance = sizeof(T) == 4 ? 2e-6 : 1e-14;
        double worst = 0;
        bool padding_kept = true;
        for (int i = 0; i < s.m; ++i) {
          for (int j = 0; j < s.n; ++j) {
            const double x = c0[i * ldc + j], y = c1[i * ldc + j];
            worst = std::max(worst, std::abs(x - y) / std::max(1.0, std::abs(x)));
          }
          for (int j = s.n; j < ldc; ++j) padding_kept &= c0[i * ldc + j] == c1[i * ldc + j];
        }
        CHECK(worst <= tolerance);
        CHECK(padding_kept);
      }
}

}  // namespace

TEST_CASE("pool-threaded GEMM equals one BLAS call bit for bit") {
  const char* asked = std::getenv("TED_NUM_THREADS");
  if (asked && std::atoi(asked) > 1) REQUIRE(ted::parallel_threads() > 1);
  INFO("pool threads " << ted::parallel_threads() << ", pool threads the GEMMs "
                       << ted::kernels::cpu::pool_threads_blas());
  check_shapes<float>();
  check_shapes<double>();
}
