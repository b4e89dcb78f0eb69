#include "ted/grid/ted_groups.hpp"

#include "ted/core/error.hpp"

namespace ted {

TedGroups::TedGroups(Communicator& world, const ProcessGrid& grid) : world_(world), grid_(grid) {
  TED_CHECK(world.size() == grid.world_size(), "grid of " + std::to_string(grid.world_size()) +
                                                   " ranks on a world of " +
                                                   std::to_string(world.size()));
  int rank = world.rank();
  for (GroupKind kind :
       {GroupKind::tensor, GroupKind::expert, GroupKind::expert_data, GroupKind::nonexpert_data}) {
    // Key = world rank: members are ordered by world rank, which is the grid's group index.
    groups_[static_cast<std::size_t>(kind)] = world.split(grid.group_color(rank, kind), rank, kind);
  }
}

Communicator& TedGroups::group(GroupKind kind) {
  if (kind == GroupKind::world) return world_;
  auto& communicator = groups_[static_cast<std::size_t>(kind)];
  TED_CHECK(communicator != nullptr, "no TED group of kind " + std::string(to_string(kind)));
  return *communicator;
}

}  // namespace ted
