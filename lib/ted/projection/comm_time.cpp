// The communication half of the time model (time.hpp): where the groups of a kind lie on the
// cluster's nodes and sockets, and which level of links each collective's bytes cross.
#include <algorithm>
#include <map>
#include <set>

#include "ted/grid/process_grid.hpp"
#include "ted/projection/time.hpp"

namespace ted::projection {

namespace {

// How the groups of one kind lie on the machine, as load on each shared level: per node, the
// groups whose ring crosses the node's network injection, and those whose ring crosses its
// socket link; and for all-to-alls the share of a member's bytes that leaves its node (or
// crosses to the other socket of its node), summed over the node's members of all groups.
struct Placement {
  int group_size = 1;
  bool any_spans_nodes = false;
  double max_rings_on_nic = 0, max_rings_on_socket_link = 0;
  double max_offnode_share = 0, max_offsocket_share = 0;
};

Placement place(const Layout& layout, GroupKind kind, const Cluster& c) {
  const int G = layout.world_size();
  ProcessGrid grid(G, layout);
  Placement p;
  p.group_size = grid.group_size(kind);
  const int per_node = c.devices_per_node;
  auto node_of = [&](int rank) { return rank / per_node; };
  auto socket_of = [&](int rank) {
    return c.socket_devices > 0 ? (rank % per_node) / c.socket_devices : 0;
  };
  std::map<int, double> rings_on_nic, rings_on_socket_link, offnode, offsocket;
  std::set<int> seen;
  for (int rank = 0; rank < G; ++rank) {
    if (!seen.insert(grid.group_color(rank, kind)).second) continue;
    const auto members = grid.group_members(rank, kind);
    const double n = static_cast<double>(members.size());
    std::map<int, int> on_node;                    // node -> members
    std::map<std::pair<int, int>, int> on_socket;  // (node, socket) -> members
    std::map<int, std::set<int>> sockets_used;     // node -> sockets with members
    for (int r : members) {
      ++on_node[node_of(r)];
      ++on_socket[{node_of(r), socket_of(r)}];
      sockets_used[node_of(r)].insert(socket_of(r));
    }
    const bool spans = on_node.size() > 1;
    p.any_spans_nodes |= spans;
    for (const auto& [node, count] : on_node) {
      if (spans) rings_on_nic[node] += 1;
      if (sockets_used[node].size() > 1) rings_on_socket_link[node] += 1;
    }
    for (int r : members) {
      const double q = on_node[node_of(r)], s = on_socket[{node_of(r), socket_of(r)}];
      offnode[node_of(r)] += (n - q) / n;
      offsocket[node_of(r)] += (q - s) / n;
    }
  }
  auto largest = [](const std::map<int, double>& loads) {
    double most = 0;
    for (const auto& [node, load] : loads) most = std::max(most, load);
    return most;
  };
  p.max_rings_on_nic = largest(rings_on_nic);
  p.max_rings_on_socket_link = largest(rings_on_socket_link);
  p.max_offnode_share = largest(offnode);
  p.max_offsocket_share = largest(offsocket);
  return p;
}

}  // namespace

double collective_time(CollectiveOp op, GroupKind group, const Traffic& x, const Layout& layout,
                       const Cluster& c) {
  const Placement p = place(layout, group, c);
  const int n = p.group_size;
  if (n <= 1 || x.calls == 0) return 0;  // a group of one moves nothing
  const double calls = static_cast<double>(x.calls);
  const LedgerEntry entry{op,
                          group,
                          n,
                          DataType::u8,
                          static_cast<std::uint64_t>(static_cast<double>(x.bytes_sent) / calls),
                          static_cast<std::uint64_t>(static_cast<double>(x.bytes_recv) / calls),
                          0.0};
  const double bus = bus_bytes(entry);  // per call, what each rank puts on its own link
  const Link& outer = p.any_spans_nodes ? c.inter : c.intra;
  double seconds = bus / c.intra.bandwidth;  // each device's own link
  double latency = outer.latency;
  const bool all_to_all = op == CollectiveOp::all_to_all || op == CollectiveOp::all_to_all_v;
  if (all_to_all) {
    // Every member sends to every other at once: what leaves a node (or crosses its sockets)
    // is the sum over the node's members of every group of the kind.
    const double sent = static_cast<double>(entry.bytes_sent);
    seconds = std::max(seconds, p.max_offnode_share * sent / c.inter.bandwidth);
    if (c.socket_devices > 0)
      seconds = std::max(seconds, p.max_offsocket_share * sent / c.socket_bandwidth);
    latency += (n - 1) * outer.peer_latency;
  } else {
    // A ring (all-reduce, all-gather, reduce-scatter) leaves each node it spans once and
    // crosses a socket link once per direction: its bus bytes, times the rings sharing it.
    seconds = std::max(seconds, p.max_rings_on_nic * bus / c.inter.bandwidth);
    if (c.socket_devices > 0)
      seconds = std::max(seconds, p.max_rings_on_socket_link * bus / c.socket_bandwidth);
  }
  return calls * (latency + seconds);
}

}  // namespace ted::projection
