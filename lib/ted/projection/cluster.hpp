// A cluster description (experiments/clusters/*.yaml): what one device computes and holds, and
// the links between devices at three levels — each device's own link into its node, optionally
// the link between the sockets of a node (shared by the socket's devices), and the node's
// network injection (shared by all its devices). Every rate is given in the file with where it
// comes from; nothing is defaulted. The time model that reads it is projection/time.hpp.
#pragma once

#include <string>

namespace ted::projection {

struct Link {
  double bandwidth = 1e9;   // bytes/s in one direction (intra: per device; inter: per node)
  double latency = 1e-5;    // s per collective call
  double peer_latency = 0;  // s per peer of an all-to-all (its point-to-point messages)
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

  // Throws ConfigError naming the file and key.
  static Cluster load(const std::string& path);
};

}  // namespace ted::projection
