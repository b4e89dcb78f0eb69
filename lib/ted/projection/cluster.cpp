#include "ted/projection/cluster.hpp"

#include "ted/core/config_schema.hpp"
#include "ted/core/error.hpp"

#include <algorithm>

namespace ted::projection {

double Cluster::core_share(double on_node, double ranks) const {
  double share = 1;
  if (cores_per_node > 0 && on_node > 0) share = std::min(share, cores_per_node / on_node);
  if (host_cores > 0 && ranks > 0) share = std::min(share, host_cores / ranks);
  return share;
}

Cluster Cluster::load(const std::string& path) {
  Cluster c;
  ConfigSchema s;
  s.add("name", &c.name);
  s.add("device", &c.device);
  s.add("devices_per_node", &c.devices_per_node);
  s.add("cores_per_node", &c.cores_per_node);
  s.add("host_cores", &c.host_cores);
  s.add("curves_ranks", &c.curves_ranks);
  s.add("memory_bytes", &c.memory_bytes);
  s.add("peak_flops", &c.peak_flops);
  s.add("sustained_flops", &c.sustained_flops);
  s.add("memory_bandwidth", &c.memory_bandwidth);
  s.add("gemm.units", &c.gemm.units);
  s.add("gemm.tile_m", &c.gemm.tile_m);
  s.add("gemm.tile_n", &c.gemm.tile_n);
  s.add("gemm.k_overhead", &c.gemm.k_overhead);
  s.add("intra.bandwidth", &c.intra.bandwidth);
  s.add("intra.latency", &c.intra.latency);
  s.add("intra.peer_latency", &c.intra.peer_latency);
  s.add("intra.peer_overhead", &c.intra.peer_overhead);
  s.add("socket.devices", &c.socket_devices);
  s.add("socket.bandwidth", &c.socket_bandwidth);
  s.add("inter.bandwidth", &c.inter.bandwidth);
  s.add("inter.latency", &c.inter.latency);
  s.add("inter.peer_latency", &c.inter.peer_latency);
  s.add("inter.peer_overhead", &c.inter.peer_overhead);
  s.add("inter.device_bandwidth", &c.inter.device_bandwidth);
  s.add("source", &c.source);
  s.add_read_elsewhere("curves");  // load_curves
  s.load_yaml(path);
  // No rate is guessed: a projection from a default bandwidth would look like a result.
  s.require({"name",
             "device",
             "devices_per_node",
             "memory_bytes",
             "peak_flops",
             "sustained_flops",
             "memory_bandwidth",
             "gemm.units",
             "gemm.tile_m",
             "gemm.tile_n",
             "gemm.k_overhead",
             "intra.bandwidth",
             "intra.latency",
             "intra.peer_latency",
             "intra.peer_overhead",
             "inter.bandwidth",
             "inter.latency",
             "inter.peer_latency",
             "inter.peer_overhead",
             "inter.device_bandwidth"},
            path, "a cluster file gives every rate; nothing is assumed");
  auto positive = [&](double value, const char* key) {
    if (!(value > 0)) throw ConfigError(path + ": key '" + key + "' must be positive");
  };
  auto not_negative = [&](double value, const char* key) {
    if (value < 0) throw ConfigError(path + ": key '" + key + "' must not be negative");
  };
  positive(c.devices_per_node, "devices_per_node");
  positive(c.memory_bytes, "memory_bytes");
  positive(c.peak_flops, "peak_flops");
  positive(c.sustained_flops, "sustained_flops");
  positive(c.memory_bandwidth, "memory_bandwidth");
  positive(c.gemm.units, "gemm.units");
  positive(c.gemm.tile_m, "gemm.tile_m");
  positive(c.gemm.tile_n, "gemm.tile_n");
  not_negative(c.gemm.k_overhead, "gemm.k_overhead");
  positive(c.intra.bandwidth, "intra.bandwidth");
  positive(c.inter.bandwidth, "inter.bandwidth");
  not_negative(c.intra.latency, "intra.latency");
  not_negative(c.inter.latency, "inter.latency");
  not_negative(c.intra.peer_latency, "intra.peer_latency");
  not_negative(c.inter.peer_latency, "inter.peer_latency");
  not_negative(c.intra.peer_overhead, "intra.peer_overhead");
  not_negative(c.inter.peer_overhead, "inter.peer_overhead");
  positive(c.inter.device_bandwidth, "inter.device_bandwidth");
  if (c.inter.device_bandwidth > c.inter.bandwidth)
    throw ConfigError(path +
                      ": key 'inter.device_bandwidth' exceeds 'inter.bandwidth' (a device's "
                      "share of the node's network)");
  not_negative(c.cores_per_node, "cores_per_node");
  not_negative(c.host_cores, "host_cores");
  not_negative(c.curves_ranks, "curves_ranks");
  if (c.sustained_flops > c.peak_flops)
    throw ConfigError(path + ": key 'sustained_flops' exceeds 'peak_flops'");
  if (s.given("socket.devices") != s.given("socket.bandwidth"))
    throw ConfigError(path + ": keys 'socket.devices' and 'socket.bandwidth' go together");
  if (s.given("socket.devices")) {
    positive(c.socket_devices, "socket.devices");
    positive(c.socket_bandwidth, "socket.bandwidth");
    if (c.devices_per_node % c.socket_devices != 0)
      throw ConfigError(path + ": key 'socket.devices' (" + std::to_string(c.socket_devices) +
                        ") must divide 'devices_per_node' (" + std::to_string(c.devices_per_node) +
                        ")");
  }
  c.curves = load_curves(path, c.devices_per_node);
  return c;
}

}  // namespace ted::projection
