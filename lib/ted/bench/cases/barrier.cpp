// The barrier's plug-in: it moves no data, so the benchmark refuses it (moves_data), but every
// CollectiveOp has a plug-in, so plan_case and run_case take any op the communicator has.
#include "ted/bench/collective_plugin.hpp"

namespace ted::bench {

extern const CollectivePlugin barrier_plugin{
    .op = CollectiveOp::barrier,
    .moves_data = false,
    .splits = false,
    .reduces = false,
    .has_root = false,
    .in_place = false,
    .check = nullptr,
    .size_buffers = [](CollectiveCase& c) { c.send_elements = c.recv_elements = 0; },
    .send_value = own_pattern,
    .expected = [](const CollectiveCase&, std::size_t) { return 0.0; },
    .count_wrong = nullptr,
    .run = [](const CollectiveCase&, Communicator& comm, const void*, void*) { comm.barrier(); },
    .run_raw_mpi = [](const CollectiveCase&, MPI_Comm comm, const void*,
                      void*) { MPI_Barrier(comm); },
    .bus_factor = [](int) { return 0.0; },
};

}  // namespace ted::bench
