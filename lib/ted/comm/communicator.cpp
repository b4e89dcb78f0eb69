#include "ted/comm/communicator.hpp"

#include <chrono>
#include <numeric>
#include <string>
#include <utility>

#include "ted/core/error.hpp"

namespace ted {

std::string_view to_string(CommBackend backend) {
  return backend == CommBackend::mpi ? "mpi" : "nccl";
}

CommBackend parse_comm_backend(std::string_view name) {
  if (name == "mpi") return CommBackend::mpi;
  if (name == "nccl") return CommBackend::nccl;
  throw ConfigError("unknown communication backend '" + std::string(name) +
                    "' (expected mpi or nccl)");
}

namespace {

std::string where(std::string_view op, GroupKind group) {
  return std::string(op) + " on the " + std::string(to_string(group)) + " group";
}

// True when [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  if (!a || !b || !a_bytes || !b_bytes) return false;
  auto a0 = reinterpret_cast<std::uintptr_t>(a);
  auto b0 = reinterpret_cast<std::uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

void check_buffers(const void* send, std::size_t send_bytes, const void* recv,
                   std::size_t recv_bytes, bool in_place_allowed, std::string_view op,
                   GroupKind group) {
  if (send_bytes && !send) throw Error(where(op, group) + ": send buffer is null");
  if (recv_bytes && !recv) throw Error(where(op, group) + ": receive buffer is null");
  bool in_place = send == recv && send_bytes == recv_bytes;
  if (in_place && in_place_allowed) return;
  if (overlaps(send, send_bytes, recv, recv_bytes))
    throw Error(where(op, group) + ": send and receive buffers overlap");
}

// What the default do_all_to_all_start returns: the transfer ran in the start call.
class FinishedCollective final : public PendingCollective {
 public:
  void wait() override {}
};

// A backend's pending collective with its ledger entry, written once, after the backend's wait()
// has returned (also when it is destroyed without a wait). On the host the entry comes with the
// seconds spent in the start call and wait() adds its own; on a device its timer measures.
class RecordedCollective final : public PendingCollective {
 public:
  RecordedCollective(std::unique_ptr<PendingCollective> pending, Ledger& ledger, LedgerEntry entry,
                     std::unique_ptr<PendingTime> timer)
      : pending_(std::move(pending)), ledger_(ledger), entry_(entry), timer_(std::move(timer)) {}
  ~RecordedCollective() override {
    try {
      wait();
    } catch (...) {  // a destructor must not throw; the backend's own destructor waits again
    }
  }

  void wait() override {
    if (finished_) return;
    finished_ = true;  // a wait that threw is not repeated by the destructor
    if (timer_) {
      pending_->wait();
      ledger_.record(entry_, std::move(timer_));
      return;
    }
    auto start = std::chrono::steady_clock::now();
    pending_->wait();
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    entry_.seconds += elapsed.count();
    ledger_.record(entry_);
  }
  void progress() override {
    if (!finished_) pending_->progress();
  }

 private:
  std::unique_ptr<PendingCollective> pending_;
  Ledger& ledger_;
  LedgerEntry entry_;
  std::unique_ptr<PendingTime> timer_;
  bool finished_ = false;
};

}  // namespace

std::unique_ptr<PendingCollective> Communicator::do_all_to_all_start(const void* send, void* recv,
                                                                     std::size_t count,
                                                                     DataType dtype) {
  do_all_to_all(send, recv, count, dtype);
  return std::make_unique<FinishedCollective>();
}

template <typename Call>
void Communicator::recorded(CollectiveOp op, DataType dtype, std::uint64_t sent,
                            std::uint64_t received, Call&& call) {
  if (!ledger_ || !ledger_->enabled()) {
    call();
    return;
  }
  const LedgerEntry entry{op, group_, size_, dtype, sent, received, 0.0};
  if (auto timer = make_timer()) {  // on the device: events around it, read later
    timer_ = timer.get();
    try {
      call();
    } catch (...) {
      timer_ = nullptr;
      throw;
    }
    timer_ = nullptr;
    ledger_->record(entry, std::move(timer));
    return;
  }
  // Work queued before the collective (the kernels that produce its send buffer) is not its
  // time: on a device with a stream, wait for it before the clock starts.
  synchronize();
  auto start = std::chrono::steady_clock::now();
  call();
  synchronize();  // so the time is that of the collective, not of queueing it
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  LedgerEntry timed = entry;
  timed.seconds = elapsed.count();
  ledger_->record(timed);
}

void Communicator::all_reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                              ReduceOp op) {
  std::size_t bytes = count * dtype_size(dtype);
  check_buffers(send, bytes, recv, bytes, true, "all_reduce", group_);
  recorded(CollectiveOp::all_reduce, dtype, bytes, bytes,
           [&] { do_all_reduce(send, recv, count, dtype, op); });
}

void Communicator::all_gather(const void* send, void* recv, std::size_t count_per_rank,
                              DataType dtype) {
  std::size_t bytes = count_per_rank * dtype_size(dtype);
  std::size_t total = bytes * static_cast<std::size_t>(size_);
  check_buffers(send, bytes, recv, total, false, "all_gather", group_);
  recorded(CollectiveOp::all_gather, dtype, bytes, total,
           [&] { do_all_gather(send, recv, count_per_rank, dtype); });
}

void Communicator::reduce_scatter(const void* send, void* recv, std::size_t count_per_rank,
                                  DataType dtype) {
  std::size_t bytes = count_per_rank * dtype_size(dtype);
  std::size_t total = bytes * static_cast<std::size_t>(size_);
  check_buffers(send, total, recv, bytes, false, "reduce_scatter", group_);
  recorded(CollectiveOp::reduce_scatter, dtype, total, bytes,
           [&] { do_reduce_scatter(send, recv, count_per_rank, dtype); });
}

void Communicator::all_to_all(const void* send, void* recv, std::size_t count_per_peer,
                              DataType dtype) {
  std::size_t total = count_per_peer * dtype_size(dtype) * static_cast<std::size_t>(size_);
  check_buffers(send, total, recv, total, false, "all_to_all", group_);
  recorded(CollectiveOp::all_to_all, dtype, total, total,
           [&] { do_all_to_all(send, recv, count_per_peer, dtype); });
}

std::unique_ptr<PendingCollective> Communicator::all_to_all_start(const void* send, void* recv,
                                                                  std::size_t count_per_peer,
                                                                  DataType dtype) {
  std::size_t total = count_per_peer * dtype_size(dtype) * static_cast<std::size_t>(size_);
  check_buffers(send, total, recv, total, false, "all_to_all", group_);
  if (!ledger_ || !ledger_->enabled())
    return do_all_to_all_start(send, recv, count_per_peer, dtype);
  const LedgerEntry entry{CollectiveOp::all_to_all, group_, size_, dtype, total, total, 0.0};
  if (auto timer = make_timer()) {  // on the device: its exposed time, measured by events
    timer_ = timer.get();
    std::unique_ptr<PendingCollective> pending;
    try {
      pending = do_all_to_all_start(send, recv, count_per_peer, dtype);
    } catch (...) {
      timer_ = nullptr;
      throw;
    }
    timer_ = nullptr;
    return std::make_unique<RecordedCollective>(std::move(pending), *ledger_, entry,
                                                std::move(timer));
  }
  // Unlike recorded(), no synchronize() here: waiting for the stream would end the overlap
  // before it began. The time of the start call is only that of issuing the transfer.
  auto start = std::chrono::steady_clock::now();
  auto pending = do_all_to_all_start(send, recv, count_per_peer, dtype);
  std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  LedgerEntry timed = entry;
  timed.seconds = elapsed.count();
  return std::make_unique<RecordedCollective>(std::move(pending), *ledger_, timed, nullptr);
}

void Communicator::all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                                void* recv, std::span<const std::size_t> recv_counts,
                                DataType dtype) {
  auto peers = static_cast<std::size_t>(size_);
  if (send_counts.size() != peers || recv_counts.size() != peers)
    throw Error(where("all_to_all_v", group_) + ": " + std::to_string(send_counts.size()) +
                " send counts and " + std::to_string(recv_counts.size()) +
                " receive counts for a group of " + std::to_string(size_));
  std::size_t width = dtype_size(dtype);
  std::size_t sent =
      std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0}) * width;
  std::size_t received =
      std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}) * width;
  check_buffers(send, sent, recv, received, false, "all_to_all_v", group_);
  recorded(CollectiveOp::all_to_all_v, dtype, sent, received,
           [&] { do_all_to_all_v(send, send_counts, recv, recv_counts, dtype); });
}

void Communicator::broadcast(void* buffer, std::size_t count, DataType dtype, int root) {
  if (root < 0 || root >= size_)
    throw Error(where("broadcast", group_) + ": root " + std::to_string(root) +
                " is not a rank of a group of " + std::to_string(size_));
  std::size_t bytes = count * dtype_size(dtype);
  if (bytes && !buffer) throw Error(where("broadcast", group_) + ": buffer is null");
  bool is_root = rank_ == root;
  recorded(CollectiveOp::broadcast, dtype, is_root ? bytes : 0, is_root ? 0 : bytes,
           [&] { do_broadcast(buffer, count, dtype, root); });
}

void Communicator::barrier() {
  recorded(CollectiveOp::barrier, DataType::u8, 0, 0, [&] { do_barrier(); });
}

void Communicator::check_span_sizes(std::size_t send, std::size_t recv, std::size_t send_factor,
                                    std::size_t recv_factor) const {
  if (send * send_factor != recv * recv_factor)
    throw Error("collective on the " + std::string(to_string(group_)) + " group: send span of " +
                std::to_string(send) + " and receive span of " + std::to_string(recv) +
                " elements do not match for a group of " + std::to_string(size_));
}

void Communicator::check_divisible(std::size_t elements) const {
  if (elements % static_cast<std::size_t>(size_) != 0)
    throw Error("all_to_all on the " + std::string(to_string(group_)) +
                " group: " + std::to_string(elements) + " elements do not split evenly over " +
                std::to_string(size_) + " ranks");
}

}  // namespace ted
