// The GEMM candidates of scripts/comparisons/blas_candidates.sh: times each shape of a list (op(A)
// op(B), m n k: the block's own GEMMs) with one CBLAS library or oneDNN's dnnl_sgemm, the rows (or
// columns) of C split over `threads` OpenMP threads, each one one-thread call, as the suite's pool
// splits a GEMM; checks 16 elements of each result against a double-precision dot product and
// prints the median and 10th percentile of the timed calls (after one warm-up), in ms and GFLOP/s.
//   gemm_candidates <cblas|dnnl> <library.so> <threads> <shapes> [min seconds] [min samples]
// With OpenBLAS the library is told to stay on the calling thread (openblas_set_num_threads).
#include <dlfcn.h>
#include <omp.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
typedef void (*cblas_t)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                        float, float*, int);
typedef int (*dnnl_t)(char, char, long, long, long, float, const float*, long, const float*, long,
                      float, float*, long);
static cblas_t cb;
static dnnl_t dn;
static void call(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
                 int ldb, float* c, int ldc) {
  if (dn)
    dn(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
  else
    cb(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, 1.f, a, lda, b, ldb, 0.f, c, ldc);
}
int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s <cblas|dnnl> <library.so> <threads> <shapes> [min s] [min n]\n",
            argv[0]);
    return 2;
  }
  const std::string kind = argv[1], lib = argv[2];
  const int threads = atoi(argv[3]);
  void* h = dlopen(lib.c_str(), RTLD_NOW);
  if (!h) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  if (auto set = (void (*)(int))dlsym(h, "openblas_set_num_threads")) set(1);
  if (kind == "dnnl")
    dn = (dnnl_t)dlsym(h, "dnnl_sgemm");
  else
    cb = (cblas_t)dlsym(h, "cblas_sgemm");
  if (!dn && !cb) {
    fprintf(stderr, "%s has no %s\n", lib.c_str(), kind == "dnnl" ? "dnnl_sgemm" : "cblas_sgemm");
    return 2;
  }
  FILE* f = fopen(argv[4], "r");
  if (!f) {
    fprintf(stderr, "cannot read %s\n", argv[4]);
    return 2;
  }
  int ta, tb, m, n, k;
  double min_s = argc > 5 ? atof(argv[5]) : 0.3;
  int min_n = argc > 6 ? atoi(argv[6]) : 7;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (sscanf(line, "%d %d %d %d %d", &ta, &tb, &m, &n, &k) != 5) continue;
    int lda = ta ? m : k, ldb = tb ? k : n;
    std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n);
    for (size_t i = 0; i < a.size(); ++i) a[i] = (float)((i * 7) % 13) / 13.f - 0.5f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = (float)((i * 5) % 11) / 11.f - 0.5f;
    auto run = [&] {
      if (threads == 1 || (long)m * n * k < (1L << 18)) {
        call(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), n);
        return;
      }
#pragma omp parallel num_threads(threads)
      {
        int t = omp_get_thread_num();
        if (m >= n || m >= threads * 32) {
          int first = (long)m * t / threads, last = (long)m * (t + 1) / threads;
          call(ta, tb, last - first, n, k, ta ? a.data() + first : a.data() + (size_t)first * lda,
               lda, b.data(), ldb, c.data() + (size_t)first * n, n);
        } else {
          int first = (long)n * t / threads, last = (long)n * (t + 1) / threads;
          call(ta, tb, m, last - first, k, a.data(), lda,
               tb ? b.data() + (size_t)first * ldb : b.data() + first, ldb, c.data() + first, n);
        }
      }
    };
    run();
    double err = 0;
    for (int s = 0; s < 16; ++s) {
      int i = (s * 7919) % m, j = (s * 104729) % n;
      double ref = 0;
      for (int p = 0; p < k; ++p)
        ref += (double)(ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p]) *
               (tb ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j]);
      err = std::max(err, std::fabs(ref - c[(size_t)i * n + j]) / (std::sqrt((double)k) + 1e-9));
    }
    std::vector<double> times;
    auto t0 = std::chrono::steady_clock::now();
    int reps_per = std::max(1, (int)(2e6 / ((double)m * n * k / 1000 + 1)));  // batch tiny calls
    while ((int)times.size() < min_n ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < min_s) {
      auto s0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps_per; ++r) run();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count() /
                      reps_per);
    }
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2], p10 = times[times.size() / 10];
    printf("t%d %c%c %5d %5d %5d  median %9.4f ms  p10 %9.4f ms  %7.1f GFLOP/s  err %.1e\n",
           threads, ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, med * 1e3, p10 * 1e3,
           2.0 * m * n * k / med / 1e9, err);
    fflush(stdout);
  }
}
