// parallel_for for the element-wise CPU kernels: [0, n) split into one contiguous chunk per
// thread (a fixed partition, so results do not depend on timing), the caller running the first.
// Workers sleep on a condition variable between jobs instead of spinning: OpenBLAS threads its
// GEMMs between our loops, and on a small machine a spinning pool would steal their cores.
// Threads: TED_NUM_THREADS, else the CPUs of the process's affinity mask; 1 runs everything
// inline.
#pragma once

#include <cstdint>
#include <functional>

namespace ted {

int parallel_threads();
// body(begin, end) on disjoint chunks covering [0, n). Chunks smaller than `grain` are not
// split further (small loops run inline); a parallel_for inside a chunk runs inline too.
void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body,
                  std::int64_t grain = 4096);
// True on a thread running a chunk of a parallel_for.
bool in_parallel_region();

}  // namespace ted
