// A rank's communicators for the TED grid: its tensor, expert, expert-data and non-expert-data
// groups twice over, split once from each of two worlds.
//   group(kind):   device communicators, which carry device buffers (activations, gradients,
//                  parameters); they share one ledger, so every collective of a schedule is
//                  counted;
//   control(kind): host MPI communicators for the scalars that steer a run (loss sums, norms,
//                  overflow flags, timings), never recorded in the ledger.
// On the CPU both worlds are MPI over host memory (distinct communicators all the same).
#pragma once

#include <array>
#include <memory>

#include "ted/comm/communicator.hpp"
#include "ted/grid/process_grid.hpp"

namespace ted {

class TedGroups {
 public:
  // Collective over both worlds (the same ranks in the same order). Both must outlive this
  // object; `control_world` must carry host memory (MPI).
  TedGroups(Communicator& control_world, Communicator& device_world, const ProcessGrid& grid);
  // One world that carries host memory serves as both (the CPU backend).
  TedGroups(Communicator& world, const ProcessGrid& grid) : TedGroups(world, world, grid) {}

  const ProcessGrid& grid() const { return grid_; }
  Communicator& world() { return device_world_; }
  Communicator& tensor() { return group(GroupKind::tensor); }
  Communicator& expert() { return group(GroupKind::expert); }
  Communicator& expert_data() { return group(GroupKind::expert_data); }
  Communicator& nonexpert_data() { return group(GroupKind::nonexpert_data); }
  Communicator& group(GroupKind kind);
  Communicator& control(GroupKind kind = GroupKind::world);
  // Experts whole on every tensor rank (parallel.split_experts false): the T x D ranks that hold
  // the same experts (ProcessGrid::expert_replica_members), over which their gradients are
  // reduced and their optimizer state sharded; the ledger records it as the expert-data group.
  // At T = 1 the expert-data group itself. Split on first use, a collective over the world: every
  // rank asks for it at the same point (the trainer, building its optimizer).
  Communicator& expert_replicas();
  // Records every device group's collectives (the four TED groups' and the experts' replicas',
  // now or when first made) in `ledger`; null: none.
  void set_ledger(Ledger* ledger);

 private:
  Communicator& control_world_;
  Communicator& device_world_;
  ProcessGrid grid_;
  std::array<std::unique_ptr<Communicator>, kGroupKindCount> groups_, control_;
  std::unique_ptr<Communicator> expert_replicas_;
};

}  // namespace ted
