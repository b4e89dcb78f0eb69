// A rank's communicators for the TED grid: world plus its tensor, expert, expert-data and
// non-expert-data groups, all sharing one ledger so every collective of a schedule is counted.
#pragma once

#include <array>
#include <memory>

#include "ted/comm/communicator.hpp"
#include "ted/grid/process_grid.hpp"

namespace ted {

class TedGroups {
 public:
  // Collective over `world`: splits it once per group kind. `world` must outlive this object.
  TedGroups(Communicator& world, const ProcessGrid& grid);

  const ProcessGrid& grid() const { return grid_; }
  Communicator& world() { return world_; }
  Communicator& tensor() { return group(GroupKind::tensor); }
  Communicator& expert() { return group(GroupKind::expert); }
  Communicator& expert_data() { return group(GroupKind::expert_data); }
  Communicator& nonexpert_data() { return group(GroupKind::nonexpert_data); }
  Communicator& group(GroupKind kind);

 private:
  Communicator& world_;
  ProcessGrid grid_;
  std::array<std::unique_ptr<Communicator>, kGroupKindCount> groups_;
};

}  // namespace ted
