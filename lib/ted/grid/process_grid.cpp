#include "ted/grid/process_grid.hpp"

#include <string>

#include "ted/core/error.hpp"

namespace ted {

std::string Layout::to_string() const {
  return "T=" + std::to_string(tensor) + " Ep=" + std::to_string(expert) +
         " D=" + std::to_string(data);
}

Layout resolve_layout(int world_size, int tensor, int expert, int data) {
  auto positive = [](int value, const char* name) {
    if (value <= 0)
      throw ConfigError(std::string("layout: ") + name + " must be at least 1, got " +
                        std::to_string(value));
  };
  positive(world_size, "rank count");
  positive(tensor, "tensor size T");
  positive(expert, "expert size Ep");
  if (data < 0) positive(data, "data size D");
  int tensor_expert = tensor * expert;
  if (data == 0) {
    if (world_size % tensor_expert != 0)
      throw ConfigError("layout: T=" + std::to_string(tensor) + " x Ep=" + std::to_string(expert) +
                        " = " + std::to_string(tensor_expert) + " does not divide the " +
                        std::to_string(world_size) + " ranks");
    data = world_size / tensor_expert;
  }
  Layout layout{tensor, expert, data};
  if (layout.world_size() != world_size)
    throw ConfigError("layout: " + layout.to_string() + " makes " +
                      std::to_string(layout.world_size()) + " ranks, but " +
                      std::to_string(world_size) + " were launched (T x Ep x D must equal them)");
  return layout;
}

ProcessGrid::ProcessGrid(int world_size, Layout layout) : world_size_(world_size), layout_(layout) {
  resolve_layout(world_size, layout.tensor, layout.expert, layout.data);
}

void ProcessGrid::check_rank(int rank) const {
  if (rank < 0 || rank >= world_size_)
    throw Error("rank " + std::to_string(rank) + " outside a grid of " +
                std::to_string(world_size_));
}

GridCoords ProcessGrid::coords(int rank) const {
  check_rank(rank);
  return {rank % layout_.tensor, (rank / layout_.tensor) % layout_.expert,
          rank / (layout_.tensor * layout_.expert)};
}

int ProcessGrid::rank_of(GridCoords c) const {
  return c.tensor + layout_.tensor * (c.expert + layout_.expert * c.data);
}

int ProcessGrid::group_size(GroupKind kind) const {
  switch (kind) {
    case GroupKind::world:
      return world_size_;
    case GroupKind::tensor:
      return layout_.tensor;
    case GroupKind::expert:
      return layout_.expert;
    case GroupKind::expert_data:
      return layout_.data;
    case GroupKind::nonexpert_data:
      return layout_.expert * layout_.data;
    case GroupKind::custom:
      break;
  }
  throw Error("ProcessGrid: a custom group has no size");
}

int ProcessGrid::group_color(int rank, GroupKind kind) const {
  GridCoords c = coords(rank);
  switch (kind) {
    case GroupKind::world:
      return 0;
    case GroupKind::tensor:
      return c.expert + layout_.expert * c.data;  // same (e, d)
    case GroupKind::expert:
      return c.tensor + layout_.tensor * c.data;  // same (t, d)
    case GroupKind::expert_data:
      return c.tensor + layout_.tensor * c.expert;  // same (t, e)
    case GroupKind::nonexpert_data:
      return c.tensor;  // same t
    case GroupKind::custom:
      break;
  }
  throw Error("ProcessGrid: a custom group has no color");
}

int ProcessGrid::group_index(int rank, GroupKind kind) const {
  GridCoords c = coords(rank);
  switch (kind) {
    case GroupKind::world:
      return rank;
    case GroupKind::tensor:
      return c.tensor;
    case GroupKind::expert:
      return c.expert;
    case GroupKind::expert_data:
      return c.data;
    case GroupKind::nonexpert_data:
      return c.expert + layout_.expert * c.data;
    case GroupKind::custom:
      break;
  }
  throw Error("ProcessGrid: a custom group has no index");
}

std::vector<int> ProcessGrid::group_members(int rank, GroupKind kind) const {
  GridCoords c = coords(rank);
  std::vector<int> members;
  switch (kind) {
    case GroupKind::world:
      for (int r = 0; r < world_size_; ++r) members.push_back(r);
      break;
    case GroupKind::tensor:
      for (int t = 0; t < layout_.tensor; ++t) members.push_back(rank_of({t, c.expert, c.data}));
      break;
    case GroupKind::expert:
      for (int e = 0; e < layout_.expert; ++e) members.push_back(rank_of({c.tensor, e, c.data}));
      break;
    case GroupKind::expert_data:
      for (int d = 0; d < layout_.data; ++d) members.push_back(rank_of({c.tensor, c.expert, d}));
      break;
    case GroupKind::nonexpert_data:
      for (int d = 0; d < layout_.data; ++d)
        for (int e = 0; e < layout_.expert; ++e) members.push_back(rank_of({c.tensor, e, d}));
      break;
    case GroupKind::custom:
      throw Error("ProcessGrid: a custom group has no members");
  }
  return members;
}

std::vector<int> ProcessGrid::expert_replica_members(int rank) const {
  const GridCoords c = coords(rank);
  std::vector<int> members;
  for (int d = 0; d < layout_.data; ++d)
    for (int t = 0; t < layout_.tensor; ++t) members.push_back(rank_of({t, c.expert, d}));
  return members;
}

std::vector<Layout> all_layouts(int world_size) {
  std::vector<Layout> layouts;
  for (int data = 1; data <= world_size; ++data)
    for (int expert = 1; expert <= world_size; ++expert)
      for (int tensor = 1; tensor <= world_size; ++tensor)
        if (tensor * expert * data == world_size) layouts.push_back({tensor, expert, data});
  return layouts;
}

}  // namespace ted
