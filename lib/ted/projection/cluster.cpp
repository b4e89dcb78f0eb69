#include "ted/projection/cluster.hpp"

#include <algorithm>
#include <cmath>

#include "ted/core/config_schema.hpp"
#include "ted/core/error.hpp"
#include "ted/model/gating.hpp"

namespace ted::projection {

Cluster Cluster::load(const std::string& path) {
  Cluster c;
  ConfigSchema s;
  s.add("name", &c.name);
  s.add("device", &c.device);
  s.add("devices_per_node", &c.devices_per_node);
  s.add("cores_per_node", &c.cores_per_node);
  s.add("memory_bytes", &c.memory_bytes);
  s.add("sustained_flops", &c.sustained_flops);
  s.add("intra.bandwidth", &c.intra.bandwidth);
  s.add("intra.latency", &c.intra.latency);
  s.add("inter.bandwidth", &c.inter.bandwidth);
  s.add("inter.latency", &c.inter.latency);
  s.add("source", &c.source);
  s.load_yaml(path);
  // No rate is guessed: a projection from a default bandwidth would look like a result.
  s.require({"name", "device", "devices_per_node", "memory_bytes", "sustained_flops",
             "intra.bandwidth", "intra.latency", "inter.bandwidth", "inter.latency"},
            path, "a cluster file gives every rate; nothing is assumed");
  auto positive = [&](double value, const char* key) {
    if (!(value > 0)) throw ConfigError(path + ": key '" + key + "' must be positive");
  };
  positive(c.devices_per_node, "devices_per_node");
  positive(c.memory_bytes, "memory_bytes");
  positive(c.sustained_flops, "sustained_flops");
  positive(c.intra.bandwidth, "intra.bandwidth");
  positive(c.inter.bandwidth, "inter.bandwidth");
  if (c.intra.latency < 0 || c.inter.latency < 0)
    throw ConfigError(path + ": latencies must not be negative");
  if (c.cores_per_node < 0) throw ConfigError(path + ": key 'cores_per_node' must not be negative");
  return c;
}

double step_flops(const StepShape& s) {
  const auto& m = s.model;
  const auto& p = s.parallel;
  const double T = s.layout.tensor, B = s.micro_batch, S = m.seq_len, N = B * S, h = m.hidden;
  const double hl = h / T, Hl = m.heads / T, fl = m.ffn() / T, E = m.gate.experts;
  const bool split = p.split_experts || s.layout.tensor == 1;
  const bool slicing = (p.dtd || !split) && s.layout.tensor > 1;
  const double C = model::expert_capacity(m.gate, static_cast<int>(N));
  const double Cp = slicing ? std::ceil(C / T) * T : C;
  double forward = 2 * N * h * m.vocab;  // LM head
  for (int l = 0; l < m.layers; ++l) {
    forward += 2 * N * h * 3 * hl + 2 * N * hl * h + 4 * B * Hl * S * S * (hl / Hl);
    if (m.is_moe(l))
      forward += 2 * N * h * E + 4 * E * (split ? Cp : Cp / T) * h * (split ? fl : m.ffn());
    else
      forward += 4 * N * h * fl;
  }
  return forward * (m.checkpoint ? 4.0 : 3.0) * s.micro_batches;
}

bool spans_nodes(const Layout& layout, GroupKind group, int devices_per_node) {
  ProcessGrid grid(layout.world_size(), layout);
  auto members = grid.group_members(0, group);
  int first = members.front() / devices_per_node;
  return std::any_of(members.begin(), members.end(),
                     [&](int r) { return r / devices_per_node != first; });
}

StepTime step_time(const StepShape& s, const Cluster& c) {
  StepTime t;
  const double ranks_on_node = std::min(s.layout.world_size(), c.devices_per_node);
  const double share = c.cores_per_node > 0 ? std::min(1.0, c.cores_per_node / ranks_on_node) : 1.0;
  t.compute = step_flops(s) / (c.sustained_flops * share);
  const StepTraffic traffic = step_traffic(s);
  ProcessGrid grid(s.layout.world_size(), s.layout);
  for (auto group :
       {GroupKind::tensor, GroupKind::expert, GroupKind::expert_data, GroupKind::nonexpert_data}) {
    const double n = grid.group_size(group);
    if (n <= 1) continue;  // a group of one moves nothing
    const Link& link = spans_nodes(s.layout, group, c.devices_per_node) ? c.inter : c.intra;
    for (std::size_t op = 0; op < kCollectiveOpCount; ++op) {
      const Traffic& x = traffic[op][static_cast<std::size_t>(group)];
      if (!x.calls) continue;
      LedgerEntry entry{static_cast<CollectiveOp>(op),
                        group,
                        static_cast<int>(n),
                        DataType::u8,
                        x.bytes_sent,
                        x.bytes_recv,
                        0.0};
      t.communication += x.calls * link.latency + bus_bytes(entry) / link.bandwidth;
    }
  }
  return t;
}

}  // namespace ted::projection
