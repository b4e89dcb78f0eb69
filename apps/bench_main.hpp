// main() of the Google Benchmark programs in apps/: --help says what the program measures, then
// lists Google Benchmark's own flags. asks_for_help lets a program answer --help before it
// looks for hardware it needs (bench_moe_block_cuda without a GPU).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ted/core/cpu_features.hpp"
#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"

namespace ted::bench {

inline const char*& program_description() {
  static const char* text = "";
  return text;
}

inline void print_help() {
  std::printf("%s\n\nGoogle Benchmark's flags:\n", program_description());
  benchmark::PrintDefaultHelp();
}

inline bool asks_for_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  return false;
}

// Google Benchmark's Initialize with the description in its help (it prints and exits 0 on
// --help). -h is taken as --help too.
inline void initialize(int* argc, char** argv, const char* description) {
  program_description() = description;
  if (asks_for_help(*argc, argv)) {
    print_help();
    std::exit(0);
  }
  benchmark::Initialize(argc, argv, &print_help);
}

// BENCHMARK_MAIN() with the description.
inline int benchmark_main(int argc, char** argv, const char* description) {
  initialize(&argc, argv, description);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // What a CPU figure depends on, in the header of every run (next to the CPU's caches): the
  // BLAS, its version and the kernels it runs (and how they were chosen), what this CPU
  // supports, the threads.
  benchmark::AddCustomContext("blas", kernels::cpu::blas_description());
  benchmark::AddCustomContext("blas_kernel", kernels::cpu::blas_kernel());
  benchmark::AddCustomContext("cpu_features", describe(cpu_features()));
  benchmark::AddCustomContext("cpu_threads", std::to_string(parallel_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace ted::bench
