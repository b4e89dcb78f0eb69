// The communicators of the TED grid, device and control alike, hold exactly the ranks the grid
// says, in its order.
#include "catch.hpp"

#include <vector>

#include "comm/test_env.hpp"
#include "ted/grid/ted_groups.hpp"

namespace {
// Who is really in a group: its members' world ranks, gathered over its device communicator.
std::vector<int> gathered_members(ted::Communicator& comm, ted::Device& device, int world_rank) {
  const auto n = static_cast<std::size_t>(comm.size());
  std::int32_t me = world_rank;
  std::vector<std::int32_t> members(n);
  ted::DeviceBuffer send(device, 4), recv(device, 4 * n);
  device.copy_from_host(send.data(), &me, 4);
  comm.all_gather(send.data(), recv.data(), 1, ted::DataType::i32);
  device.copy_to_host(members.data(), recv.data(), 4 * n);
  return {members.begin(), members.end()};
}
}  // namespace

TEST_CASE("TED group communicators match the process grid for every layout") {
  auto& world = ted::test::world();
  auto& device = ted::test::device();
  for (const auto& layout : ted::all_layouts(world.size())) {
    ted::ProcessGrid grid(world.size(), layout);
    ted::TedGroups groups(ted::test::control(), world, grid);
    for (auto kind : {ted::GroupKind::world, ted::GroupKind::tensor, ted::GroupKind::expert,
                      ted::GroupKind::expert_data, ted::GroupKind::nonexpert_data}) {
      INFO(layout.to_string() << ", " << ted::to_string(kind) << " group");
      auto& comm = groups.group(kind);
      CHECK(comm.size() == grid.group_size(kind));
      CHECK(comm.rank() == grid.group_index(world.rank(), kind));
      CHECK(comm.group() == kind);
      auto expected = grid.group_members(world.rank(), kind);
      CHECK(gathered_members(comm, device, world.rank()) == expected);
      // The control group of the same kind: host scalars, same members, no ledger.
      auto& control = groups.control(kind);
      CHECK(control.name() == "mpi");
      const auto n = static_cast<std::size_t>(comm.size());
      std::int32_t me = world.rank();
      std::vector<std::int32_t> control_members(n);
      control.all_gather(&me, control_members.data(), 1, ted::DataType::i32);
      CHECK(std::vector<int>(control_members.begin(), control_members.end()) == expected);
    }
  }
}

TEST_CASE("the experts' replicas (whole experts) are the T x D ranks of the same expert rank") {
  auto& world = ted::test::world();
  auto& device = ted::test::device();
  for (const auto& layout : ted::all_layouts(world.size())) {
    INFO(layout.to_string());
    ted::ProcessGrid grid(world.size(), layout);
    ted::TedGroups groups(ted::test::control(), world, grid);
    ted::Ledger ledger;
    groups.set_ledger(&ledger);
    auto& comm = groups.expert_replicas();
    const auto expected = grid.expert_replica_members(world.rank());
    CHECK(comm.size() == layout.tensor * layout.data);
    CHECK(comm.group() == ted::GroupKind::expert_data);  // the ledger's expert-data group
    CHECK(gathered_members(comm, device, world.rank()) == expected);
    // Its collectives are recorded where the groups' are, under the expert-data group.
    CHECK(ledger.total(ted::CollectiveOp::all_gather, ted::GroupKind::expert_data).calls == 1);
    groups.set_ledger(nullptr);
  }
}
