// The all-reduce plug-in of the collective benchmark (collective_plugin.hpp): every rank sends
// `elements` and receives their sum over the group. `bytes` is the buffer.
#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::bench {

extern const CollectivePlugin all_reduce_plugin{
    .op = CollectiveOp::all_reduce,
    .moves_data = true,
    .splits = false,
    .reduces = true,
    .has_root = false,
    .in_place = false,
    .check = "--group tensor -d bfloat16 --tp 2",
    .size_buffers = [](CollectiveCase& c) { c.send_elements = c.recv_elements = c.elements; },
    .send_value = own_pattern,
    .expected = sum_over_ranks,
    .count_wrong = nullptr,
    .run = [](const CollectiveCase& c, Communicator& comm, const void* send,
              void* recv) { comm.all_reduce(send, recv, c.elements, c.dtype); },
    .run_raw_mpi =
        [](const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
          MPI_Allreduce(send, recv, static_cast<int>(c.elements), mpi_datatype(c.dtype),
                        mpi_reduce_op(ReduceOp::sum, c.dtype), comm);
        },
    // Each rank's link carries the reduce-scatter and the all-gather of a ring: 2(n-1)/n.
    .bus_factor = [](int n) { return 2.0 * (n - 1) / n; },
};

}  // namespace ted::bench
