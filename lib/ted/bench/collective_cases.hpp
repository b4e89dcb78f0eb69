// One collective at one size, as the benchmark and the tests exercise it: how big its buffers
// are, what every rank puts in, what every element of the result must be, how to run it through
// a Communicator and through plain MPI, and its nccl-tests bus-bandwidth factor. Each function
// dispatches to the collective's plug-in (collective_plugin.hpp, one file per collective in
// cases/).
//
// Sizes follow nccl-tests: `bytes` is the buffer nccl-tests calls the size (each plug-in says
// which: the all-reduce buffer, the all-gather output, ...); it is rounded down to a whole
// number of elements (times the group size where the collective splits it).
// Data: element i of rank r's send buffer is pattern(r, i), a small integer, so sums are exact
// in every type and every element can be compared for equality.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ted/comm/communicator.hpp"

namespace ted::bench {

struct CollectiveCase {
  CollectiveOp op;
  DataType dtype;
  int group_size;
  int group_rank;
  int root;                              // broadcast only
  std::size_t bytes;                     // nccl-tests "size", after rounding
  std::size_t elements;                  // bytes / element size (nccl-tests "count")
  std::size_t chunk;                     // per-rank or per-peer element count where the op splits
  std::size_t send_elements;             // send buffer length (broadcast: the one buffer)
  std::size_t recv_elements;             // receive buffer length (broadcast: 0)
  std::vector<std::size_t> send_counts;  // per peer, where blocks are ragged
  std::vector<std::size_t> recv_counts;
  int pattern_halfwidth;  // pattern values lie in [-h, h] ([0, h] for uint8)
};

CollectiveCase plan_case(CollectiveOp op, DataType dtype, std::size_t bytes, int group_size,
                         int group_rank, int root = 0);

// The ragged all-to-all-v split the benchmark and tests use: rank `source` sends `unit` +/-
// unit/2 elements to each peer (half the peers fewer, half more), so every rank sends and
// receives exactly group_size * unit elements in blocks of different lengths.
std::size_t ragged_count(int source, int destination, int group_size, std::size_t unit);

double pattern(int rank, std::size_t index, int halfwidth, DataType dtype);
// What element `index` of this rank's receive buffer must hold (broadcast: of the buffer).
double expected_value(const CollectiveCase& c, std::size_t index);
// A value the pattern never produces, written into receive buffers before a checked run.
double sentinel(DataType dtype);

// Host-side fill of this rank's send buffer (broadcast: the root's data, others the sentinel).
void fill_send(const CollectiveCase& c, void* host_send);
// Number of result elements (receive buffer; broadcast: the buffer) that differ from
// expected_value (host memory).
std::uint64_t count_wrong(const CollectiveCase& c, const void* host_result);

// Runs the case through the suite's communicator (backend memory).
void run_case(const CollectiveCase& c, Communicator& comm, const void* send, void* recv);
// Runs the same collective by calling MPI directly on `comm` (host memory): the reference
// against which the communicator's overhead is measured.
void run_case_raw_mpi(const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv);

// nccl-tests: busbw = algbw * factor, factor 2(n-1)/n for all-reduce, (n-1)/n for all-gather,
// reduce-scatter and all-to-all, 1 for broadcast.
double bus_factor(CollectiveOp op, int group_size);

// The collectives the benchmark runs (every plug-in that moves data), in CollectiveOp's order,
// as --op names them: "all_reduce, all_gather, ...".
std::string benchmarked_collectives();

}  // namespace ted::bench
