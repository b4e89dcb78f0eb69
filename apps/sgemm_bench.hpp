// The CPU benchmarks' GEMM reference (bench_moe_block, bench_machine): C[m, n] = A[m, k] B[k, n]
// through the suite's CPU gemm (kernels/cpu/blas.hpp), its result checked, reported as GFLOP/s.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "ted/kernels/cpu/blas.hpp"

namespace ted::bench {

inline void sgemm(benchmark::State& state, int m, int n, int k) {
  std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f),
      b(static_cast<std::size_t>(k) * n, 0.25f);
  std::vector<float> c(static_cast<std::size_t>(m) * n);
  for (auto _ : state) {
    kernels::cpu::gemm(false, false, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  if (c[0] != 0.125f * k || c[c.size() - 1] != 0.125f * k)
    state.SkipWithError("sgemm result is wrong");
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace ted::bench
