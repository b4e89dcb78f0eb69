// What one optimizer step sends, per collective kind and TED group: the calls and the bytes a
// rank sends and receives (the ledger's convention, ledger.hpp), the step plan's collectives
// (step.hpp) added up. The tests hold it to the ledger of real runs, exactly; the projection
// turns it into time on any cluster.
#pragma once

#include <array>
#include <cstdint>

#include "ted/projection/step.hpp"

namespace ted::projection {

struct Traffic {
  std::uint64_t calls = 0;
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_recv = 0;
};
using StepTraffic = std::array<std::array<Traffic, kGroupKindCount>, kCollectiveOpCount>;

// Per rank, one optimizer step, the four TED groups (tensor, expert, expert-data,
// non-expert-data). A group of one rank still counts its calls, as the ledger does.
StepTraffic step_traffic(const StepShape& shape);

const Traffic& at(const StepTraffic& traffic, CollectiveOp op, GroupKind group);

}  // namespace ted::projection
