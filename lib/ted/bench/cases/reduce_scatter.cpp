// The reduce-scatter plug-in of the collective benchmark (collective_plugin.hpp): every rank
// sends `elements` and receives the sum over the group of its own block of `chunk`. `bytes` is
// the input.
#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::bench {

extern const CollectivePlugin reduce_scatter_plugin{
    .op = CollectiveOp::reduce_scatter,
    .moves_data = true,
    .splits = true,
    .reduces = true,
    .has_root = false,
    .in_place = false,
    .check = "--group nonexpert_data -d float --tp 2",
    .size_buffers =
        [](CollectiveCase& c) {
          c.send_elements = c.elements;
          c.recv_elements = c.chunk;
        },
    .send_value = own_pattern,
    .expected =
        [](const CollectiveCase& c, std::size_t index) {
          return sum_over_ranks(c, static_cast<std::size_t>(c.group_rank) * c.chunk + index);
        },
    .count_wrong = nullptr,
    .run = [](const CollectiveCase& c, Communicator& comm, const void* send,
              void* recv) { comm.reduce_scatter(send, recv, c.chunk, c.dtype); },
    .run_raw_mpi =
        [](const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
          MPI_Reduce_scatter_block(send, recv, static_cast<int>(c.chunk), mpi_datatype(c.dtype),
                                   mpi_reduce_op(ReduceOp::sum, c.dtype), comm);
        },
    .bus_factor = [](int n) { return (n - 1.0) / n; },
};

}  // namespace ted::bench
