// The TED process grid: coordinates and groups for every factorisation of every G from 1 to 16,
// the worked example of docs/algorithm.md section 3, and the layout errors.
#include "catch.hpp"

#include <algorithm>
#include <set>

#include "ted/core/error.hpp"
#include "ted/grid/process_grid.hpp"

using ted::GroupKind;

namespace {
const GroupKind kGroups[] = {GroupKind::world, GroupKind::tensor, GroupKind::expert,
                             GroupKind::expert_data, GroupKind::nonexpert_data};
}

TEST_CASE("all_layouts lists every ordered factorisation T x Ep x D") {
  // Number of ordered triples with product G: 1, 3, 3, 6, 3, 9, ..., 16 -> 15.
  CHECK(ted::all_layouts(1).size() == 1);
  CHECK(ted::all_layouts(2).size() == 3);
  CHECK(ted::all_layouts(4).size() == 6);
  CHECK(ted::all_layouts(6).size() == 9);
  CHECK(ted::all_layouts(8).size() == 10);
  CHECK(ted::all_layouts(12).size() == 18);
  CHECK(ted::all_layouts(16).size() == 15);
  for (const auto& layout : ted::all_layouts(12)) CHECK(layout.world_size() == 12);
}

TEST_CASE("coordinates and groups for every layout of G = 1..16") {
  for (int G = 1; G <= 16; ++G) {
    for (const auto& layout : ted::all_layouts(G)) {
      INFO("G=" << G << " " << layout.to_string());
      ted::ProcessGrid grid(G, layout);
      const int T = layout.tensor, Ep = layout.expert, D = layout.data;
      for (int r = 0; r < G; ++r) {
        auto c = grid.coords(r);
        // Tensor fastest (docs/algorithm.md section 3).
        REQUIRE(c.tensor == r % T);
        REQUIRE(c.expert == (r / T) % Ep);
        REQUIRE(c.data == r / (T * Ep));
        REQUIRE(grid.rank_of(c) == r);
      }
      for (GroupKind kind : kGroups) {
        INFO("group " << ted::to_string(kind));
        std::set<int> covered;
        std::set<int> colors;
        for (int r = 0; r < G; ++r) {
          auto members = grid.group_members(r, kind);
          REQUIRE(static_cast<int>(members.size()) == grid.group_size(kind));
          REQUIRE(std::is_sorted(members.begin(), members.end()));
          // The rank is in its own group at its index, and every member agrees on the group.
          REQUIRE(members[static_cast<std::size_t>(grid.group_index(r, kind))] == r);
          for (int m : members) {
            REQUIRE(grid.group_members(m, kind) == members);
            REQUIRE(grid.group_color(m, kind) == grid.group_color(r, kind));
            auto cm = grid.coords(m), cr = grid.coords(r);
            // The coordinates a group shares (docs/algorithm.md section 3).
            switch (kind) {
              case GroupKind::tensor:
                REQUIRE((cm.expert == cr.expert && cm.data == cr.data));
                break;
              case GroupKind::expert:
                REQUIRE((cm.tensor == cr.tensor && cm.data == cr.data));
                break;
              case GroupKind::expert_data:
                REQUIRE((cm.tensor == cr.tensor && cm.expert == cr.expert));
                break;
              case GroupKind::nonexpert_data:
                REQUIRE(cm.tensor == cr.tensor);
                break;
              default:
                break;
            }
          }
          colors.insert(grid.group_color(r, kind));
          covered.insert(members.begin(), members.end());
        }
        // Groups of a kind partition the ranks, and colors number them 0..count-1.
        REQUIRE(static_cast<int>(covered.size()) == G);
        REQUIRE(static_cast<int>(colors.size()) == G / grid.group_size(kind));
        REQUIRE(*colors.rbegin() == G / grid.group_size(kind) - 1);
      }
      CHECK(grid.group_size(GroupKind::tensor) == T);
      CHECK(grid.group_size(GroupKind::expert) == Ep);
      CHECK(grid.group_size(GroupKind::expert_data) == D);
      CHECK(grid.group_size(GroupKind::nonexpert_data) == Ep * D);
    }
  }
}

TEST_CASE("whole experts' replicas: the T x D ranks of one expert rank, for every layout") {
  for (int G = 1; G <= 16; ++G)
    for (const auto& layout : ted::all_layouts(G)) {
      INFO(layout.to_string());
      ted::ProcessGrid grid(G, layout);
      std::vector<int> seen(static_cast<std::size_t>(G), 0);
      for (int rank = 0; rank < G; ++rank) {
        const auto members = grid.expert_replica_members(rank);
        CHECK(static_cast<int>(members.size()) == layout.tensor * layout.data);
        CHECK(std::is_sorted(members.begin(), members.end()));
        CHECK(std::find(members.begin(), members.end(), rank) != members.end());
        for (int m : members) {
          CHECK(grid.coords(m).expert == grid.coords(rank).expert);
          CHECK(grid.expert_replica_color(m) == grid.expert_replica_color(rank));
        }
        // They hold its tensor group and its expert-data group.
        for (auto kind : {ted::GroupKind::tensor, ted::GroupKind::expert_data})
          for (int m : grid.group_members(rank, kind))
            CHECK(std::find(members.begin(), members.end(), m) != members.end());
        if (members.front() == rank) ++seen[static_cast<std::size_t>(rank)];
      }
      // Ep disjoint groups: one first member per expert rank.
      CHECK(std::count(seen.begin(), seen.end(), 1) == layout.expert);
    }
}

TEST_CASE("the worked example of docs/algorithm.md section 3: G=16, T=2, Ep=4") {
  ted::ProcessGrid grid(16, ted::resolve_layout(16, 2, 4, 0));
  CHECK(grid.layout().data == 2);
  using V = std::vector<int>;
  CHECK(grid.group_members(0, GroupKind::tensor) == V{0, 1});
  CHECK(grid.group_members(3, GroupKind::tensor) == V{2, 3});
  CHECK(grid.group_members(0, GroupKind::expert) == V{0, 2, 4, 6});
  CHECK(grid.group_members(8, GroupKind::expert) == V{8, 10, 12, 14});
  CHECK(grid.group_members(1, GroupKind::expert) == V{1, 3, 5, 7});
  CHECK(grid.group_members(9, GroupKind::expert) == V{9, 11, 13, 15});
  CHECK(grid.group_members(0, GroupKind::expert_data) == V{0, 8});
  CHECK(grid.group_members(2, GroupKind::expert_data) == V{2, 10});
  CHECK(grid.group_members(0, GroupKind::nonexpert_data) == V{0, 2, 4, 6, 8, 10, 12, 14});
  CHECK(grid.group_members(1, GroupKind::nonexpert_data) == V{1, 3, 5, 7, 9, 11, 13, 15});
  auto c = grid.coords(13);  // 13 = 1 + 2 * (2 + 4 * 1)
  CHECK(c.tensor == 1);
  CHECK(c.expert == 2);
  CHECK(c.data == 1);
}

TEST_CASE("layouts that do not fit the rank count are clear errors") {
  using Catch::Matchers::ContainsSubstring;
  CHECK_THROWS_AS(ted::resolve_layout(8, 3, 1, 0), ted::ConfigError);
  CHECK_THROWS_WITH(ted::resolve_layout(8, 3, 1, 0),
                    ContainsSubstring("does not divide the 8 ranks"));
  CHECK_THROWS_WITH(ted::resolve_layout(8, 2, 2, 3),
                    ContainsSubstring("T=2 Ep=2 D=3 makes 12 ranks"));
  CHECK_THROWS_WITH(ted::resolve_layout(8, 0, 2, 0),
                    ContainsSubstring("tensor size T must be at least 1"));
  CHECK_THROWS_WITH(ted::resolve_layout(8, 2, -1, 0),
                    ContainsSubstring("expert size Ep must be at least 1"));
  CHECK_THROWS_WITH(ted::resolve_layout(8, 2, 2, -2),
                    ContainsSubstring("data size D must be at least 1"));
  CHECK_THROWS_AS(ted::ProcessGrid(6, ted::Layout{2, 2, 2}), ted::ConfigError);
  auto layout = ted::resolve_layout(12, 2, 3, 0);
  CHECK(layout.data == 2);
  CHECK(ted::resolve_layout(12, 2, 3, 2).world_size() == 12);
}
