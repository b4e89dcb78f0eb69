#include "ted/projection/traffic.hpp"

namespace ted::projection {

StepTraffic step_traffic(const StepShape& shape) {
  StepTraffic traffic{};
  for (const PlannedCollective& c : step_collectives(shape)) {
    Traffic& t = traffic[static_cast<std::size_t>(c.op)][static_cast<std::size_t>(c.group)];
    t.calls += c.calls;
    t.bytes_sent += c.calls * c.bytes_sent;
    t.bytes_recv += c.calls * c.bytes_recv;
  }
  return traffic;
}

const Traffic& at(const StepTraffic& traffic, CollectiveOp op, GroupKind group) {
  return traffic[static_cast<std::size_t>(op)][static_cast<std::size_t>(group)];
}

}  // namespace ted::projection
