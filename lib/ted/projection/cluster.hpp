// A cluster description (experiments/clusters/*.yaml): what one device computes and holds, and
// the links between devices at three levels — each device's own link into its node, optionally
// the link between the sockets of a node (shared by the socket's devices), and the node's
// network injection (shared by all its devices, of which one device's all-to-all messages reach
// device_bandwidth) — with their latencies per call and per message. Every rate is given in the
// file with where it comes from; nothing is defaulted. The time model that reads it is
// projection/time.hpp (collectives: comm_time.cpp).
#pragma once

#include <string>
#include <vector>

#include "ted/projection/curves.hpp"

namespace ted::projection {

// One level of links (comm_time.cpp has the model that reads them).
struct Link {
  double bandwidth = 1e9;  // bytes/s in one direction (intra: per device; inter: per node)
  double latency = 1e-5;   // s per collective call (launch and synchronisation)
  // s, one point-to-point message's latency over this level: a ring's step, an all-to-all's
  // message to a peer (the messages to different peers overlap)
  double peer_latency = 0;
  // s a rank spends on each message it exchanges with a peer over this level, one message
  // after another (posting, progressing, copying: what does not overlap between peers)
  double peer_overhead = 0;
  // inter only: bytes/s one device's all-to-all messages reach into the network through the one
  // network device (NIC) they use; a ring's channels spread over all of the node's. 0: no limit
  // below the node's bandwidth
  double device_bandwidth = 0;
};

// The GEMM library's granularity: a GEMM's output is cut into tile_m x tile_n tiles, each
// computed by one of `units` compute units (SMs) in waves; a tile spends k_overhead elements'
// worth of its inner loop outside it (pipeline fill and epilogue). CPU files: 1, 1, 1, 0 (the
// rate then is the rate of every shape).
struct GemmGranularity {
  double units = 1;
  double tile_m = 1;
  double tile_n = 1;
  double k_overhead = 0;
};

struct Cluster {
  std::string name;
  std::string device;  // e.g. "V100-SXM2-16GB"
  int devices_per_node = 8;
  // CPU nodes: cores shared by the ranks on a node (a point with more ranks on a node than
  // cores runs each slower). 0: devices that share nothing (GPUs).
  double cores_per_node = 0;
  // An emulated cluster, every node on one machine (scripts/emulated_cluster.sh): the cores all
  // the nodes' ranks share, so that a point's ranks run each at min(1, host_cores / ranks).
  // 0: every node a machine of its own.
  double host_cores = 0;
  // The ranks that ran while the curves were measured (every group of a layout at once): on
  // shared cores (host_cores, cores_per_node) a point that runs fewer ranks takes a curve
  // inside one node (memory copies, the cores' work) faster by the share it gains. 0: as measured.
  int curves_ranks = 0;
  double memory_bytes = 32e9;      // per device
  double peak_flops = 1e12;        // per device, the dtype's peak: the denominator of % of peak
  double sustained_flops = 1e12;   // per device, GEMMs of large shapes in the experiments' dtype
  double memory_bandwidth = 1e11;  // per device, bytes/s that element-wise kernels sustain
  GemmGranularity gemm;
  Link intra;  // one device's link into its node (bus bandwidth of a group inside one socket)
  // Optional (devices 0: none): the link between the sockets of a node, per direction, shared
  // by the devices of a socket (Summit's X-Bus).
  int socket_devices = 0;
  double socket_bandwidth = 0;
  Link inter;          // the node's network injection, per direction, shared by its devices
  std::string source;  // where the numbers come from
  // Optional (key `curves`): collectives measured on this cluster, by group layout and message
  // size (curves.hpp); a group laid as one was measured takes its time from the curve, any
  // other from the links above.
  std::vector<MeasuredCurve> curves;

  // Throws ConfigError naming the file and key.
  static Cluster load(const std::string& path);

  // The share of a core each of `ranks` running ranks gets (1 where devices share nothing):
  // `on_node` of them on the busiest node, `ranks` in all on an emulated cluster's one machine.
  double core_share(double on_node, double ranks) const;
};

}  // namespace ted::projection
