// A communicator for one group of ranks. Three backends implement it: MPI on host memory (the
// default), NCCL on GPU memory, and MPI on GPU memory staged through host buffers
// (staged_mpi_communicator.hpp); callers see only this interface.
//
// The public calls are non-virtual: they check the arguments (the same way on every rank, so
// a bad call throws everywhere before anything is sent), time the call and record it in the
// ledger, and hand over to the backend's do_* functions.
//
// Buffers are in the backend's memory (host for MPI, the GPU for NCCL and staged MPI); counts
// are elements.
// all_reduce and broadcast may work in place (send == recv); the others need disjoint buffers.
// all_to_all_v blocks are packed in rank order: block p starts at the sum of the counts before p.
//
// all_to_all_start is the nonblocking all-to-all: it returns at once with the transfer under
// way, so the caller can compute (the MoE layer's next chunk of experts) while it moves. Until
// wait() the send buffer must stay valid and unwritten and the receive buffer unread and
// unwritten (on NCCL: no work queued on the device that touches either). Ranks must start their
// collectives on one communicator in the same order, as for the blocking calls; several may be
// outstanding at once. A pending collective must not outlive its communicator or its ledger.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "ted/comm/ledger.hpp"
#include "ted/core/dtype.hpp"

namespace ted {

enum class CommBackend { mpi, nccl };
enum class ReduceOp { sum, max, min };

std::string_view to_string(CommBackend backend);
CommBackend parse_comm_backend(std::string_view name);  // "mpi" or "nccl"; ConfigError otherwise

// A collective started by a *_start call and not finished yet. wait() returns once this rank's
// part is done and the receive buffer holds the result (on NCCL: once the device's compute
// stream is ordered after it). progress() lets an MPI transfer move on while the caller computes;
// a no-op where transfers move by themselves. Destroying an unfinished one waits for it.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
  virtual void progress() {}
};

class Communicator {
 public:
  Communicator(GroupKind group, int rank, int size, Ledger* ledger)
      : group_(group), rank_(rank), size_(size), ledger_(ledger) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  GroupKind group() const { return group_; }
  virtual CommBackend backend() const = 0;
  // What carries the data, for CSV rows: "mpi", "mpi-staged" (GPU memory through host
  // buffers) or "nccl".
  virtual std::string name() const { return std::string(to_string(backend())); }

  Ledger* ledger() const { return ledger_; }
  void set_ledger(Ledger* ledger) { ledger_ = ledger; }

  void all_reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                  ReduceOp op = ReduceOp::sum);
  void all_gather(const void* send, void* recv, std::size_t count_per_rank, DataType dtype);
  void reduce_scatter(const void* send, void* recv, std::size_t count_per_rank, DataType dtype);
  void all_to_all(const void* send, void* recv, std::size_t count_per_peer, DataType dtype);
  // The nonblocking all_to_all (see the top of this file), checked like all_to_all. The ledger
  // gets one all_to_all entry with all_to_all's bytes, written when the pending collective
  // finishes (at wait() or when it is destroyed). Its time is the exposed time, not how long the
  // transfer was in flight: on the host, how long this rank was blocked in this call plus in
  // wait(); on NCCL, where wait() only orders the device's compute stream after the transfer,
  // how long that stream had to wait for it (events; nothing blocks the host).
  std::unique_ptr<PendingCollective> all_to_all_start(const void* send, void* recv,
                                                      std::size_t count_per_peer, DataType dtype);
  void all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                    std::span<const std::size_t> recv_counts, DataType dtype);
  void broadcast(void* buffer, std::size_t count, DataType dtype, int root);
  void barrier();

  // Typed forms: the element type picks the DataType.
  template <typename T>
  void all_reduce(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::sum) {
    check_span_sizes(send.size(), recv.size(), 1, 1);
    all_reduce(send.data(), recv.data(), send.size(), dtype_of<T>::value, op);
  }
  template <typename T>
  void all_gather(std::span<const T> send, std::span<T> recv) {
    check_span_sizes(send.size(), recv.size(), size_, 1);  // send * n == recv
    all_gather(send.data(), recv.data(), send.size(), dtype_of<T>::value);
  }
  template <typename T>
  void reduce_scatter(std::span<const T> send, std::span<T> recv) {
    check_span_sizes(send.size(), recv.size(), 1, size_);  // send == recv * n
    reduce_scatter(send.data(), recv.data(), recv.size(), dtype_of<T>::value);
  }
  template <typename T>
  void all_to_all(std::span<const T> send, std::span<T> recv) {
    check_span_sizes(send.size(), recv.size(), 1, 1);
    check_divisible(send.size());
    all_to_all(send.data(), recv.data(), send.size() / static_cast<std::size_t>(size_),
               dtype_of<T>::value);
  }

  // Splits this group like MPI_Comm_split: ranks with the same color form a new communicator,
  // ordered by key. Collective over this group. The child shares this communicator's ledger.
  virtual std::unique_ptr<Communicator> split(int color, int key, GroupKind group) const = 0;

  // Waits until the work queued on this rank's device has finished: the collectives NCCL
  // queues on a stream and the kernels before them. A recording ledger times a host
  // communicator's collective between two of these, so queued compute is not counted as
  // communication (a device communicator times its collectives with events instead).
  virtual void synchronize() {}

 protected:
  // A device communicator times its collectives on the device (comm/ledger.hpp): it returns a
  // timer here, and while a recorded collective is issued, timer() is that timer, whose start
  // and end the backend marks around the collective on the stream it runs on. Null (the
  // default): the collective is timed on the host, between two synchronize() calls.
  virtual std::unique_ptr<PendingTime> make_timer() { return nullptr; }
  PendingTime* timer() const { return timer_; }

  virtual void do_all_reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                             ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, void* recv, std::size_t count, DataType dtype) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t count,
                                 DataType dtype) = 0;
  virtual void do_all_to_all(const void* send, void* recv, std::size_t count, DataType dtype) = 0;
  // Starts the transfer and returns it unfinished. The default runs the blocking do_all_to_all
  // here and returns a collective with nothing left to wait for: correct on any backend, but
  // with no overlap.
  virtual std::unique_ptr<PendingCollective> do_all_to_all_start(const void* send, void* recv,
                                                                 std::size_t count, DataType dtype);
  virtual void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts,
                               void* recv, std::span<const std::size_t> recv_counts,
                               DataType dtype) = 0;
  virtual void do_broadcast(void* buffer, std::size_t count, DataType dtype, int root) = 0;
  virtual void do_barrier() = 0;

 private:
  // Every checked call goes through here: time it when the ledger records, then record it.
  template <typename Call>
  void recorded(CollectiveOp op, DataType dtype, std::uint64_t sent, std::uint64_t received,
                Call&& call);
  // Throws unless send * send_factor == recv * recv_factor.
  void check_span_sizes(std::size_t send, std::size_t recv, std::size_t send_factor,
                        std::size_t recv_factor) const;
  void check_divisible(std::size_t elements) const;

  GroupKind group_;
  int rank_;
  int size_;
  Ledger* ledger_;
  PendingTime* timer_ = nullptr;  // the recorded collective being issued, if timed on the device
};

// The backends' overrides of every do_* call, declared once: each backend's class says
// TED_COMMUNICATOR_OVERRIDES under `protected:` and defines them in its .cpp.
#define TED_COMMUNICATOR_OVERRIDES                                                                 \
  void do_all_reduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) \
      override;                                                                                    \
  void do_all_gather(const void* send, void* recv, std::size_t count, DataType dtype) override;    \
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType dtype)          \
      override;                                                                                    \
  void do_all_to_all(const void* send, void* recv, std::size_t count, DataType dtype) override;    \
  std::unique_ptr<PendingCollective> do_all_to_all_start(                                          \
      const void* send, void* recv, std::size_t count, DataType dtype) override;                   \
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,     \
                       std::span<const std::size_t> recv_counts, DataType dtype) override;         \
  void do_broadcast(void* buffer, std::size_t count, DataType dtype, int root) override;           \
  void do_barrier() override;

}  // namespace ted
