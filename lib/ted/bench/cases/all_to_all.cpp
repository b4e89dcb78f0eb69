// The all-to-all plug-in of the collective benchmark (collective_plugin.hpp): every rank sends
// block p of `chunk` elements to rank p and receives the group's blocks in rank order. `bytes`
// is one rank's send buffer.
#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::bench {

extern const CollectivePlugin all_to_all_plugin{
    .op = CollectiveOp::all_to_all,
    .moves_data = true,
    .splits = true,
    .reduces = false,
    .has_root = false,
    .in_place = false,
    .check = "--group expert -d float --ep 4",
    .size_buffers = [](CollectiveCase& c) { c.send_elements = c.recv_elements = c.elements; },
    .send_value = own_pattern,
    .expected =
        [](const CollectiveCase& c, std::size_t index) {
          auto source = static_cast<int>(index / c.chunk);
          return pattern(source, static_cast<std::size_t>(c.group_rank) * c.chunk + index % c.chunk,
                         c.pattern_halfwidth, c.dtype);
        },
    .count_wrong = nullptr,
    .run = [](const CollectiveCase& c, Communicator& comm, const void* send,
              void* recv) { comm.all_to_all(send, recv, c.chunk, c.dtype); },
    .run_raw_mpi =
        [](const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
          int chunk = static_cast<int>(c.chunk);
          MPI_Datatype type = mpi_datatype(c.dtype);
          MPI_Alltoall(send, chunk, type, recv, chunk, type, comm);
        },
    .bus_factor = [](int n) { return (n - 1.0) / n; },
};

}  // namespace ted::bench
