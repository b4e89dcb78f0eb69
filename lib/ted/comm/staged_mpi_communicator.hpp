// A communicator for device memory over MPI through host staging buffers: every call waits for
// the device's queued work, copies the send buffer to the device's fastest host memory (pinned
// on a GPU), runs the MPI collective there and copies the result back. Two extra copies per
// call make it slower than NCCL, but it needs nothing but MPI, and ranks may share a GPU,
// which NCCL refuses: that is how multi-rank TED on CUDA is tested on a one-GPU machine. It is
// written against the Device interface only, so the CPU tests exercise it too.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "ted/comm/communicator.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/device/device.hpp"

namespace ted {

class StagedMpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm`; `device` must outlive the communicator.
  StagedMpiCommunicator(MPI_Comm comm, GroupKind group, Ledger* ledger, Device& device);
  ~StagedMpiCommunicator() override;

  CommBackend backend() const override { return CommBackend::mpi; }
  std::string name() const override { return "mpi-staged"; }
  std::unique_ptr<Communicator> split(int color, int key, GroupKind group) const override;
  void synchronize() override { device_.synchronize(); }

  // Host buffers for a started all-to-all: taken from the ones earlier starts gave back when
  // one is large enough (pinning host memory on a GPU costs milliseconds, and an overlapped
  // exchange starts several per layer), and given back when the transfer is done.
  struct HostPair {
    void* send = nullptr;
    void* recv = nullptr;
    std::size_t bytes = 0;
  };
  HostPair take_host_pair(std::size_t bytes);
  void give_back(HostPair pair);

 protected:
  // do_all_to_all_start copies the send buffer to host memory and starts MPI_Ialltoall there;
  // wait() finishes the transfer and copies the result to the device. The host buffers are a
  // pair of the pending collective's own (several may be in flight), not the staging buffers
  // below, which the blocking calls reuse; the pair goes back to this communicator when the
  // transfer is done.
  TED_COMMUNICATOR_OVERRIDES

 private:
  // A grow-only host buffer of the device.
  struct Staging {
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  void* staging(Staging& buffer, std::size_t bytes);
  // Copies `bytes` of device memory into the send staging buffer and returns it.
  void* stage_in(const void* device_src, std::size_t bytes);

  MpiCommunicator host_;  // the MPI work, on the staging buffers (no ledger: this one records)
  Device& device_;
  Staging send_, recv_;
  std::vector<HostPair> spare_pairs_;
};

}  // namespace ted
