// The broadcast plug-in of the collective benchmark (collective_plugin.hpp): the root's buffer
// of `elements` overwrites every other rank's, in place; the others start from the sentinel so
// that a rank the data never reached is counted wrong. `bytes` is the buffer.
#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::bench {

extern const CollectivePlugin broadcast_plugin{
    .op = CollectiveOp::broadcast,
    .moves_data = true,
    .splits = false,
    .reduces = false,
    .has_root = true,
    .in_place = true,
    .check = "--group expert_data -d double --tp 2 --root 1",
    .size_buffers =
        [](CollectiveCase& c) {
          c.send_elements = c.elements;
          c.recv_elements = 0;
        },
    .send_value =
        [](const CollectiveCase& c, std::size_t index) {
          return c.group_rank == c.root ? own_pattern(c, index) : sentinel(c.dtype);
        },
    .expected =
        [](const CollectiveCase& c, std::size_t index) {
          return pattern(c.root, index, c.pattern_halfwidth, c.dtype);
        },
    .count_wrong = nullptr,
    .run = [](const CollectiveCase& c, Communicator& comm, const void* send,
              void*) { comm.broadcast(const_cast<void*>(send), c.elements, c.dtype, c.root); },
    .run_raw_mpi =
        [](const CollectiveCase& c, MPI_Comm comm, const void* send, void*) {
          MPI_Bcast(const_cast<void*>(send), static_cast<int>(c.elements), mpi_datatype(c.dtype),
                    c.root, comm);
        },
    .bus_factor = [](int) { return 1.0; },
};

}  // namespace ted::bench
