// The communication half of the time model (time.hpp): where the groups of a kind lie on the
// cluster's nodes and sockets, which level of links each collective's bytes cross, and what a
// call costs by its size.
//
// All-to-all (NCCL's is a group of point-to-point sends and receives, one per peer; MPI's the
// same messages in its own order): every message is independent of the others, so the costs of
// a call overlap its transfer instead of adding to it. A call takes
//   max(latency + message term, byte terms)
//   message term: the latency of one message to the farthest peer, plus the rank's own cost per
//                 message (peer_overhead) for each of its peers, paid one after another;
//   byte terms:   each level's bytes over its bandwidth: what a device sends through its own
//                 link (intra) and into the network (inter.device_bandwidth: the NIC it uses),
//                 what all devices of a node send off the node (inter.bandwidth) or to its
//                 other socket, every group of the kind at once.
// A peer's message m thus reaches a link's rate only when m / bandwidth outgrows the call's and
// the messages' costs; at large messages the time is the bytes over the slowest level.
// Rings (all-reduce, all-gather, reduce-scatter, broadcast): each step waits for the previous
// step's chunk, so the steps' latencies add to the bytes (as NCCL's own cost model has it):
//   latency + intra steps x intra.peer_latency + inter steps x inter.peer_latency
//           + max(bus bytes over each level, times the rings sharing it).
// A ring's channels go through all of a node's network devices (NCCL's maintainer, NVIDIA/nccl
// issue 412: an all-reduce gains from every NIC added), an all-to-all's messages from one device
// through one (nccl-tests issue 267: an all-to-all "cannot aggregate the bandwidth of multiple
// NICs").
#include <algorithm>
#include <map>
#include <set>

#include "ted/grid/process_grid.hpp"
#include "ted/projection/time.hpp"

namespace ted::projection {

namespace {

// How the groups of one kind lie on the machine, as load on each shared level: per node, the
// groups whose ring crosses the node's network injection, and those whose ring crosses its
// socket link; for all-to-alls the share of a member's bytes that leaves its node (or crosses
// to the other socket of its node), summed over the node's members of all groups, and one
// member's share alone; and the peers a member has on and off its node.
struct Placement {
  int group_size = 1;
  bool any_spans_nodes = false;
  int most_nodes = 1;  // the most nodes one group's members lie on
  double max_rings_on_nic = 0, max_rings_on_socket_link = 0;
  double max_offnode_share = 0, max_offsocket_share = 0;
  double max_member_offnode_share = 0;
  std::set<std::pair<int, int>> peers;  // (peers on the member's node, peers off it), per member
};

Placement place(const Layout& layout, GroupKind kind, const Cluster& c, bool whole_experts) {
  const int G = layout.world_size();
  ProcessGrid grid(G, layout);
  // Whole experts: the expert-data groups are the experts' T x D replicas.
  const bool replicas = whole_experts && kind == GroupKind::expert_data;
  auto color_of = [&](int rank) {
    return replicas ? grid.expert_replica_color(rank) : grid.group_color(rank, kind);
  };
  auto members_of = [&](int rank) {
    return replicas ? grid.expert_replica_members(rank) : grid.group_members(rank, kind);
  };
  Placement p;
  p.group_size = replicas ? layout.tensor * layout.data : grid.group_size(kind);
  const int per_node = c.devices_per_node;
  auto node_of = [&](int rank) { return rank / per_node; };
  auto socket_of = [&](int rank) {
    return c.socket_devices > 0 ? (rank % per_node) / c.socket_devices : 0;
  };
  std::map<int, double> rings_on_nic, rings_on_socket_link, offnode, offsocket;
  std::set<int> seen;
  for (int rank = 0; rank < G; ++rank) {
    if (!seen.insert(color_of(rank)).second) continue;
    const auto members = members_of(rank);
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
    p.most_nodes = std::max(p.most_nodes, static_cast<int>(on_node.size()));
    for (const auto& [node, count] : on_node) {
      if (spans) rings_on_nic[node] += 1;
      if (sockets_used[node].size() > 1) rings_on_socket_link[node] += 1;
    }
    for (int r : members) {
      const double q = on_node[node_of(r)], s = on_socket[{node_of(r), socket_of(r)}];
      offnode[node_of(r)] += (n - q) / n;
      offsocket[node_of(r)] += (q - s) / n;
      p.max_member_offnode_share = std::max(p.max_member_offnode_share, (n - q) / n);
      p.peers.insert({static_cast<int>(q) - 1, static_cast<int>(n - q)});
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

// The cluster's measured curve for `op` on groups placed as `p`, if every member has as many
// fellow members on its node and the cluster has a curve for that layout.
const MeasuredCurve* measured_curve(CollectiveOp op, const Placement& p, const Cluster& c) {
  if (c.curves.empty()) return nullptr;
  std::set<int> per_node;
  for (const auto& [near, far] : p.peers) per_node.insert(near + 1);
  if (per_node.size() != 1) return nullptr;
  return find_curve(c.curves, op, p.group_size, *per_node.begin());
}

// The ring steps of one call of `op` over n members on `nodes` nodes, and how many of them cross
// between nodes (NCCL's count: an all-reduce is a reduce-scatter and an all-gather, 2 (n - 1)
// steps, of which 2 (nodes - 1) cross).
struct RingSteps {
  double intra = 0, inter = 0;
};
RingSteps ring_steps(CollectiveOp op, int n, int nodes) {
  const double passes = op == CollectiveOp::all_reduce ? 2 : 1;
  const double inter = passes * (nodes - 1);
  return {passes * (n - 1) - inter, inter};
}

}  // namespace

double collective_time(CollectiveOp op, GroupKind group, const Traffic& x, const Layout& layout,
                       const Cluster& c, bool whole_experts) {
  if (op == CollectiveOp::barrier) return 0;  // the schedule issues none on the TED groups
  const Placement p = place(layout, group, c, whole_experts);
  const int n = p.group_size;
  if (n <= 1 || x.calls == 0) return 0;  // a group of one moves nothing
  const double calls = static_cast<double>(x.calls);
  // A group laid as a measured curve's (the same members, as many on each node) takes the
  // call's time off the curve at the call's bytes (curves.hpp).
  // Inside one node on shared cores, a point running fewer ranks than the curve's
  // measurement gets more of each core (Cluster::curves_ranks).
  if (const MeasuredCurve* curve = measured_curve(op, p, c)) {
    double faster = 1;
    if (c.curves_ranks > 0 && !p.any_spans_nodes) {
      const int ranks = layout.world_size(), per_node = c.devices_per_node;
      faster = c.core_share(std::min(ranks, per_node), ranks) /
               c.core_share(std::min(c.curves_ranks, per_node), c.curves_ranks);
    }
    return calls * curve_time(*curve, static_cast<double>(x.bytes_sent) / calls) / faster;
  }
  const LedgerEntry entry{op,
                          group,
                          n,
                          DataType::u8,
                          static_cast<std::uint64_t>(static_cast<double>(x.bytes_sent) / calls),
                          static_cast<std::uint64_t>(static_cast<double>(x.bytes_recv) / calls),
                          0.0};
  const double bus = bus_bytes(entry);  // per call, what each rank puts on its own link
  const Link& outer = p.any_spans_nodes ? c.inter : c.intra;
  const bool all_to_all = op == CollectiveOp::all_to_all || op == CollectiveOp::all_to_all_v;
  double bytes_seconds = bus / c.intra.bandwidth;  // each device's own link
  if (all_to_all) {
    // Every member sends to every other at once: what leaves a node (or crosses its sockets)
    // is the sum over the node's members of every group of the kind; what leaves one device
    // goes through its own network device.
    const double sent = static_cast<double>(entry.bytes_sent);
    bytes_seconds = std::max(bytes_seconds, p.max_offnode_share * sent / c.inter.bandwidth);
    if (c.inter.device_bandwidth > 0)
      bytes_seconds =
          std::max(bytes_seconds, p.max_member_offnode_share * sent / c.inter.device_bandwidth);
    if (c.socket_devices > 0)
      bytes_seconds = std::max(bytes_seconds, p.max_offsocket_share * sent / c.socket_bandwidth);
    double messages = 0;  // the slowest member's message term
    for (const auto& [near, far] : p.peers) {
      const double latency = far > 0 ? c.inter.peer_latency : c.intra.peer_latency;
      messages =
          std::max(messages, latency + near * c.intra.peer_overhead + far * c.inter.peer_overhead);
    }
    return calls * std::max(outer.latency + messages, bytes_seconds);
  }
  // A ring leaves each node it spans once and crosses a socket link once per direction: its
  // bus bytes, times the rings sharing it. NCCL spreads a ring's channels over all the node's
  // network devices (unlike an all-to-all's messages), so the node's bandwidth is the limit.
  bytes_seconds = std::max(bytes_seconds, p.max_rings_on_nic * bus / c.inter.bandwidth);
  if (c.socket_devices > 0)
    bytes_seconds = std::max(bytes_seconds, p.max_rings_on_socket_link * bus / c.socket_bandwidth);
  const RingSteps steps = ring_steps(op, n, p.most_nodes);
  const double step_latency =
      steps.intra * c.intra.peer_latency + steps.inter * c.inter.peer_latency;
  return calls * (outer.latency + step_latency + bytes_seconds);
}

}  // namespace ted::projection
