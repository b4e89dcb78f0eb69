#include "ted/comm/staged_mpi_communicator.hpp"

#include <numeric>
#include <utility>

#include "ted/core/error.hpp"

namespace ted {
namespace {

// Host memory of a device (pinned on a GPU), freed with it.
class HostBuffer {
 public:
  HostBuffer(Device& device, std::size_t bytes)
      : device_(device), data_(device.allocate_host(bytes)) {}
  ~HostBuffer() { device_.deallocate_host(data_); }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  void* data() { return data_; }

 private:
  Device& device_;
  void* data_;
};

// A staged all-to-all in flight: the MPI transfer between two host buffers it owns, and the
// device buffer the result goes to once the transfer is done.
class StagedPendingAllToAll final : public PendingCollective {
 public:
  StagedPendingAllToAll(Device& device, std::size_t bytes, void* device_recv)
      : device_(device),
        bytes_(bytes),
        device_recv_(device_recv),
        host_send_(device, bytes),
        host_recv_(device, bytes) {}
  ~StagedPendingAllToAll() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw
    }
  }

  void* host_send() { return host_send_.data(); }
  void* host_recv() { return host_recv_.data(); }
  void set_transfer(std::unique_ptr<PendingCollective> transfer) {
    transfer_ = std::move(transfer);
  }

  void wait() override {
    if (finished_ || !transfer_) return;
    finished_ = true;  // a wait that threw is not repeated by the destructor
    transfer_->wait();
    device_.copy_from_host(device_recv_, host_recv_.data(), bytes_);
  }
  void progress() override {
    if (!finished_ && transfer_) transfer_->progress();
  }

 private:
  Device& device_;
  std::size_t bytes_;
  void* device_recv_;
  HostBuffer host_send_;
  HostBuffer host_recv_;
  // Declared after the buffers, so it is destroyed (and its transfer waited for) before them.
  std::unique_ptr<PendingCollective> transfer_;
  bool finished_ = false;
};

}  // namespace

StagedMpiCommunicator::StagedMpiCommunicator(MPI_Comm comm, GroupKind group, Ledger* ledger,
                                             Device& device)
    : Communicator(group, mpi_comm_rank(comm), mpi_comm_size(comm), ledger),
      host_(comm, group, nullptr),
      device_(device) {}

StagedMpiCommunicator::~StagedMpiCommunicator() {
  device_.deallocate_host(send_.data);
  device_.deallocate_host(recv_.data);
}

std::unique_ptr<Communicator> StagedMpiCommunicator::split(int color, int key,
                                                           GroupKind group) const {
  MPI_Comm child;
  TED_CHECK_MPI(MPI_Comm_split(host_.native_handle(), color, key, &child));
  return std::make_unique<StagedMpiCommunicator>(child, group, ledger(), device_);
}

void* StagedMpiCommunicator::staging(Staging& buffer, std::size_t bytes) {
  if (bytes > buffer.bytes) {
    device_.deallocate_host(buffer.data);
    buffer.data = nullptr;
    buffer.bytes = 0;
    buffer.data = device_.allocate_host(bytes);
    buffer.bytes = bytes;
  }
  return buffer.data;
}

void* StagedMpiCommunicator::stage_in(const void* device_src, std::size_t bytes) {
  void* host = staging(send_, bytes);
  device_.copy_to_host(host, device_src, bytes);  // waits for the device's queued work
  return host;
}

void StagedMpiCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count,
                                          DataType dtype, ReduceOp op) {
  const std::size_t bytes = count * dtype_size(dtype);
  void* host = stage_in(send, bytes);
  host_.all_reduce(host, host, count, dtype, op);
  device_.copy_from_host(recv, host, bytes);
}

void StagedMpiCommunicator::do_all_gather(const void* send, void* recv, std::size_t count,
                                          DataType dtype) {
  const std::size_t bytes = count * dtype_size(dtype);
  const std::size_t total = bytes * static_cast<std::size_t>(size());
  void* host_send = stage_in(send, bytes);
  void* host_recv = staging(recv_, total);
  host_.all_gather(host_send, host_recv, count, dtype);
  device_.copy_from_host(recv, host_recv, total);
}

void StagedMpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                              DataType dtype) {
  const std::size_t bytes = count * dtype_size(dtype);
  void* host_send = stage_in(send, bytes * static_cast<std::size_t>(size()));
  void* host_recv = staging(recv_, bytes);
  host_.reduce_scatter(host_send, host_recv, count, dtype);
  device_.copy_from_host(recv, host_recv, bytes);
}

void StagedMpiCommunicator::do_all_to_all(const void* send, void* recv, std::size_t count,
                                          DataType dtype) {
  const std::size_t total = count * dtype_size(dtype) * static_cast<std::size_t>(size());
  void* host_send = stage_in(send, total);
  void* host_recv = staging(recv_, total);
  host_.all_to_all(host_send, host_recv, count, dtype);
  device_.copy_from_host(recv, host_recv, total);
}

std::unique_ptr<PendingCollective> StagedMpiCommunicator::do_all_to_all_start(const void* send,
                                                                              void* recv,
                                                                              std::size_t count,
                                                                              DataType dtype) {
  const std::size_t total = count * dtype_size(dtype) * static_cast<std::size_t>(size());
  auto pending = std::make_unique<StagedPendingAllToAll>(device_, total, recv);
  device_.copy_to_host(pending->host_send(), send, total);  // waits for the device's queued work
  pending->set_transfer(
      host_.all_to_all_start(pending->host_send(), pending->host_recv(), count, dtype));
  return pending;
}

void StagedMpiCommunicator::do_all_to_all_v(const void* send,
                                            std::span<const std::size_t> send_counts, void* recv,
                                            std::span<const std::size_t> recv_counts,
                                            DataType dtype) {
  const std::size_t width = dtype_size(dtype);
  const std::size_t sent =
      std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0}) * width;
  const std::size_t received =
      std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}) * width;
  void* host_send = stage_in(send, sent);
  void* host_recv = staging(recv_, received);
  host_.all_to_all_v(host_send, send_counts, host_recv, recv_counts, dtype);
  device_.copy_from_host(recv, host_recv, received);
}

void StagedMpiCommunicator::do_broadcast(void* buffer, std::size_t count, DataType dtype,
                                         int root) {
  const std::size_t bytes = count * dtype_size(dtype);
  void* host = rank() == root ? stage_in(buffer, bytes) : staging(send_, bytes);
  host_.broadcast(host, count, dtype, root);
  if (rank() != root) device_.copy_from_host(buffer, host, bytes);
}

void StagedMpiCommunicator::do_barrier() {
  device_.synchronize();
  host_.barrier();
}

}  // namespace ted
