#include "ted/comm/nccl/nccl_communicator.hpp"

#include <string>
#include <utility>

#include "ted/backend/cuda/cuda_check.hpp"
#include "ted/backend/cuda/cuda_device.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"

namespace ted::cuda {
namespace {

ncclDataType_t nccl_datatype(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return ncclFloat32;
    case DataType::f64:
      return ncclFloat64;
    case DataType::f16:
      return ncclFloat16;
    case DataType::bf16:
      return ncclBfloat16;
    case DataType::i32:
      return ncclInt32;
    case DataType::i64:
      return ncclInt64;
    case DataType::u8:
      return ncclUint8;
  }
  throw Error("nccl_datatype: unknown DataType");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  throw Error("nccl_op: unknown ReduceOp");
}

const char* byte_pointer(const void* base, std::size_t elements, DataType dtype) {
  return static_cast<const char*>(base) + elements * dtype_size(dtype);
}

// A CUDA event without timing (the cheap kind), destroyed with its holder. Destroying an event
// that has not fired yet is allowed: CUDA releases it once it fires.
class Event {
 public:
  Event() { TED_CHECK_CUDA(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// An all-to-all queued on the communication stream, `done` recorded after it. wait() orders the
// compute stream after `done`; when the start was recorded in a ledger, it also blocks the host
// until `done` has fired, so the ledger's time is the transfer's exposed part and not just the
// time to queue a stream dependency (Communicator::all_to_all_start).
class NcclPendingAllToAll final : public PendingCollective {
 public:
  NcclPendingAllToAll(cudaStream_t compute, std::unique_ptr<Event> done, bool block_host)
      : compute_(compute), done_(std::move(done)), block_host_(block_host) {}
  ~NcclPendingAllToAll() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw
    }
  }

  void wait() override {
    if (finished_) return;
    finished_ = true;  // a wait that threw is not repeated by the destructor
    TED_CHECK_CUDA(cudaStreamWaitEvent(compute_, done_->get(), 0));
    if (block_host_) TED_CHECK_CUDA(cudaEventSynchronize(done_->get()));
  }

 private:
  cudaStream_t compute_;
  std::unique_ptr<Event> done_;
  bool block_host_;
  bool finished_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm mpi_comm, GroupKind group, Ledger* ledger,
                                   Device& device)
    : Communicator(group, mpi_comm_rank(mpi_comm), mpi_comm_size(mpi_comm), ledger),
      mpi_comm_(mpi_comm),
      device_(device),
      stream_(stream_of(device)) {
  ncclUniqueId id;
  if (rank() == 0) TED_CHECK_NCCL(ncclGetUniqueId(&id));
  TED_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_comm_));
  TED_CHECK_NCCL(ncclCommInitRank(&comm_, size(), id, rank()));
  // Created while the device made by make_cuda_device is current, like its own stream; and like
  // it, non-blocking, so it never waits on the legacy default stream.
  TED_CHECK_CUDA(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_stream_) {
    cudaStreamSynchronize(comm_stream_);
    cudaStreamDestroy(comm_stream_);
  }
  if (comm_) ncclCommDestroy(comm_);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && mpi_comm_ != MPI_COMM_NULL) MPI_Comm_free(&mpi_comm_);
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key, GroupKind group) const {
  MPI_Comm child;
  TED_CHECK_MPI(MPI_Comm_split(mpi_comm_, color, key, &child));
  return std::make_unique<NcclCommunicator>(child, group, ledger(), device_);
}

void NcclCommunicator::synchronize() {
  TED_CHECK_CUDA(cudaStreamSynchronize(stream_));
  TED_CHECK_CUDA(cudaStreamSynchronize(comm_stream_));
}

void NcclCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count,
                                     DataType dtype, ReduceOp op) {
  TED_CHECK_NCCL(
      ncclAllReduce(send, recv, count, nccl_datatype(dtype), nccl_op(op), comm_, stream_));
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, std::size_t count,
                                     DataType dtype) {
  TED_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_datatype(dtype), comm_, stream_));
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                         DataType dtype) {
  TED_CHECK_NCCL(
      ncclReduceScatter(send, recv, count, nccl_datatype(dtype), ncclSum, comm_, stream_));
}

// NCCL has no all-to-all primitive: one grouped send/recv per peer, which NCCL runs at once.
void NcclCommunicator::issue_all_to_all(const void* send, void* recv, std::size_t count,
                                        DataType dtype, cudaStream_t stream) {
  ncclDataType_t type = nccl_datatype(dtype);
  TED_CHECK_NCCL(ncclGroupStart());
  for (int peer = 0; peer < size(); ++peer) {
    std::size_t offset = count * static_cast<std::size_t>(peer);
    TED_CHECK_NCCL(ncclSend(byte_pointer(send, offset, dtype), count, type, peer, comm_, stream));
    TED_CHECK_NCCL(ncclRecv(const_cast<char*>(byte_pointer(recv, offset, dtype)), count, type, peer,
                            comm_, stream));
  }
  TED_CHECK_NCCL(ncclGroupEnd());
}

void NcclCommunicator::do_all_to_all(const void* send, void* recv, std::size_t count,
                                     DataType dtype) {
  issue_all_to_all(send, recv, count, dtype, stream_);
}

// Nothing here waits on the host: the communication stream waits for the compute stream's
// queued work (so the send buffer is written and the receive buffer free), runs the transfer
// and records `done`, while the compute stream goes on with whatever the caller queues next.
std::unique_ptr<PendingCollective> NcclCommunicator::do_all_to_all_start(const void* send,
                                                                         void* recv,
                                                                         std::size_t count,
                                                                         DataType dtype) {
  Event ready;
  TED_CHECK_CUDA(cudaEventRecord(ready.get(), stream_));
  TED_CHECK_CUDA(cudaStreamWaitEvent(comm_stream_, ready.get(), 0));
  issue_all_to_all(send, recv, count, dtype, comm_stream_);
  auto done = std::make_unique<Event>();
  TED_CHECK_CUDA(cudaEventRecord(done->get(), comm_stream_));
  const bool recorded = ledger() && ledger()->enabled();
  return std::make_unique<NcclPendingAllToAll>(stream_, std::move(done), recorded);
}

void NcclCommunicator::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                       void* recv, std::span<const std::size_t> recv_counts,
                                       DataType dtype) {
  ncclDataType_t type = nccl_datatype(dtype);
  std::size_t send_offset = 0;
  std::size_t recv_offset = 0;
  TED_CHECK_NCCL(ncclGroupStart());
  for (int peer = 0; peer < size(); ++peer) {
    auto p = static_cast<std::size_t>(peer);
    if (send_counts[p])
      TED_CHECK_NCCL(ncclSend(byte_pointer(send, send_offset, dtype), send_counts[p], type, peer,
                              comm_, stream_));
    if (recv_counts[p])
      TED_CHECK_NCCL(ncclRecv(const_cast<char*>(byte_pointer(recv, recv_offset, dtype)),
                              recv_counts[p], type, peer, comm_, stream_));
    send_offset += send_counts[p];
    recv_offset += recv_counts[p];
  }
  TED_CHECK_NCCL(ncclGroupEnd());
}

void NcclCommunicator::do_broadcast(void* buffer, std::size_t count, DataType dtype, int root) {
  TED_CHECK_NCCL(ncclBroadcast(buffer, buffer, count, nccl_datatype(dtype), root, comm_, stream_));
}

void NcclCommunicator::do_barrier() {
  synchronize();
  TED_CHECK_MPI(MPI_Barrier(mpi_comm_));
}

}  // namespace ted::cuda
