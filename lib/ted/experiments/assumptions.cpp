#include "ted/experiments/assumptions.hpp"

#include <cstdio>

#include "ted/core/csv.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/experiments/projected.hpp"

namespace ted::experiments {

void write_assumptions(const std::string& csv, const projection::Cluster& c,
                       const ExperimentConfig& config, const std::string& command,
                       const std::string& memory) {
  const auto& m = config.train.model;
  std::string text;
  auto line = [&](const char* format, auto... values) {
    char buffer[1024];
    std::snprintf(buffer, sizeof buffer, format, values...);
    text += buffer;
  };
  line("Projected by %s (revision %s).\n", command.c_str(), std::string(git_revision()).c_str());
  line("Cluster %s: %d x %s per node, %.4g bytes each.\n", c.name.c_str(), c.devices_per_node,
       c.device.c_str(), c.memory_bytes);
  line(
      "  Compute: peak %.4g FLOP/s (the denominator of pct_of_peak), large-shape GEMMs %.4g\n"
      "  FLOP/s, element-wise work %.4g B/s per device.\n",
      c.peak_flops, c.sustained_flops, c.memory_bandwidth);
  line("  GEMMs: %g units, tiles %g x %g, %g elements of k per tile outside the inner loop.\n",
       c.gemm.units, c.gemm.tile_m, c.gemm.tile_n, c.gemm.k_overhead);
  line(
      "  Links: each device %.4g B/s per direction into its node (latency %.3g s per call, %.3g\n"
      "  s per message, %.3g s of the rank's own per message);",
      c.intra.bandwidth, c.intra.latency, c.intra.peer_latency, c.intra.peer_overhead);
  if (c.socket_devices > 0)
    line(" sockets of %d devices joined by %.4g B/s per direction,\n  shared by the socket;",
         c.socket_devices, c.socket_bandwidth);
  line(
      " each node %.4g B/s per direction into the network, shared by\n  its devices, %.4g B/s "
      "of it through one device's network port (latency %.3g s per call, %.3g s\n  per message, "
      "%.3g s of the rank's own per message).\n",
      c.inter.bandwidth, c.inter.device_bandwidth, c.inter.latency, c.inter.peer_latency,
      c.inter.peer_overhead);
  line("  Source: %s\n", c.source.c_str());
  if (!c.curves.empty()) {
    line(
        "  Measured curves (%zu): a collective on a group laid as one was measured (members, per\n"
        "  node) takes its time off the curve at the call's bytes (log-log between the measured\n"
        "  sizes, the smallest's time below them, the largest's rate above); the links above\n"
        "  for any other group:\n",
        c.curves.size());
    for (const auto& curve : c.curves)
      line("    %s on %d members, %d per node: %zu sizes, %.4g-%.4g bytes per rank\n",
           std::string(to_string(curve.op)).c_str(), curve.members, curve.per_node,
           curve.bytes.size(), curve.bytes.front(), curve.bytes.back());
  }
  text += time_model_text();
  const DataType dtype = config.train.run.dtype;
  const bool sixteen_bit_gradients =
      model::gradient_type(dtype, m.grad_dtype) == dtype && dtype != DataType::f32;
  line("Run: %s, gradients %s; %s.\n", std::string(precision_name(dtype)).c_str(),
       std::string(precision_name(m.grad_dtype)).c_str(),
       dtype == DataType::f32 ? "fp32 throughout"
       : sixteen_bit_gradients
           ? "mixed precision as DeepSpeed's fp16 ZeRO-1: 16-bit weights, activations,\n"
             "  messages and gradients (each kernel's contribution summed in fp32 and rounded\n"
             "  into them once; reduced in 16-bit); fp32 master weights and Adam state in the\n"
             "  ZeRO-1 shard"
           : "mixed precision: 16-bit weights, activations and messages, fp32 gradients,\n"
             "  master weights and Adam state");
  line("Gating: top-%d, capacity factor %.3g, min capacity %d, capacity from the formula.\n",
       m.gate.top_k, m.gate.capacity_factor, m.gate.min_capacity);
  line("Dispatch (projection.dispatch): %s.\n",
       config.dispatch == ExperimentConfig::Dispatch::einsum
           ? "einsum, as DeepSpeed's MOELayer without Tutel (the paper's runs): per MoE\n"
             "  layer on every tensor rank the GEMMs [E C, N] x [N, h] and [N, E C] x [E C, h]\n"
             "  forward, three backward, and the gate's masks over [N, E C] as memory-bound passes"
           : "gather, as the suite's model: tokens copied into the capacity buffer and the\n"
             "  returned rows gathered back, memory-bound passes");
  text += memory;
  write_file_atomic(csv + ".assumptions.txt", text);
}

std::string memory_terms(const std::vector<Point>& points, const projection::Cluster& cluster) {
  std::string text =
      "Memory per rank (the memory model, lib/ted/projection/memory.hpp), per point: N_d and "
      "N_e\n"
      "  the non-expert and expert parameters a rank holds (split over T, experts over Ep);\n"
      "  persistent: weights w N, gradients g N, optimizer state (m, v, and the fp32 master in\n"
      "  mixed precision) over each part's data group (Ep D for N_d, D for N_e: T D when the\n"
      "  experts are whole on every tensor rank) with ZeRO-1; then the larger phase:\n"
      "  training (activations with checkpointing, the CAC stash, the exchange's buffers) or the\n"
      "  optimizer step (its fp32 tile and shard buffers). paper: (w + g + s/(Ep D)) N_d +\n"
      "  (w + g + s/D) N_e, the paper's count (s = 12 in mixed precision), for comparison.\n";
  char buffer[1024];
  for (const auto& point : points) {
    const projection::StepShape shape = shape_of(point);
    const projection::MemoryEstimate e = projection::step_memory(shape);
    const projection::ParameterParts parts = projection::parameter_parts(
        shape.model, shape.layout, projection::exchange_of(shape).split);
    const double w = static_cast<double>(shape.element_bytes());
    const double g = static_cast<double>(shape.grad_bytes());
    const double state = (shape.element_bytes() < 4 ? 3.0 : 2.0) * shape.master_bytes();
    const double dense_group = shape.parallel.zero1 ? shape.layout.expert * shape.layout.data : 1;
    const double expert_group =
        shape.parallel.zero1
            ? projection::expert_data_ranks(shape.layout, projection::exchange_of(shape).split)
            : 1;
    const double paper = (w + g + state / dense_group) * static_cast<double>(parts.dense) +
                         (w + g + state / expert_group) * static_cast<double>(parts.expert);
    const std::uint64_t gradients = static_cast<std::uint64_t>(g) * (parts.dense + parts.expert);
    auto gb = [](double bytes) { return bytes / 1e9; };
    std::snprintf(
        buffer, sizeof buffer,
        "  %s %s %s: N_d %.4g, N_e %.4g; weights %.3f GB, gradients %.3f GB,"
        " optimizer state %.3f GB, activations %.3f GB, CAC stash %.3f GB, communication %.3f"
        " GB, optimizer tile %.3f GB; total %.3f GB of %.3f GB: %s; paper %.3f GB\n",
        point.system.name.c_str(), point.layout.to_string().c_str(), point.model_name.c_str(),
        static_cast<double>(parts.dense), static_cast<double>(parts.expert),
        gb(static_cast<double>(e.of(MemoryCategory::parameters))),
        gb(static_cast<double>(gradients)),
        gb(static_cast<double>(e.of(MemoryCategory::optimizer_state))),
        gb(static_cast<double>(e.of(MemoryCategory::activations))),
        gb(static_cast<double>(e.of(MemoryCategory::cac_stash))),
        gb(static_cast<double>(e.of(MemoryCategory::communication))),
        gb(static_cast<double>(e.of(MemoryCategory::optimizer_temporaries))),
        gb(static_cast<double>(e.total)), gb(cluster.memory_bytes),
        static_cast<double>(e.total) <= cluster.memory_bytes ? "fits" : "does not fit", gb(paper));
    text += buffer;
  }
  return text;
}

}  // namespace ted::experiments
