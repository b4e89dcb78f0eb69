#include "ted/comm/mpi_communicator.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <mutex>
#include <string>
#include <vector>

#include <sched.h>
#include <sys/prctl.h>
#include <time.h>

#include "ted/core/error.hpp"

namespace ted {

namespace {
std::atomic<MpiWait> g_wait{MpiWait::blocking};

// Tests `request` until it completes: in a tight loop for the first `spin`, then every `pause`
// with the core left to others in between.
void test_until_done(MPI_Request* request, std::chrono::microseconds spin, long pause_ns) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    TED_CHECK_MPI(MPI_Test(request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (std::chrono::steady_clock::now() - start > spin) {
      timespec pause{0, pause_ns};
      nanosleep(&pause, nullptr);
    }
  }
}

// Completes `request` as mpi_wait() says. Sleeping: MPI_Test in a tight loop for the first
// 20 us (a peer that is running answers within them), then every 50 us with the core left
// to others in between; 50 us is a small part of the time slices (milliseconds) that an
// oversubscribed peer waits for its core, and the loop wakes that often to move MPI along.
void complete(MPI_Request* request) {
  if (g_wait.load(std::memory_order_relaxed) == MpiWait::blocking) {
    TED_CHECK_MPI(MPI_Wait(request, MPI_STATUS_IGNORE));
    return;
  }
  test_until_done(request, std::chrono::microseconds(20), 50000);
}

// A collective as mpi_wait() says: `blocking` when blocking; else `start`, its nonblocking form
// given the request to fill, completed by complete().
template <class Blocking, class Start>
void collective(Blocking blocking, Start start) {
  if (g_wait.load(std::memory_order_relaxed) == MpiWait::blocking) {
    blocking();
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  start(&request);
  complete(&request);
}
}  // namespace

void sleeping_barrier(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  TED_CHECK_MPI(MPI_Ibarrier(comm, &request));
  test_until_done(&request, std::chrono::microseconds(0), 1000000);
}

std::vector<int> node_cpus(MPI_Comm node) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) CPU_SET(0, &mask);
  cpu_set_t cpus;
  TED_CHECK_MPI(
      MPI_Allreduce(&mask, &cpus, static_cast<int>(sizeof mask), MPI_BYTE, MPI_BOR, node));
  std::vector<int> list;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &cpus)) list.push_back(cpu);
  return list;
}

double ranks_per_core(MPI_Comm comm) {
  MPI_Comm node;
  TED_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int size = 1;
  MPI_Comm_size(node, &size);
  const auto cpus = static_cast<int>(node_cpus(node).size());
  MPI_Comm_free(&node);
  double mine = static_cast<double>(size) / std::max(1, cpus), most = 0;
  TED_CHECK_MPI(MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE, MPI_MAX, comm));
  return most;
}

void set_mpi_wait(MpiWait wait) {
  g_wait.store(wait, std::memory_order_relaxed);
  // Linux lets a 50 us sleep end up to the timer slack later, 50 us by default: 115-125 us
  // measured. Sleeping, this thread asks for none, so a poll comes every 50-60 us.
  if (wait == MpiWait::sleep) prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
}

MpiWait mpi_wait() {
  return g_wait.load(std::memory_order_relaxed);
}

const char* to_string(MpiWait wait) {
  return wait == MpiWait::sleep ? "sleep" : "blocking";
}

MpiSession::MpiSession(int* argc, char*** argv, int thread_level, bool start) {
  if (!start) return;
  int initialized = 0;
  TED_CHECK_MPI(MPI_Initialized(&initialized));
  if (!initialized) {
    int provided = 0;
    TED_CHECK_MPI(MPI_Init_thread(argc, argv, thread_level, &provided));
    initialized_here_ = true;
  }
  TED_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_));
  TED_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &world_size_));
}

MpiSession::~MpiSession() {
  if (!initialized_here_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initialized_here_ && !finalized) MPI_Finalize();
}

namespace {

// MPI-3 counts are int; larger messages must be split by the caller.
int as_mpi_count(std::size_t count, const char* op) {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw Error(std::string(op) + ": " + std::to_string(count) +
                " elements exceed the MPI count limit of " + std::to_string(INT_MAX));
  return static_cast<int>(count);
}

// Element-wise reductions of 16-bit floats, done in fp32 and rounded back (as NCCL does).
template <float (*Load)(std::uint16_t), std::uint16_t (*Store)(float), ReduceOp Op>
void reduce_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  auto* a = static_cast<const std::uint16_t*>(in);
  auto* b = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) {
    float x = Load(a[i]);
    float y = Load(b[i]);
    float r = Op == ReduceOp::sum ? x + y : Op == ReduceOp::max ? std::max(x, y) : std::min(x, y);
    b[i] = Store(r);
  }
}

float load_f16(std::uint16_t bits) {
  return f16_bits_to_float(bits);
}
float load_bf16(std::uint16_t bits) {
  return bf16_bits_to_float(bits);
}
std::uint16_t store_f16(float value) {
  return float_to_f16_bits(value);
}
std::uint16_t store_bf16(float value) {
  return float_to_bf16_bits(value);
}

struct SixteenBitOps {
  MPI_Op f16[3];
  MPI_Op bf16[3];
};

const SixteenBitOps& sixteen_bit_ops() {
  static SixteenBitOps ops;
  static std::once_flag once;
  std::call_once(once, [] {
    TED_CHECK_MPI(MPI_Op_create(&reduce_16bit<load_f16, store_f16, ReduceOp::sum>, 1, &ops.f16[0]));
    TED_CHECK_MPI(MPI_Op_create(&reduce_16bit<load_f16, store_f16, ReduceOp::max>, 1, &ops.f16[1]));
    TED_CHECK_MPI(MPI_Op_create(&reduce_16bit<load_f16, store_f16, ReduceOp::min>, 1, &ops.f16[2]));
    TED_CHECK_MPI(
        MPI_Op_create(&reduce_16bit<load_bf16, store_bf16, ReduceOp::sum>, 1, &ops.bf16[0]));
    TED_CHECK_MPI(
        MPI_Op_create(&reduce_16bit<load_bf16, store_bf16, ReduceOp::max>, 1, &ops.bf16[1]));
    TED_CHECK_MPI(
        MPI_Op_create(&reduce_16bit<load_bf16, store_bf16, ReduceOp::min>, 1, &ops.bf16[2]));
  });
  return ops;
}

// One MPI request in flight. MPI is initialised for one thread's calls (MPI_THREAD_FUNNELED,
// but on the emulated GPU) and many MPI libraries move a nonblocking transfer only inside MPI
// calls, so progress() is an MPI_Test on the caller's thread rather than a progress thread.
// MPI_Wait and a successful MPI_Test set the request to MPI_REQUEST_NULL, which marks it finished.
class MpiPendingRequest final : public PendingCollective {
 public:
  explicit MpiPendingRequest(MPI_Request request) : request_(request) {}
  ~MpiPendingRequest() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }

  void wait() override {
    if (request_ != MPI_REQUEST_NULL) complete(&request_);
  }
  void progress() override {
    if (request_ == MPI_REQUEST_NULL) return;
    int done = 0;
    TED_CHECK_MPI(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
  }

 private:
  MPI_Request request_;
};

}  // namespace

int mpi_comm_rank(MPI_Comm comm) {
  int rank = 0;
  TED_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  return rank;
}

int mpi_comm_size(MPI_Comm comm) {
  int size = 0;
  TED_CHECK_MPI(MPI_Comm_size(comm, &size));
  return size;
}

MPI_Datatype mpi_datatype(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return MPI_FLOAT;
    case DataType::f64:
      return MPI_DOUBLE;
    case DataType::f16:
      return MPI_UINT16_T;
    case DataType::bf16:
      return MPI_UINT16_T;
    case DataType::i32:
      return MPI_INT32_T;
    case DataType::i64:
      return MPI_INT64_T;
    case DataType::u8:
      return MPI_UINT8_T;
  }
  throw Error("mpi_datatype: unknown DataType");
}

MPI_Op mpi_reduce_op(ReduceOp op, DataType dtype) {
  auto index = static_cast<std::size_t>(op);
  if (dtype == DataType::f16) return sixteen_bit_ops().f16[index];
  if (dtype == DataType::bf16) return sixteen_bit_ops().bf16[index];
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  throw Error("mpi_reduce_op: unknown ReduceOp");
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, GroupKind group, Ledger* ledger)
    : Communicator(group, mpi_comm_rank(comm), mpi_comm_size(comm), ledger), comm_(comm) {}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(Ledger* ledger) {
  MPI_Comm comm;
  TED_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiCommunicator>(comm, GroupKind::world, ledger);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, GroupKind group) const {
  MPI_Comm child;
  TED_CHECK_MPI(MPI_Comm_split(comm_, color, key, &child));
  return std::make_unique<MpiCommunicator>(child, group, ledger());
}

void MpiCommunicator::do_all_reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                                    ReduceOp op) {
  const void* source = send == recv ? MPI_IN_PLACE : send;
  const int n = as_mpi_count(count, "all_reduce");
  collective(
      [&] {
        TED_CHECK_MPI(
            MPI_Allreduce(source, recv, n, mpi_datatype(dtype), mpi_reduce_op(op, dtype), comm_));
      },
      [&](MPI_Request* r) {
        TED_CHECK_MPI(MPI_Iallreduce(source, recv, n, mpi_datatype(dtype), mpi_reduce_op(op, dtype),
                                     comm_, r));
      });
}

void MpiCommunicator::do_all_gather(const void* send, void* recv, std::size_t count,
                                    DataType dtype) {
  int n = as_mpi_count(count, "all_gather");
  as_mpi_count(count * static_cast<std::size_t>(size()), "all_gather");
  collective(
      [&] {
        TED_CHECK_MPI(
            MPI_Allgather(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), comm_));
      },
      [&](MPI_Request* r) {
        TED_CHECK_MPI(
            MPI_Iallgather(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), comm_, r));
      });
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                        DataType dtype) {
  int n = as_mpi_count(count, "reduce_scatter");
  as_mpi_count(count * static_cast<std::size_t>(size()), "reduce_scatter");
  collective(
      [&] {
        TED_CHECK_MPI(MPI_Reduce_scatter_block(send, recv, n, mpi_datatype(dtype),
                                               mpi_reduce_op(ReduceOp::sum, dtype), comm_));
      },
      [&](MPI_Request* r) {
        TED_CHECK_MPI(MPI_Ireduce_scatter_block(send, recv, n, mpi_datatype(dtype),
                                                mpi_reduce_op(ReduceOp::sum, dtype), comm_, r));
      });
}

void MpiCommunicator::do_all_to_all(const void* send, void* recv, std::size_t count,
                                    DataType dtype) {
  int n = as_mpi_count(count, "all_to_all");
  as_mpi_count(count * static_cast<std::size_t>(size()), "all_to_all");
  collective(
      [&] {
        TED_CHECK_MPI(
            MPI_Alltoall(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), comm_));
      },
      [&](MPI_Request* r) {
        TED_CHECK_MPI(
            MPI_Ialltoall(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), comm_, r));
      });
}

std::unique_ptr<PendingCollective> MpiCommunicator::do_all_to_all_start(const void* send,
                                                                        void* recv,
                                                                        std::size_t count,
                                                                        DataType dtype) {
  int n = as_mpi_count(count, "all_to_all");
  as_mpi_count(count * static_cast<std::size_t>(size()), "all_to_all");
  MPI_Request request = MPI_REQUEST_NULL;
  TED_CHECK_MPI(
      MPI_Ialltoall(send, n, mpi_datatype(dtype), recv, n, mpi_datatype(dtype), comm_, &request));
  return std::make_unique<MpiPendingRequest>(request);
}

void MpiCommunicator::do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                      void* recv, std::span<const std::size_t> recv_counts,
                                      DataType dtype) {
  auto peers = send_counts.size();
  std::vector<int> send_n(peers), send_displ(peers), recv_n(peers), recv_displ(peers);
  std::size_t send_offset = 0;
  std::size_t recv_offset = 0;
  for (std::size_t p = 0; p < peers; ++p) {
    send_n[p] = as_mpi_count(send_counts[p], "all_to_all_v");
    recv_n[p] = as_mpi_count(recv_counts[p], "all_to_all_v");
    send_displ[p] = as_mpi_count(send_offset, "all_to_all_v displacement");
    recv_displ[p] = as_mpi_count(recv_offset, "all_to_all_v displacement");
    send_offset += send_counts[p];
    recv_offset += recv_counts[p];
  }
  collective(
      [&] {
        TED_CHECK_MPI(MPI_Alltoallv(send, send_n.data(), send_displ.data(), mpi_datatype(dtype),
                                    recv, recv_n.data(), recv_displ.data(), mpi_datatype(dtype),
                                    comm_));
      },
      [&](MPI_Request* r) {
        TED_CHECK_MPI(MPI_Ialltoallv(send, send_n.data(), send_displ.data(), mpi_datatype(dtype),
                                     recv, recv_n.data(), recv_displ.data(), mpi_datatype(dtype),
                                     comm_, r));
      });
}

void MpiCommunicator::do_broadcast(void* buffer, std::size_t count, DataType dtype, int root) {
  const int n = as_mpi_count(count, "broadcast");
  collective([&] { TED_CHECK_MPI(MPI_Bcast(buffer, n, mpi_datatype(dtype), root, comm_)); },
             [&](MPI_Request* r) {
               TED_CHECK_MPI(MPI_Ibcast(buffer, n, mpi_datatype(dtype), root, comm_, r));
             });
}

void MpiCommunicator::do_barrier() {
  collective([&] { TED_CHECK_MPI(MPI_Barrier(comm_)); },
             [&](MPI_Request* r) { TED_CHECK_MPI(MPI_Ibarrier(comm_, r)); });
}

}  // namespace ted
