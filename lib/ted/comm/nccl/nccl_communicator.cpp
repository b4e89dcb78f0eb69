#include "ted/comm/nccl/nccl_communicator.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"
#include "ted/device/cuda_check.hpp"
#include "ted/device/cuda_device.hpp"

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

// A group of NCCL calls that is ended however the scope is left: after a call inside it threw,
// ending the group drops it (NCCL returns the failure), where leaving it open would swallow
// every later NCCL call of this thread into a group that never runs.
class NcclGroup {
 public:
  NcclGroup() { TED_CHECK_NCCL(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    TED_CHECK_NCCL(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

// Watches the process's NCCL collectives from a thread of its own. NCCL reports a dead peer or
// a broken network only as an asynchronous error of the communicator, and a collective whose
// peer never arrives simply never ends: the host would wait in its next synchronisation until
// the job's time limit. So every collective is followed by an event; one still pending after
// TED_NCCL_TIMEOUT seconds (default 600), or a communicator with an asynchronous error, ends
// the process with one line naming the collective, after aborting the communicator.
// The CUDA runtime's current device belongs to a host thread and starts at GPU 0, and the first
// call that needs a context makes one there. So the watchdog's thread sets the GPU of each
// collective it watches before it queries the collective's event: without that every rank
// would make a context on GPU 0 (half a GiB of it each, where the node's tasks see every GPU),
// and on a GPU in exclusive-process mode that another rank holds, the query would fail.
class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog watchdog;
    return watchdog;
  }

  void watch(ncclComm_t comm, cudaStream_t stream, std::string what) {
    int device = 0;  // the caller's: the GPU of the communicator's stream
    TED_CHECK_CUDA(cudaGetDevice(&device));
    cudaEvent_t done = nullptr;
    TED_CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    TED_CHECK_CUDA(cudaEventRecord(done, stream));
    std::lock_guard lock(mutex_);
    watched_.push_back({comm, done, device, std::chrono::steady_clock::now(), std::move(what)});
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }

  // Before a communicator is destroyed: its collectives are no longer watched.
  void forget(ncclComm_t comm) {
    std::lock_guard lock(mutex_);
    for (auto it = watched_.begin(); it != watched_.end();) {
      if (it->comm == comm) {
        cudaEventDestroy(it->done);
        it = watched_.erase(it);
      } else {
        ++it;
      }
    }
  }

  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Watched {
    ncclComm_t comm;
    cudaEvent_t done;
    int device;
    std::chrono::steady_clock::time_point since;
    std::string what;
  };

  Watchdog() {
    if (const char* text = std::getenv("TED_NCCL_TIMEOUT")) timeout_ = std::atof(text);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  }

  void run() {
    std::unique_lock lock(mutex_);
    int current = -1;  // this thread's device; none set yet
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      const auto now = std::chrono::steady_clock::now();
      for (auto it = watched_.begin(); it != watched_.end();) {
        if (it->device != current) {
          const cudaError_t set = cudaSetDevice(it->device);
          if (set != cudaSuccess)
            die(*it, std::string("cannot be watched: cudaSetDevice(") + std::to_string(it->device) +
                         "): " + cudaGetErrorString(set));
          current = it->device;
        }
        const cudaError_t state = cudaEventQuery(it->done);
        if (state == cudaSuccess) {
          cudaEventDestroy(it->done);
          it = watched_.erase(it);
          continue;
        }
        ncclResult_t async = ncclSuccess;
        ncclCommGetAsyncError(it->comm, &async);
        const double waited = std::chrono::duration<double>(now - it->since).count();
        if (async != ncclSuccess && async != ncclInProgress)
          die(*it, std::string("failed: ") + ncclGetErrorString(async));
        if (state != cudaErrorNotReady)
          die(*it, std::string("failed on the GPU: ") + cudaGetErrorString(state));
        if (waited > timeout_)
          die(*it, "did not finish within " + format_seconds(timeout_) +
                       " s (a peer stopped or died; TED_NCCL_TIMEOUT sets the limit)");
        ++it;
      }
    }
  }

  static std::string format_seconds(double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", seconds);
    return text;
  }

  // One line, then the process ends: the collective cannot be finished or cancelled from here,
  // and MPI's launcher ends the other ranks when one exits with an error.
  [[noreturn]] void die(const Watched& item, const std::string& why) {
    std::fprintf(stderr, "error: rank %d: NCCL %s %s\n", rank_, item.what.c_str(), why.c_str());
    std::fflush(stderr);
    ncclCommAbort(item.comm);
    std::_Exit(1);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Watched> watched_;
  std::thread thread_;
  bool stopping_ = false;
  double timeout_ = 600.0;
  int rank_ = 0;
};

// A recorded collective's time on the device (comm/ledger.hpp): timing events at its start and
// end on the communication stream, and for a started all-to-all a third on the compute stream
// where it waits for the transfer. seconds() is the collective's own time, or, with the third,
// how long the compute stream waited (0 when the transfer was done before it got there).
class DeviceTimer final : public PendingTime {
 public:
  ~DeviceTimer() override {
    for (cudaEvent_t e : {start_, end_, reached_})
      if (e) cudaEventDestroy(e);
  }
  void mark_start(cudaStream_t stream) { mark(start_, stream); }
  void mark_end(cudaStream_t stream) { mark(end_, stream); }
  void mark_reached(cudaStream_t stream) { mark(reached_, stream); }

  double seconds() override {
    if (!end_ || !(start_ || reached_)) return 0.0;
    const cudaEvent_t from = reached_ ? reached_ : start_;
    TED_CHECK_CUDA(cudaEventSynchronize(end_));
    TED_CHECK_CUDA(cudaEventSynchronize(from));
    float ms = 0;
    TED_CHECK_CUDA(cudaEventElapsedTime(&ms, from, end_));
    return ms > 0 ? ms * 1e-3 : 0.0;
  }

 private:
  static void mark(cudaEvent_t& event, cudaStream_t stream) {
    if (!event) TED_CHECK_CUDA(cudaEventCreate(&event));
    TED_CHECK_CUDA(cudaEventRecord(event, stream));
  }
  cudaEvent_t start_ = nullptr, end_ = nullptr, reached_ = nullptr;
};

// Every NCCL operation of this process runs after the one issued before it, whatever its
// communicator. NCCL's kernels wait on the GPU for their peers, so two communicators' operations
// in flight at once can deadlock unless every rank runs them in the same order, and two streams
// promise no order (NCCL's documentation, "Using multiple NCCL communicators concurrently").
// Chained by one event per GPU, they run in the order the host issued them, which is the
// schedule's program order and so the same on every rank. With parallel.overlap > 1 the
// expert all-to-all of the next chunk still overlaps the experts' compute; it no longer runs
// at the same time as the tensor group's reduction. The emulated NCCL fails a pair that
// overlaps (tests: "overlap in 2 and 3 chunks" over NCCL on 4 ranks).
class LaunchOrder {
 public:
  static LaunchOrder& instance() {
    static LaunchOrder* order = new LaunchOrder;  // lives as long as the process, like NCCL's
    return *order;
  }
  // Before an operation is queued on `stream`: wait for the last one queued on this GPU.
  void before(cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    if (cudaEvent_t last = recorded(current()))
      TED_CHECK_CUDA(cudaStreamWaitEvent(stream, last, 0));
  }
  // After it: it is now the last one.
  void after(cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    const int device = current();
    if (last_.size() <= static_cast<std::size_t>(device)) last_.resize(device + 1, nullptr);
    cudaEvent_t& last = last_[static_cast<std::size_t>(device)];
    if (!last) TED_CHECK_CUDA(cudaEventCreateWithFlags(&last, cudaEventDisableTiming));
    TED_CHECK_CUDA(cudaEventRecord(last, stream));
  }

 private:
  static int current() {
    int device = 0;
    TED_CHECK_CUDA(cudaGetDevice(&device));
    return device;
  }
  cudaEvent_t recorded(int device) const {
    return static_cast<std::size_t>(device) < last_.size() ? last_[static_cast<std::size_t>(device)]
                                                           : nullptr;
  }
  std::mutex mutex_;
  std::vector<cudaEvent_t> last_;  // by device: recorded after the last operation queued
};

// An all-to-all queued on the communication stream, `done` recorded after it. wait() orders the
// compute stream after `done` without blocking the host; a recorded one first marks, on the
// compute stream, where it started waiting (Communicator::all_to_all_start: the exposed time).
class NcclPendingAllToAll final : public PendingCollective {
 public:
  NcclPendingAllToAll(cudaStream_t compute, std::unique_ptr<Event> done, DeviceTimer* timer)
      : compute_(compute), done_(std::move(done)), timer_(timer) {}
  ~NcclPendingAllToAll() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw
    }
  }

  void wait() override {
    if (finished_) return;
    finished_ = true;  // a wait that threw is not repeated by the destructor
    if (timer_) timer_->mark_reached(compute_);
    TED_CHECK_CUDA(cudaStreamWaitEvent(compute_, done_->get(), 0));
  }

 private:
  cudaStream_t compute_;
  std::unique_ptr<Event> done_;
  DeviceTimer* timer_;  // owned by the ledger's pending entry, which outlives this wait
  bool finished_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm mpi_comm, GroupKind group, Ledger* ledger,
                                   Device& device)
    : Communicator(group, mpi_comm_rank(mpi_comm), mpi_comm_size(mpi_comm), ledger),
      mpi_comm_(mpi_comm),
      device_(device),
      stream_(stream_of(device)) {
  // NCCL takes its buffers with cudaMalloc, which cannot use what the device's pool keeps.
  release_cached_memory(device);
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
  if (comm_) {
    Watchdog::instance().forget(comm_);
    ncclCommDestroy(comm_);
  }
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

std::unique_ptr<PendingTime> NcclCommunicator::make_timer() {
  return std::make_unique<DeviceTimer>();
}

void NcclCommunicator::before_first_collective() {
  if (connected_) return;
  connected_ = true;
  release_cached_memory(device_);
}

template <typename Issue>
void NcclCommunicator::on_comm_stream(const char* op, Issue&& issue) {
  before_first_collective();
  Event ready, done;
  TED_CHECK_CUDA(cudaEventRecord(ready.get(), stream_));
  TED_CHECK_CUDA(cudaStreamWaitEvent(comm_stream_, ready.get(), 0));
  LaunchOrder::instance().before(comm_stream_);
  auto* timer = static_cast<DeviceTimer*>(this->timer());  // made by make_timer above
  if (timer) timer->mark_start(comm_stream_);
  issue(comm_stream_);
  watch(op, comm_stream_);
  if (timer) timer->mark_end(comm_stream_);
  LaunchOrder::instance().after(comm_stream_);
  TED_CHECK_CUDA(cudaEventRecord(done.get(), comm_stream_));
  TED_CHECK_CUDA(cudaStreamWaitEvent(stream_, done.get(), 0));
}

void NcclCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count,
                                     DataType dtype, ReduceOp op) {
  on_comm_stream("all_reduce", [&](cudaStream_t s) {
    TED_CHECK_NCCL(ncclAllReduce(send, recv, count, nccl_datatype(dtype), nccl_op(op), comm_, s));
  });
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, std::size_t count,
                                     DataType dtype) {
  on_comm_stream("all_gather", [&](cudaStream_t s) {
    TED_CHECK_NCCL(ncclAllGather(send, recv, count, nccl_datatype(dtype), comm_, s));
  });
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                         DataType dtype) {
  on_comm_stream("reduce_scatter", [&](cudaStream_t s) {
    TED_CHECK_NCCL(ncclReduceScatter(send, recv, count, nccl_datatype(dtype), ncclSum, comm_, s));
  });
}

// NCCL has no all-to-all primitive: one grouped send/recv per peer, which NCCL runs at once.
void NcclCommunicator::issue_all_to_all(const void* send, void* recv, std::size_t count,
                                        DataType dtype, cudaStream_t stream) {
  ncclDataType_t type = nccl_datatype(dtype);
  NcclGroup group;
  for (int peer = 0; peer < size(); ++peer) {
    std::size_t offset = count * static_cast<std::size_t>(peer);
    TED_CHECK_NCCL(ncclSend(byte_pointer(send, offset, dtype), count, type, peer, comm_, stream));
    TED_CHECK_NCCL(ncclRecv(const_cast<char*>(byte_pointer(recv, offset, dtype)), count, type, peer,
                            comm_, stream));
  }
  group.end();
}

void NcclCommunicator::do_all_to_all(const void* send, void* recv, std::size_t count,
                                     DataType dtype) {
  on_comm_stream("all_to_all",
                 [&](cudaStream_t s) { issue_all_to_all(send, recv, count, dtype, s); });
}

// Nothing here waits on the host: the communication stream waits for the compute stream's
// queued work (so the send buffer is written and the receive buffer free), runs the transfer
// and records `done`, while the compute stream goes on with whatever the caller queues next.
std::unique_ptr<PendingCollective> NcclCommunicator::do_all_to_all_start(const void* send,
                                                                         void* recv,
                                                                         std::size_t count,
                                                                         DataType dtype) {
  before_first_collective();
  Event ready;
  TED_CHECK_CUDA(cudaEventRecord(ready.get(), stream_));
  TED_CHECK_CUDA(cudaStreamWaitEvent(comm_stream_, ready.get(), 0));
  LaunchOrder::instance().before(comm_stream_);
  auto* timer = static_cast<DeviceTimer*>(this->timer());
  if (timer) timer->mark_start(comm_stream_);
  issue_all_to_all(send, recv, count, dtype, comm_stream_);
  watch("all_to_all", comm_stream_);
  if (timer) timer->mark_end(comm_stream_);
  LaunchOrder::instance().after(comm_stream_);
  auto done = std::make_unique<Event>();
  TED_CHECK_CUDA(cudaEventRecord(done->get(), comm_stream_));
  return std::make_unique<NcclPendingAllToAll>(stream_, std::move(done), timer);
}

void NcclCommunicator::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                       void* recv, std::span<const std::size_t> recv_counts,
                                       DataType dtype) {
  ncclDataType_t type = nccl_datatype(dtype);
  on_comm_stream("all_to_all_v", [&](cudaStream_t s) {
    std::size_t send_offset = 0;
    std::size_t recv_offset = 0;
    NcclGroup group;
    for (int peer = 0; peer < size(); ++peer) {
      auto p = static_cast<std::size_t>(peer);
      if (send_counts[p])
        TED_CHECK_NCCL(
            ncclSend(byte_pointer(send, send_offset, dtype), send_counts[p], type, peer, comm_, s));
      if (recv_counts[p])
        TED_CHECK_NCCL(ncclRecv(const_cast<char*>(byte_pointer(recv, recv_offset, dtype)),
                                recv_counts[p], type, peer, comm_, s));
      send_offset += send_counts[p];
      recv_offset += recv_counts[p];
    }
    group.end();
  });
}

void NcclCommunicator::do_broadcast(void* buffer, std::size_t count, DataType dtype, int root) {
  on_comm_stream("broadcast", [&](cudaStream_t s) {
    TED_CHECK_NCCL(ncclBroadcast(buffer, buffer, count, nccl_datatype(dtype), root, comm_, s));
  });
}

void NcclCommunicator::watch(const char* op, cudaStream_t stream) {
  Watchdog::instance().watch(
      comm_, stream, std::string(op) + " on the " + std::string(to_string(group())) + " group");
}

void NcclCommunicator::do_barrier() {
  synchronize();
  TED_CHECK_MPI(MPI_Barrier(mpi_comm_));
}

}  // namespace ted::cuda
