// The NCCL backend: collectives on GPU memory, queued on the device's stream. Each NCCL
// communicator mirrors an MPI communicator of the same ranks: groups are made by MPI_Comm_split
// and the NCCL unique id is broadcast over MPI. Compiled only when NCCL is found.
//
// Every collective runs on a second stream each communicator owns, which first waits for what the
// compute stream (the device's) had queued before it (the send buffer's producer). A blocking
// collective makes the compute stream wait for it at once; a started all-to-all moves while the
// compute stream runs the caller's kernels, and wait() makes the compute stream wait for the
// transfer. Neither blocks the host. A recording ledger times each collective with CUDA events on
// that stream (Ledger: the device's time of the collective; for a started all-to-all, how long
// the compute stream waited for it), so measuring keeps the overlap.
//
// Every collective is watched (nccl_communicator.cpp): one that has not finished within
// TED_NCCL_TIMEOUT seconds (default 600), or a communicator with an asynchronous error (a dead
// peer, a broken link), ends the process with one line naming it.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <memory>

#include "ted/comm/communicator.hpp"
#include "ted/device/device.hpp"

namespace ted::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `mpi_comm`, whose ownership it takes. `device` must be a CUDA device made
  // by make_cuda_device and must outlive the communicator.
  NcclCommunicator(MPI_Comm mpi_comm, GroupKind group, Ledger* ledger, Device& device);
  ~NcclCommunicator() override;

  CommBackend backend() const override { return CommBackend::nccl; }
  std::unique_ptr<Communicator> split(int color, int key, GroupKind group) const override;
  // Waits for both streams: the blocking collectives and any started all-to-all.
  void synchronize() override;

 protected:
  std::unique_ptr<PendingTime> make_timer() override;
  TED_COMMUNICATOR_OVERRIDES

 private:
  // Queues issue(comm_stream_) between the compute stream and the communication stream (the
  // latter waits for the former before it, the former for the latter after it), with the
  // recorded collective's timer marks around it, and watches it.
  template <typename Issue>
  void on_comm_stream(const char* op, Issue&& issue);
  // The grouped send/recv of an all-to-all, queued on `stream`.
  void issue_all_to_all(const void* send, void* recv, std::size_t count, DataType dtype,
                        cudaStream_t stream);
  // Hands the collective just queued on `stream` to the process's watchdog (a timeout or an
  // asynchronous NCCL error ends the process with one line instead of a hang).
  void watch(const char* op, cudaStream_t stream);
  // Before the communicator's first collective: NCCL connects to its peers then (lazily), taking
  // their buffers with cudaMalloc, so the pool first gives back what it keeps (once; it waits
  // for the device).
  void before_first_collective();

  MPI_Comm mpi_comm_;
  Device& device_;
  cudaStream_t stream_;                 // the device's stream: compute
  cudaStream_t comm_stream_ = nullptr;  // this communicator's collectives
  ncclComm_t comm_ = nullptr;
  bool connected_ = false;  // a collective has run: NCCL has its peers' buffers
};

}  // namespace ted::cuda
