#include "ted/grid/ted_groups.hpp"

#include "ted/core/error.hpp"

namespace ted {

TedGroups::TedGroups(Communicator& control_world, Communicator& device_world,
                     const ProcessGrid& grid)
    : control_world_(control_world), device_world_(device_world), grid_(grid) {
  for (Communicator* world : {&control_world, &device_world})
    TED_CHECK(world->size() == grid.world_size(), "grid of " + std::to_string(grid.world_size()) +
                                                      " ranks on a world of " +
                                                      std::to_string(world->size()));
  TED_CHECK(control_world.backend() == CommBackend::mpi && control_world.name() == "mpi",
            "the control communicator must be MPI on host memory, got " + control_world.name());
  TED_CHECK(control_world.rank() == device_world.rank(),
            "control and device worlds order their ranks differently");
  int rank = device_world.rank();
  for (GroupKind kind :
       {GroupKind::tensor, GroupKind::expert, GroupKind::expert_data, GroupKind::nonexpert_data}) {
    // Key = world rank: members are ordered by world rank, which is the grid's group index.
    const int color = grid.group_color(rank, kind);
    groups_[static_cast<std::size_t>(kind)] = device_world.split(color, rank, kind);
    control_[static_cast<std::size_t>(kind)] = control_world.split(color, rank, kind);
    control_[static_cast<std::size_t>(kind)]->set_ledger(nullptr);
  }
}

Communicator& TedGroups::group(GroupKind kind) {
  if (kind == GroupKind::world) return device_world_;
  auto& communicator = groups_[static_cast<std::size_t>(kind)];
  TED_CHECK(communicator != nullptr, "no TED group of kind " + std::string(to_string(kind)));
  return *communicator;
}

Communicator& TedGroups::expert_replicas() {
  if (grid_.layout().tensor == 1) return expert_data();
  if (!expert_replicas_) {
    const int rank = device_world_.rank();
    expert_replicas_ =
        device_world_.split(grid_.expert_replica_color(rank), rank, GroupKind::expert_data);
    expert_replicas_->set_ledger(expert_data().ledger());
  }
  return *expert_replicas_;
}

void TedGroups::set_ledger(Ledger* ledger) {
  for (auto& communicator : groups_)
    if (communicator) communicator->set_ledger(ledger);
  if (expert_replicas_) expert_replicas_->set_ledger(ledger);
}

Communicator& TedGroups::control(GroupKind kind) {
  if (kind == GroupKind::world) return control_world_;
  auto& communicator = control_[static_cast<std::size_t>(kind)];
  TED_CHECK(communicator != nullptr,
            "no TED control group of kind " + std::string(to_string(kind)));
  return *communicator;
}

}  // namespace ted
