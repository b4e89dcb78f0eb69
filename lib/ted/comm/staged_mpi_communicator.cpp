#include "ted/comm/staged_mpi_communicator.hpp"

#include <numeric>
#include <utility>

#include "ted/core/error.hpp"

namespace ted {
namespace {

// A staged all-to-all in flight: the MPI transfer between two host buffers it borrows from its
// communicator, and the device buffer the result goes to once the transfer is done.
class StagedPendingAllToAll final : public PendingCollective {
 public:
  StagedPendingAllToAll(StagedMpiCommunicator& owner, Device& device, std::size_t bytes,
                        void* device_recv)
      : owner_(owner),
        device_(device),
        bytes_(bytes),
        device_recv_(device_recv),
        buffers_(owner.take_host_pair(bytes)) {}
  ~StagedPendingAllToAll() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw
    }
    transfer_.reset();  // its MPI request is done or abandoned before the buffers go back
    owner_.give_back(buffers_);
  }

  void* host_send() { return buffers_.send; }
  void* host_recv() { return buffers_.recv; }
  void set_transfer(std::unique_ptr<PendingCollective> transfer) {
    transfer_ = std::move(transfer);
  }

  void wait() override {
    if (finished_ || !transfer_) return;
    finished_ = true;  // a wait that threw is not repeated by the destructor
    transfer_->wait();
    device_.copy_from_host(device_recv_, buffers_.recv, bytes_);
  }
  void progress() override {
    if (!finished_ && transfer_) transfer_->progress();
  }

 private:
  StagedMpiCommunicator& owner_;
  Device& device_;
  std::size_t bytes_;
  void* device_recv_;
  StagedMpiCommunicator::HostPair buffers_;
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
  for (HostPair& pair : spare_pairs_) {
    device_.deallocate_host(pair.send);
    device_.deallocate_host(pair.recv);
  }
}

std::unique_ptr<Communicator> StagedMpiCommunicator::split(int color, int key,
                                                           GroupKind group) const {
  MPI_Comm child;
  TED_CHECK_MPI(MPI_Comm_split(host_.native_handle(), color, key, &child));
  return std::make_unique<StagedMpiCommunicator>(child, group, ledger(), device_);
}

StagedMpiCommunicator::HostPair StagedMpiCommunicator::take_host_pair(std::size_t bytes) {
  auto best = spare_pairs_.end();
  for (auto it = spare_pairs_.begin(); it != spare_pairs_.end(); ++it)
    if (it->bytes >= bytes && (best == spare_pairs_.end() || it->bytes < best->bytes)) best = it;
  if (best != spare_pairs_.end()) {
    HostPair pair = *best;
    spare_pairs_.erase(best);
    return pair;
  }
  HostPair pair;
  pair.send = device_.allocate_host(bytes);
  pair.recv = device_.allocate_host(bytes);
  pair.bytes = bytes;
  return pair;
}

void StagedMpiCommunicator::give_back(HostPair pair) {
  spare_pairs_.push_back(pair);
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
  auto pending = std::make_unique<StagedPendingAllToAll>(*this, device_, total, recv);
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
