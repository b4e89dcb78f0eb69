// The MPI backend: collectives on host memory over an MPI communicator.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "ted/comm/communicator.hpp"

namespace ted {

// MPI_Init_thread / MPI_Finalize for the lifetime of main(). Finalizes only what it initialised.
// `thread_level`: what the build needs (registry.hpp: mpi_thread_level()). With `start` false
// it calls no MPI at all and stands for one rank of one (--check on a login node, where some
// sites refuse MPI outside srun).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv, int thread_level, bool start = true);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  bool initialized_here_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// How a rank waits in a collective its peers have not reached yet. blocking: MPI's blocking
// calls, which poll the transport; OpenMPI yields the core between polls when the job
// oversubscribes its nodes (mpi_yield_when_idle, on by default then).
// sleep: the nonblocking call, tested in a loop that sleeps 50 us between tests once the first
// 20 us have passed, so that a waiting rank surely leaves its core to the rank it waits for. It
// costs more than it saves on 4 ranks over 2 cores (the ablation's step 67 ms blocking, 90 ms
// sleeping: the nonblocking algorithms move only inside a test, each step of theirs waiting out
// a sleep), so blocking is the default. Results are the same up to the order of a reduction's
// additions. One setting for the process, chosen before the first step (run.wait).
enum class MpiWait { blocking, sleep };
void set_mpi_wait(MpiWait wait);
MpiWait mpi_wait();
const char* to_string(MpiWait wait);

// A barrier over `comm` that leaves the core to others while it waits: MPI_Ibarrier, tested
// every millisecond, sleeping between. For ranks with nothing to do while others measure (the
// ranks a point leaves out), whose blocking wait would take CPU time from the measured ranks
// where ranks share cores. Every rank of `comm` must call this one (not barrier()).
void sleeping_barrier(MPI_Comm comm);

// The cores the ranks of `node` (one node's communicator) may run on: the union of their
// affinity masks. Collective over `node`.
std::vector<int> node_cpus(MPI_Comm node);

// The most ranks of `comm` on one node per CPU they may run on. Above 1 the OS time-slices the
// ranks. Collective over `comm`.
double ranks_per_core(MPI_Comm comm);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction).
  MpiCommunicator(MPI_Comm comm, GroupKind group, Ledger* ledger);
  ~MpiCommunicator() override;

  // A duplicate of MPI_COMM_WORLD, so the suite's traffic never matches the caller's messages.
  static std::unique_ptr<MpiCommunicator> world(Ledger* ledger);

  CommBackend backend() const override { return CommBackend::mpi; }
  MPI_Comm native_handle() const { return comm_; }
  std::unique_ptr<Communicator> split(int color, int key, GroupKind group) const override;

 protected:
  // do_all_to_all_start: MPI_Ialltoall; wait() is MPI_Wait and progress() MPI_Test, on the
  // calling (main) thread.
  TED_COMMUNICATOR_OVERRIDES

 private:
  MPI_Comm comm_;
};

// This rank's index in, and the size of, an MPI communicator (throwing on failure).
int mpi_comm_rank(MPI_Comm comm);
int mpi_comm_size(MPI_Comm comm);

// The MPI datatype that carries `dtype` (16-bit floats travel as MPI_UINT16_T).
MPI_Datatype mpi_datatype(DataType dtype);
// The MPI reduction for (op, dtype); user-defined ops for half and bfloat16, which MPI lacks.
MPI_Op mpi_reduce_op(ReduceOp op, DataType dtype);

}  // namespace ted
