// The all-gather plug-in of the collective benchmark (collective_plugin.hpp): every rank sends
// `chunk` elements and receives the group's blocks in rank order, `elements` in all. `bytes` is
// the output.
#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::bench {

extern const CollectivePlugin all_gather_plugin{
    .op = CollectiveOp::all_gather,
    .moves_data = true,
    .splits = true,
    .reduces = false,
    .has_root = false,
    .in_place = false,
    .check = "--group expert -d half --tp 2 --ep 2",
    .size_buffers =
        [](CollectiveCase& c) {
          c.send_elements = c.chunk;
          c.recv_elements = c.elements;
        },
    .send_value = own_pattern,
    .expected =
        [](const CollectiveCase& c, std::size_t index) {
          return pattern(static_cast<int>(index / c.chunk), index % c.chunk, c.pattern_halfwidth,
                         c.dtype);
        },
    .count_wrong = nullptr,
    .run = [](const CollectiveCase& c, Communicator& comm, const void* send,
              void* recv) { comm.all_gather(send, recv, c.chunk, c.dtype); },
    .run_raw_mpi =
        [](const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
          int chunk = static_cast<int>(c.chunk);
          MPI_Datatype type = mpi_datatype(c.dtype);
          MPI_Allgather(send, chunk, type, recv, chunk, type, comm);
        },
    .bus_factor = [](int n) { return (n - 1.0) / n; },
};

}  // namespace ted::bench
