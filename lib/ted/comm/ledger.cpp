#include "ted/comm/ledger.hpp"

#include <algorithm>
#include <string>

#include "ted/core/error.hpp"

namespace ted {

namespace {
constexpr std::array<std::string_view, kCollectiveOpCount> kOpNames = {
    "all_reduce",   "all_gather", "reduce_scatter", "all_to_all",
    "all_to_all_v", "broadcast",  "barrier"};
constexpr std::array<std::string_view, kGroupKindCount> kGroupNames = {
    "world", "tensor", "expert", "expert_data", "nonexpert_data", "custom"};

std::string strip(std::string_view name) {
  std::string out;
  for (char c : name)
    if (c != '_' && c != '-') out += c;
  return out;
}

template <std::size_t N>
std::string joined(const std::array<std::string_view, N>& names, std::size_t count) {
  std::string text;
  for (std::size_t i = 0; i < count; ++i) text += (i ? ", " : "") + std::string(names[i]);
  return text;
}
}  // namespace

std::string_view to_string(CollectiveOp op) {
  return kOpNames[static_cast<std::size_t>(op)];
}
std::string_view to_string(GroupKind group) {
  return kGroupNames[static_cast<std::size_t>(group)];
}

// Names match with or without '_' and '-' ("alltoall", "all-to-all", "all_to_all").
CollectiveOp parse_collective(std::string_view name) {
  for (std::size_t i = 0; i < kCollectiveOpCount; ++i)
    if (strip(kOpNames[i]) == strip(name)) return static_cast<CollectiveOp>(i);
  throw ConfigError("unknown collective '" + std::string(name) + "' (expected " +
                    joined(kOpNames, kCollectiveOpCount) + ")");
}

GroupKind parse_group(std::string_view name) {
  constexpr std::size_t selectable = kGroupKindCount - 1;  // "custom" is not a named group
  for (std::size_t i = 0; i < selectable; ++i)
    if (strip(kGroupNames[i]) == strip(name)) return static_cast<GroupKind>(i);
  throw ConfigError("unknown group '" + std::string(name) + "' (expected " +
                    joined(kGroupNames, selectable) + ")");
}

double bus_bytes(const LedgerEntry& e) {
  double n = e.group_size;
  double size = static_cast<double>(std::max(e.bytes_sent, e.bytes_recv));
  switch (e.op) {
    case CollectiveOp::all_reduce:
      return size * 2.0 * (n - 1) / n;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all:
    case CollectiveOp::all_to_all_v:
      return size * (n - 1) / n;
    case CollectiveOp::broadcast:
      return n > 1 ? size : 0.0;
    case CollectiveOp::barrier:
      return 0.0;
  }
  return 0.0;
}

LedgerTotal& LedgerTotal::operator+=(const LedgerTotal& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_recv += other.bytes_recv;
  bus_bytes += other.bus_bytes;
  seconds += other.seconds;
  return *this;
}

void Ledger::record(const LedgerEntry& entry) {
  if (!enabled_) return;
  LedgerTotal& slot =
      totals_[static_cast<std::size_t>(entry.op)][static_cast<std::size_t>(entry.group)];
  slot += LedgerTotal{1, entry.bytes_sent, entry.bytes_recv, bus_bytes(entry), entry.seconds};
  if (keep_entries_) entries_.push_back(entry);
}

void Ledger::record(const LedgerEntry& entry, std::unique_ptr<PendingTime> time) {
  if (!enabled_) return;
  LedgerEntry without = entry;
  without.seconds = 0;
  record(without);
  pending_.push_back({std::move(time), entry.op, entry.group,
                      keep_entries_ ? entries_.size() - 1 : static_cast<std::size_t>(-1)});
}

void Ledger::settle() const {
  for (Pending& p : pending_) {
    const double seconds = p.time->seconds();
    totals_[static_cast<std::size_t>(p.op)][static_cast<std::size_t>(p.group)].seconds += seconds;
    if (p.entry != static_cast<std::size_t>(-1)) entries_[p.entry].seconds = seconds;
  }
  pending_.clear();
}

void Ledger::clear() {
  pending_.clear();
  entries_.clear();
  totals_ = {};
}

std::span<const LedgerEntry> Ledger::entries() const {
  settle();
  return entries_;
}

const LedgerTotal& Ledger::total(CollectiveOp op, GroupKind group) const {
  settle();
  return totals_[static_cast<std::size_t>(op)][static_cast<std::size_t>(group)];
}

LedgerTotal Ledger::total(CollectiveOp op) const {
  LedgerTotal sum;
  for (const auto& per_group : totals_[static_cast<std::size_t>(op)]) sum += per_group;
  return sum;
}

LedgerTotal Ledger::total() const {
  LedgerTotal sum;
  for (std::size_t op = 0; op < kCollectiveOpCount; ++op)
    sum += total(static_cast<CollectiveOp>(op));
  return sum;
}

}  // namespace ted
