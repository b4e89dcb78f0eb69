// The emulated NCCL (include/nccl.h) over MPI. A communicator is an MPI communicator of its
// ranks, made from the unique id: the id names the MPI rank that made it, the members tell
// that rank who they are, and MPI_Comm_create_group joins them (collective over the members
// only, as ncclCommInitRank is). Operations are queued on the caller's stream; on the stream's
// thread each one starts its MPI transfers in the order the host issued the communicator's
// operations (NCCL's ordering rule, even across streams), then polls them until done, the
// communicator is aborted, or MPI reports an error (an asynchronous error, as NCCL's).
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "half.hpp"
#include "internal.hpp"
#include "ted_emu/control.hpp"
#include "ted_emu/work.hpp"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1, device = 0;
  void* buffers = nullptr;       // what NCCL takes from the GPU at set-up
  void* peer_buffers = nullptr;  // and at the first collective, for its connections to the peers
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t queued = 0;     // operations issued by the host
  std::uint64_t started = 0;    // operations whose transfers have been started, in order
  std::uint64_t in_flight = 0;  // queued and not finished
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};
};

namespace ted_emu {
namespace {

constexpr std::uint32_t kMagic = 0x7ed0ecc1;
constexpr int kInitTag = 30000;  // tags kInitTag..kInitTag+1499 on MPI_COMM_WORLD: set-up only
constexpr int kP2PTag = 7;

struct IdContents {
  std::uint32_t magic;
  int creator;  // MPI_COMM_WORLD rank that made the id
  std::uint64_t serial;
  std::uint64_t nonce;
};

enum class Kind { all_reduce, all_gather, reduce_scatter, broadcast, send, recv };

struct Transfer {
  Kind kind;
  const void* send;
  void* recv;
  std::size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  int peer;  // root of a broadcast
};

struct Pending {
  ncclComm_t comm;
  cudaStream_t stream;
  std::vector<Transfer> transfers;
};

thread_local int tls_group_depth = 0;
thread_local std::vector<Pending> tls_group;
thread_local ncclResult_t tls_group_error = ncclSuccess;
std::atomic<int> g_fail_countdown{0};
std::atomic<std::uint64_t> g_id_serial{0};
thread_local std::string tls_last_error;

// NCCL's kernels wait on the GPU for their peers, so operations of two communicators in flight
// at once on one GPU can deadlock unless every rank runs them in the same order, which two
// streams do not promise (NCCL's documentation, "Using multiple NCCL communicators
// concurrently"). The emulated NCCL fails such a pair: which communicator has an operation
// running on each GPU of this process, and how many.
struct Running {
  ncclComm_t comm = nullptr;
  int count = 0;
};
std::mutex g_running_mutex;
std::vector<Running> g_running;  // by device

// Marks comm's operation as running on its GPU; false if another communicator's is running.
bool begin_running(ncclComm_t comm) {
  std::lock_guard lock(g_running_mutex);
  if (g_running.size() <= static_cast<std::size_t>(comm->device))
    g_running.resize(comm->device + 1);
  Running& running = g_running[static_cast<std::size_t>(comm->device)];
  if (running.count > 0 && running.comm != comm) return false;
  running.comm = comm;
  ++running.count;
  return true;
}

void end_running(ncclComm_t comm) {
  std::lock_guard lock(g_running_mutex);
  Running& running = g_running[static_cast<std::size_t>(comm->device)];
  if (running.comm == comm && --running.count == 0) running.comm = nullptr;
}

ncclResult_t fail(ncclResult_t rc, const std::string& why) {
  tls_last_error = why;
  explain("NCCL: " + why);
  return rc;
}

std::size_t width(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

MPI_Datatype mpi_type(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return MPI_INT8_T;
    case ncclUint8:
      return MPI_UINT8_T;
    case ncclInt32:
      return MPI_INT32_T;
    case ncclUint32:
      return MPI_UINT32_T;
    case ncclInt64:
      return MPI_INT64_T;
    case ncclUint64:
      return MPI_UINT64_T;
    case ncclFloat16:
    case ncclBfloat16:
      return MPI_UINT16_T;  // reduced by the operations below
    case ncclFloat32:
      return MPI_FLOAT;
    case ncclFloat64:
      return MPI_DOUBLE;
  }
  return MPI_DATATYPE_NULL;
}

// 16-bit reductions: widen, combine in fp32, round once per step (what a GPU's half adds do).
template <bool kBf16, int kOp>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = kBf16 ? bf16_to_float(a[i]) : f16_to_float(a[i]);
    const float y = kBf16 ? bf16_to_float(b[i]) : f16_to_float(b[i]);
    const float r = kOp == 0   ? x + y
                    : kOp == 1 ? x * y
                    : kOp == 2 ? std::max(x, y)
                               : std::min(x, y);
    b[i] = kBf16 ? float_to_bf16(r) : float_to_f16(r);
  }
}

MPI_Op mpi_op(ncclRedOp_t op, ncclDataType_t type) {
  static MPI_Op sixteen[2][4];
  static std::once_flag made;
  std::call_once(made, [] {
    MPI_Op_create(&reduce16<false, 0>, 1, &sixteen[0][0]);
    MPI_Op_create(&reduce16<false, 1>, 1, &sixteen[0][1]);
    MPI_Op_create(&reduce16<false, 2>, 1, &sixteen[0][2]);
    MPI_Op_create(&reduce16<false, 3>, 1, &sixteen[0][3]);
    MPI_Op_create(&reduce16<true, 0>, 1, &sixteen[1][0]);
    MPI_Op_create(&reduce16<true, 1>, 1, &sixteen[1][1]);
    MPI_Op_create(&reduce16<true, 2>, 1, &sixteen[1][2]);
    MPI_Op_create(&reduce16<true, 3>, 1, &sixteen[1][3]);
  });
  const int index = op == ncclSum ? 0 : op == ncclProd ? 1 : op == ncclMax ? 2 : 3;
  if (type == ncclFloat16) return sixteen[0][index];
  if (type == ncclBfloat16) return sixteen[1][index];
  const MPI_Op standard[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  return standard[index];
}

bool mpi_ready(std::string* why) {
  int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    *why = "the emulated NCCL runs over MPI, which is not initialised";
    return false;
  }
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE) {
    *why = "the emulated NCCL needs MPI initialised with MPI_THREAD_MULTIPLE (streams call MPI)";
    return false;
  }
  return true;
}

// Starts one operation's MPI transfers (on the stream's thread, in issue order).
int start(ncclComm_t comm, const std::vector<Transfer>& transfers,
          std::vector<MPI_Request>* requests, std::vector<std::vector<char>>* scratch) {
  for (const Transfer& t : transfers) {
    const int count = static_cast<int>(t.count);
    const MPI_Datatype type = mpi_type(t.type);
    const std::size_t bytes = t.count * width(t.type);
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_SUCCESS;
    switch (t.kind) {
      case Kind::all_reduce:
        rc = MPI_Iallreduce(t.send == t.recv ? MPI_IN_PLACE : t.send, t.recv, count, type,
                            mpi_op(t.op, t.type), comm->mpi, &request);
        break;
      case Kind::all_gather: {
        const char* mine =
            static_cast<const char*>(t.recv) + static_cast<std::size_t>(comm->rank) * bytes;
        rc = MPI_Iallgather(t.send == mine ? MPI_IN_PLACE : t.send, count, type, t.recv, count,
                            type, comm->mpi, &request);
        break;
      }
      case Kind::reduce_scatter: {
        // From a copy of the input, so an in-place call (recv inside send) reads it whole.
        scratch->emplace_back(static_cast<const char*>(t.send),
                              static_cast<const char*>(t.send) + bytes * comm->size);
        rc = MPI_Ireduce_scatter_block(scratch->back().data(), t.recv, count, type,
                                       mpi_op(t.op, t.type), comm->mpi, &request);
        break;
      }
      case Kind::broadcast:
        if (comm->rank == t.peer && t.send != t.recv) std::memmove(t.recv, t.send, bytes);
        rc = MPI_Ibcast(t.recv, count, type, t.peer, comm->mpi, &request);
        break;
      case Kind::send:
        rc = MPI_Isend(t.send, count, type, t.peer, kP2PTag, comm->mpi, &request);
        break;
      case Kind::recv:
        rc = MPI_Irecv(t.recv, count, type, t.peer, kP2PTag, comm->mpi, &request);
        break;
    }
    if (rc != MPI_SUCCESS) return rc;
    requests->push_back(request);
  }
  return MPI_SUCCESS;
}

// What the stream's thread runs for one queued operation.
void execute(ncclComm_t comm, std::uint64_t serial, const std::vector<Transfer>& transfers) {
  {
    std::unique_lock lock(comm->mutex);
    comm->changed.wait(lock, [&] { return comm->started == serial || comm->aborted.load(); });
  }
  const bool alone = begin_running(comm);
  if (!alone) {
    comm->async_error = ncclInvalidUsage;
    explain("NCCL: an operation started on GPU " + std::to_string(comm->device) +
            " while another communicator's was in flight there: concurrent communicators can "
            "deadlock unless every rank orders them the same way (order them: one stream, or "
            "events between their streams)");
  }
  std::vector<MPI_Request> requests;
  std::vector<std::vector<char>> scratch;
  int rc = comm->aborted ? MPI_SUCCESS : start(comm, transfers, &requests, &scratch);
  {
    std::lock_guard lock(comm->mutex);
    ++comm->started;
  }
  comm->changed.notify_all();
  auto pause = std::chrono::microseconds(0);
  while (rc == MPI_SUCCESS && !comm->aborted) {
    int done = 0;
    rc =
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) break;
    if (pause.count() == 0) {
      std::this_thread::yield();
      pause = std::chrono::microseconds(1);
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }
  if (rc != MPI_SUCCESS) {
    comm->async_error = ncclSystemError;
    explain("NCCL: an MPI transfer failed (MPI error " + std::to_string(rc) + ")");
  }
  if (alone) end_running(comm);
  {
    std::lock_guard lock(comm->mutex);
    --comm->in_flight;
  }
  comm->changed.notify_all();
}

// NCCL connects a communicator to its peers lazily, at its first collective, and takes the
// connections' buffers from the GPU then (cudaMalloc, not the pool): memory a run must have left
// free after its set-up.
constexpr std::size_t kPeerBufferBytes = std::size_t{4} << 20;
ncclResult_t connect(ncclComm_t comm) {
  if (comm->peer_buffers || comm->size < 2) return ncclSuccess;
  const std::size_t bytes = kPeerBufferBytes * static_cast<std::size_t>(comm->size - 1);
  if (cudaMalloc(&comm->peer_buffers, bytes) != cudaSuccess) {
    cudaGetLastError();
    comm->peer_buffers = nullptr;
    return fail(ncclUnhandledCudaError,
                "cudaMalloc of " + std::to_string(bytes >> 20) + " MiB for the connections to " +
                    std::to_string(comm->size - 1) + (comm->size == 2 ? " peer" : " peers") +
                    " failed (NCCL connects at a communicator's first collective)");
  }
  return ncclSuccess;
}

// Queues an operation (one call, or the calls of a group on one communicator).
ncclResult_t issue(Pending pending) {
  ncclComm_t comm = pending.comm;
  if (ncclResult_t rc = connect(comm)) return rc;
  std::uint64_t serial;
  {
    std::lock_guard lock(comm->mutex);
    serial = comm->queued++;
    ++comm->in_flight;
  }
  auto transfers = std::make_shared<std::vector<Transfer>>(std::move(pending.transfers));
  const cudaError_t rc = ted_emu::detail::enqueue(
      pending.stream, [comm, serial, transfers] { execute(comm, serial, *transfers); });
  if (rc != cudaSuccess) {
    // The stream is gone or its GPU failed: count the operation as done so that later ones
    // (and destruction) do not wait for it.
    std::lock_guard lock(comm->mutex);
    ++comm->started;
    --comm->in_flight;
    comm->changed.notify_all();
    return fail(ncclUnhandledCudaError,
                std::string("cannot queue on the stream: ") + cudaGetErrorString(rc));
  }
  return ncclSuccess;
}

// Checks a call and queues it, or adds it to the open group.
ncclResult_t submit(ncclComm_t comm, cudaStream_t stream, const Transfer& t) {
  ncclResult_t rc = ncclSuccess;
  std::string why;
  const std::size_t bytes = t.count * width(t.type);
  const int failing = g_fail_countdown.load();
  if (failing > 0 && g_fail_countdown.fetch_sub(1) == 1) {
    rc = ncclInvalidArgument;
    why = "a failure injected by the test (ted_emu::fail_nccl_call)";
  } else if (!comm || comm->aborted) {
    rc = ncclInvalidArgument;
    why = "no communicator (or an aborted one)";
  } else if (!width(t.type)) {
    rc = ncclInvalidArgument;
    why = "unknown data type";
  } else if (t.count > static_cast<std::size_t>(INT_MAX)) {
    rc = ncclInvalidArgument;
    why = "count above the emulator's limit of INT_MAX";
  } else if ((t.kind == Kind::send || t.kind == Kind::recv || t.kind == Kind::broadcast) &&
             (t.peer < 0 || t.peer >= comm->size)) {
    rc = ncclInvalidArgument;
    why = "peer " + std::to_string(t.peer) + " outside a communicator of " +
          std::to_string(comm->size);
  } else if (t.op == ncclAvg) {
    rc = ncclInvalidArgument;
    why = "ncclAvg is not emulated";
  } else if (bytes) {
    std::size_t send_bytes = 0, recv_bytes = 0;
    switch (t.kind) {
      case Kind::all_reduce:
        send_bytes = recv_bytes = bytes;
        break;
      case Kind::all_gather:
        send_bytes = bytes;
        recv_bytes = bytes * comm->size;
        break;
      case Kind::reduce_scatter:
        send_bytes = bytes * comm->size;
        recv_bytes = bytes;
        break;
      case Kind::broadcast:
        send_bytes = comm->rank == t.peer ? bytes : 0;
        recv_bytes = bytes;
        break;
      case Kind::send:
        send_bytes = bytes;
        break;
      case Kind::recv:
        recv_bytes = bytes;
        break;
    }
    if ((send_bytes && !device_range(t.send, send_bytes)) ||
        (recv_bytes && !device_range(t.recv, recv_bytes))) {
      rc = ncclInvalidArgument;
      why = "a buffer of " + std::to_string(std::max(send_bytes, recv_bytes)) +
            " bytes is not inside one device allocation";
    }
  }
  if (rc != ncclSuccess) {
    if (tls_group_depth > 0) tls_group_error = rc;
    return fail(rc, why);
  }
  if (tls_group_depth == 0) return issue(Pending{comm, stream, {t}});
  for (Pending& p : tls_group)
    if (p.comm == comm) {
      if (p.stream != stream) {
        tls_group_error = ncclInvalidUsage;
        return fail(ncclInvalidUsage, "a group puts one communicator's calls on two streams");
      }
      p.transfers.push_back(t);
      return ncclSuccess;
    }
  tls_group.push_back(Pending{comm, stream, {t}});
  return ncclSuccess;
}

}  // namespace

void fail_nccl_call(int after) {
  g_fail_countdown = after;
}

}  // namespace ted_emu

using namespace ted_emu;

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) {
  return tls_last_error.c_str();
}

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::string why;
  if (!id) return fail(ncclInvalidArgument, "null id");
  if (!mpi_ready(&why)) return fail(ncclInvalidUsage, why);
  IdContents contents{kMagic, 0, g_id_serial.fetch_add(1), std::random_device{}()};
  MPI_Comm_rank(MPI_COMM_WORLD, &contents.creator);
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, &contents, sizeof contents);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  std::string why;
  if (!out || nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "bad rank or size");
  if (!mpi_ready(&why)) return fail(ncclInvalidUsage, why);
  IdContents contents;
  std::memcpy(&contents, id.internal, sizeof contents);
  if (contents.magic != kMagic) return fail(ncclInvalidArgument, "not an id of ncclGetUniqueId");
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const int tag = kInitTag + static_cast<int>((contents.serial % 500) * 3);
  // Rendezvous at the id's maker: who holds which rank.
  std::vector<int> world_of(nranks, -1);
  if (world_rank == contents.creator) {
    world_of[rank] = world_rank;
    for (int i = 1; i < nranks; ++i) {
      int hello[2];
      MPI_Recv(hello, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (hello[0] >= 0 && hello[0] < nranks) world_of[hello[0]] = hello[1];
    }
    for (int r = 0; r < nranks; ++r)
      if (r != rank)
        MPI_Send(world_of.data(), nranks, MPI_INT, world_of[r], tag + 1, MPI_COMM_WORLD);
  } else {
    int hello[2] = {rank, world_rank};
    MPI_Send(hello, 2, MPI_INT, contents.creator, tag, MPI_COMM_WORLD);
    MPI_Recv(world_of.data(), nranks, MPI_INT, contents.creator, tag + 1, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
  }
  if (std::count(world_of.begin(), world_of.end(), -1))
    return fail(ncclInvalidUsage, "two members claimed the same rank");
  MPI_Group world, members;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Group_incl(world, nranks, world_of.data(), &members);
  auto comm = std::make_unique<ncclComm>();
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag + 2, &comm->mpi);
  MPI_Group_free(&members);
  MPI_Group_free(&world);
  if (rc != MPI_SUCCESS) return fail(ncclSystemError, "MPI_Comm_create_group failed");
  comm->rank = rank;
  comm->size = nranks;
  cudaGetDevice(&comm->device);
  // NCCL takes its buffers from the GPU (cudaMalloc, not the pool) when it sets up.
  if (cudaMalloc(&comm->buffers, std::size_t{4} << 20) != cudaSuccess) {
    cudaGetLastError();
    MPI_Comm_free(&comm->mpi);
    return fail(ncclUnhandledCudaError, "cudaMalloc of the communicator's buffers failed");
  }
  *out = comm.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  {
    std::unique_lock lock(comm->mutex);
    comm->changed.wait(lock, [&] { return comm->in_flight == 0 || comm->aborted.load(); });
  }
  if (!comm->aborted) MPI_Comm_free(&comm->mpi);
  cudaFree(comm->buffers);
  cudaFree(comm->peer_buffers);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  comm->aborted = true;
  comm->changed.notify_all();
  {
    std::unique_lock lock(comm->mutex);  // the streams' threads leave their polls
    comm->changed.wait(lock, [&] { return comm->in_flight == 0; });
  }
  // The MPI communicator is left alone: transfers of it may still be posted.
  cudaFree(comm->buffers);
  cudaFree(comm->peer_buffers);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return ncclInvalidArgument;
  *async_error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return ncclInvalidArgument;
  *device = comm->device;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return submit(comm, stream, {Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, stream,
                {Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return submit(comm, stream,
                {Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0});
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, std::size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return submit(comm, stream,
                {Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root});
}

ncclResult_t ncclSend(const void* sendbuff, std::size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, stream, {Kind::send, sendbuff, nullptr, count, datatype, ncclSum, peer});
}

ncclResult_t ncclRecv(void* recvbuff, std::size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(comm, stream, {Kind::recv, nullptr, recvbuff, count, datatype, ncclSum, peer});
}

ncclResult_t ncclGroupStart() {
  ++tls_group_depth;
  return ncclSuccess;
}

// Queues the group's calls when the outermost group ends. A group in which a call failed is
// dropped whole, and the failure returned (nothing half-sent).
ncclResult_t ncclGroupEnd() {
  if (tls_group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--tls_group_depth > 0) return ncclSuccess;
  std::vector<Pending> group = std::move(tls_group);
  tls_group.clear();
  const ncclResult_t error = tls_group_error;
  tls_group_error = ncclSuccess;
  if (error != ncclSuccess) return error;
  ncclResult_t rc = ncclSuccess;
  for (Pending& p : group)
    if (ncclResult_t r = issue(std::move(p)); r != ncclSuccess && rc == ncclSuccess) rc = r;
  return rc;
}
