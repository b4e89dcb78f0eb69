// What one collective brings to the benchmark: a plug-in, one small struct in one file of
// cases/ (in the manner of nccl-tests, one file per collective). The harness
// (collective_cases.cpp, collective_bench.cpp) does what every collective shares, the sizes,
// the data pattern, the sentinels, the check, the timing, and finds the plug-in of an op in one
// table, collective_cases.cpp's kPlugins. docs/layout.md lists the files a new collective
// touches.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "ted/bench/collective_cases.hpp"
#include "ted/comm/communicator.hpp"

namespace ted::bench {

struct CollectivePlugin {
  CollectiveOp op;
  bool moves_data;  // false for barrier: the benchmark refuses it
  bool splits;      // the buffer is group_size blocks: `bytes` rounds down to a multiple of n
                    // elements, and chunk = elements / n
  bool reduces;     // sums group_size values: the pattern narrows so every sum stays exact
  bool has_root;    // --root names a rank of the group
  bool in_place;    // the result overwrites the send buffer, which is where the check reads it
  // The suite's check of it, test collbench_check_<op> (4 ranks, every element checked): its
  // --group, -d and grid options, read from this file by tests/CMakeLists.txt; null: none.
  const char* check;

  // Sets send_elements and recv_elements (and any per-peer counts) from elements and chunk.
  void (*size_buffers)(CollectiveCase& c);
  // Element `index` of this rank's send buffer before the call.
  double (*send_value)(const CollectiveCase& c, std::size_t index);
  // What element `index` of the result must hold.
  double (*expected)(const CollectiveCase& c, std::size_t index);
  // Counts wrong result elements; nullptr compares every element with `expected`.
  std::uint64_t (*count_wrong)(const CollectiveCase& c, const void* host_result);
  // The collective through the suite's communicator (backend memory)...
  void (*run)(const CollectiveCase& c, Communicator& comm, const void* send, void* recv);
  // ... and through MPI itself (host memory), the reference of --compare-mpi.
  void (*run_raw_mpi)(const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv);
  // nccl-tests' busbw = algbw * bus_factor(n).
  double (*bus_factor)(int group_size);
};

// The plug-in of `op`; every CollectiveOp has one.
const CollectivePlugin& collective_plugin(CollectiveOp op);

// Shared by the plug-ins: this rank's own pattern (what most send buffers hold), and the sum
// of every rank's pattern at `index` (what a sum reduction yields there).
double own_pattern(const CollectiveCase& c, std::size_t index);
double sum_over_ranks(const CollectiveCase& c, std::size_t index);

}  // namespace ted::bench
