// A cluster description (experiments/clusters/*.yaml) and the time of one optimizer step on it:
// computation = the step's GEMM FLOPs / the device's sustained rate; communication = for every
// collective kind and group, calls x latency + bus bytes / bandwidth, where a group inside one
// node uses the intra-node link and a group spanning nodes the inter-node one (ranks fill
// nodes in order, tensor fastest). Bus bytes as nccl-tests defines them (ledger.hpp bus_bytes).
// No overlap of computation and communication is assumed.
#pragma once

#include <string>

#include "ted/projection/memory.hpp"
#include "ted/projection/traffic.hpp"

namespace ted::projection {

struct Link {
  double bandwidth = 1e9;  // bytes/s per rank (bus bandwidth)
  double latency = 1e-5;   // s per collective call
};

struct Cluster {
  std::string name;
  std::string device;  // e.g. "V100-32GB"
  int devices_per_node = 8;
  // CPU nodes: cores shared by the ranks on a node (a point with more ranks on a node than
  // cores runs each slower). 0: devices that share nothing (GPUs).
  double cores_per_node = 0;
  double memory_bytes = 32e9;     // per device
  double sustained_flops = 1e12;  // per device, in the dtype the experiments run (GEMM rate)
  Link intra, inter;
  std::string source;  // where the numbers come from

  // Throws ConfigError naming the file and key.
  static Cluster load(const std::string& path);
};

struct StepTime {
  double compute = 0;
  double communication = 0;
  double total() const { return compute + communication; }
};

// GEMM FLOPs of one optimizer step on one rank (forward, backward, and the recompute).
double step_flops(const StepShape& shape);
StepTime step_time(const StepShape& shape, const Cluster& cluster);

// Whether rank 0's group of this kind spans more than one node.
bool spans_nodes(const Layout& layout, GroupKind group, int devices_per_node);

}  // namespace ted::projection
