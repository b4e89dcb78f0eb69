// The ledger: a record of every collective a rank issues, so tests and experiments can prove
// what a schedule moves. One ledger per rank, shared by all of that rank's communicators.
//
// Byte convention (logical buffer sizes, independent of the algorithm the library picks; these
// are the counts docs/algorithm.md section 7 uses). n = group size, w = element size, counts in
// elements:
//   all_reduce(count)              sent = count*w            recv = count*w
//   all_gather(count per rank)     sent = count*w            recv = n*count*w
//   reduce_scatter(count per rank) sent = n*count*w          recv = count*w
//   all_to_all(count per peer)     sent = n*count*w          recv = n*count*w
//   all_to_all_v(counts)           sent = sum(send_counts)*w recv = sum(recv_counts)*w
//   broadcast(count, root)         root: sent = count*w, recv = 0; others: sent = 0, recv = count*w
//   barrier                        sent = 0                  recv = 0
// The block a rank keeps for itself (all_to_all, all_gather) is counted, so DTD's slicing
// divides the all-to-all bytes by exactly T.
//
// Times. On host memory (MPI) a call's wall time on this rank, the device's queued work waited
// for first. On a GPU communicator (NCCL) the collective's own time on the device, between two
// CUDA events around it on the stream it runs on: nothing waits for the device to take it, so
// compute and communication keep their overlap while measured, and the entry's seconds are read
// when the ledger is next read (the events have fired by then, or the read waits for them). A
// nonblocking all-to-all (Communicator::all_to_all_start) is one all_to_all entry, with the
// blocking call's bytes, written when it finishes; its time is the exposed time, how long it kept
// this rank's compute waiting: on the host, the time blocked in the start call plus in wait();
// on a GPU, from the compute stream reaching wait() to the transfer's end (0 if it was done).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "ted/core/dtype.hpp"

namespace ted {

enum class CollectiveOp : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  all_to_all_v,
  broadcast,
  barrier,
};
inline constexpr std::size_t kCollectiveOpCount = 7;

// Which of a rank's groups a communicator spans (docs/algorithm.md section 3); `custom` for any
// other split.
enum class GroupKind : std::uint8_t { world, tensor, expert, expert_data, nonexpert_data, custom };
inline constexpr std::size_t kGroupKindCount = 6;

std::string_view to_string(CollectiveOp op);
std::string_view to_string(GroupKind group);
// Throw ConfigError listing the accepted names.
CollectiveOp parse_collective(std::string_view name);
GroupKind parse_group(std::string_view name);

struct LedgerEntry {
  CollectiveOp op;
  GroupKind group;
  int group_size;
  DataType dtype;
  std::uint64_t bytes_sent;
  std::uint64_t bytes_recv;
  double seconds;  // wall time of the call on this rank (exposed time if nonblocking)
};

// Bytes this call puts on the links per rank, as nccl-tests defines bus bandwidth: the logical
// size (the larger of sent and received) times 2(n-1)/n for all-reduce, (n-1)/n for
// all-gather, reduce-scatter and all-to-all(-v), 1 for broadcast (at the root's size).
double bus_bytes(const LedgerEntry& entry);

// A collective's time that the device measures and the host reads later (its events).
class PendingTime {
 public:
  virtual ~PendingTime() = default;
  virtual double seconds() = 0;  // waits for the measurement where it is not done yet
};

struct LedgerTotal {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_recv = 0;
  double bus_bytes = 0;
  double seconds = 0;
  LedgerTotal& operator+=(const LedgerTotal& other);
};

class Ledger {
 public:
  // A disabled ledger records nothing (and its communicators skip the timing).
  void set_enabled(bool enabled) { enabled_ = enabled; }
  bool enabled() const { return enabled_; }
  // Totals are always kept while enabled; individual entries only when asked for (tests,
  // traces), since a long run issues millions of calls.
  void set_keep_entries(bool keep) { keep_entries_ = keep; }

  void record(const LedgerEntry& entry);
  // The entry with its seconds still to come from `time` (read at the next read of the ledger).
  void record(const LedgerEntry& entry, std::unique_ptr<PendingTime> time);
  void clear();

  // Every read settles the pending times first.
  std::span<const LedgerEntry> entries() const;
  const LedgerTotal& total(CollectiveOp op, GroupKind group) const;
  LedgerTotal total(CollectiveOp op) const;  // over all groups
  LedgerTotal total() const;                 // over everything

 private:
  struct Pending {
    std::unique_ptr<PendingTime> time;
    CollectiveOp op;
    GroupKind group;
    std::size_t entry;  // its index in entries_, or npos
  };
  void settle() const;  // reads the pending times into the entries and totals

  bool enabled_ = true;
  bool keep_entries_ = false;
  mutable std::vector<LedgerEntry> entries_;
  mutable std::array<std::array<LedgerTotal, kGroupKindCount>, kCollectiveOpCount> totals_{};
  mutable std::vector<Pending> pending_;
};

}  // namespace ted
