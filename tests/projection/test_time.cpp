// The time model's parts against hand-computed cases: the GEMM shape model, links shared by
// the groups of a node, and the model FLOPs of % of peak.
#include "catch.hpp"

#include "ted/projection/time.hpp"

namespace pj = ted::projection;

namespace {

pj::Cluster gpu_cluster() {
  pj::Cluster c;
  c.devices_per_node = 4;
  c.peak_flops = 100e12;
  c.sustained_flops = 80e12;
  c.memory_bandwidth = 1e12;
  c.gemm = {80, 128, 128, 64};
  c.intra = {100e9, 0, 0};
  c.inter = {10e9, 0, 0};
  return c;
}

}  // namespace

TEST_CASE("GEMMs: large shapes at the sustained rate, narrow ones below it") {
  const auto c = gpu_cluster();
  // 80 x 8 full waves of 128 x 128 tiles with k = 8192: k_overhead costs 64 / 8192.
  const pj::GemmShape large{128 * 80, 128 * 8, 8192};
  CHECK(pj::gemm_time(large, c, 2) == Approx(large.flops() / 80e12 * (8192 + 64) / 8192.0));
  // A head-sized k (128) pays a third more per FLOP; one tile more than the units a wave more.
  const pj::GemmShape narrow{128 * 80, 128 * 8, 128};
  CHECK(pj::gemm_time(narrow, c, 2) / narrow.flops() == Approx(1 / 80e12 * (128 + 64) / 128.0));
  const pj::GemmShape ragged{128 * 81, 128, 8192};
  CHECK(pj::gemm_time(ragged, c, 2) == Approx(2 * 2 * 128.0 * 128 * (8192 + 64) / (80e12 / 80)));
  // A GEMM whose bytes take longer than its FLOPs runs at the memory bandwidth.
  const pj::GemmShape thin{1 << 20, 8, 8};
  CHECK(pj::gemm_time(thin, c, 2) >= 2.0 * ((1 << 20) * 8 * 2 + 64) / 1e12);
}

TEST_CASE("collectives: a node's network link is shared by the groups crossing it") {
  const auto c = gpu_cluster();
  pj::Traffic traffic{1, 1u << 30, 1u << 30};  // one all-to-all of 1 GiB per rank
  // Expert groups of 2 across 2 nodes of 4 (T = 4): every group has one member per node, and
  // the 4 ranks of a node each send half their bytes off the node at once.
  const ted::Layout across{4, 2, 1};
  const double sent = static_cast<double>(1u << 30);
  CHECK(pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert, traffic, across,
                            c) == Approx(4 * 0.5 * sent / 10e9));
  // The same groups inside one node (T = 1, Ep = 2, D = 4): only the devices' own links.
  const ted::Layout inside{1, 2, 4};
  CHECK(pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert, traffic, inside,
                            c) == Approx(0.5 * sent / 100e9));
  // A ring all-reduce over the data groups of T = 4 across 2 nodes: 4 rings share the link.
  const ted::Layout data{4, 1, 2};
  pj::Traffic reduce{1, 1u << 30, 1u << 30};
  CHECK(pj::collective_time(ted::CollectiveOp::all_reduce, ted::GroupKind::nonexpert_data, reduce,
                            data, c) == Approx(4 * 2 * 0.5 * sent / 10e9));
}

TEST_CASE("collectives: ring steps add their latencies, an all-to-all's costs overlap its bytes") {
  auto c = gpu_cluster();  // nodes of 4
  c.intra = {100e9, 1e-6, 2e-6, 0.5e-6};
  c.inter = {10e9, 3e-6, 5e-6, 1e-6, 5e9};
  const pj::Traffic tiny{1, 8, 8};
  // A ring all-reduce over 8 ranks on 2 nodes: 14 steps, 2 of them between the nodes, each a
  // message's latency, after the call's.
  const ted::Layout data{1, 1, 8};
  CHECK(pj::collective_time(ted::CollectiveOp::all_reduce, ted::GroupKind::nonexpert_data, tiny,
                            data, c) == Approx(3e-6 + 12 * 2e-6 + 2 * 5e-6).epsilon(1e-3));
  // An all-to-all over the same 8 ranks: 3 peers on the node, 4 off it. Small messages: one
  // message's latency to the farthest peer and the rank's own cost per peer, after the call's.
  const ted::Layout expert{1, 8, 1};
  CHECK(pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert, tiny, expert,
                            c) == Approx(3e-6 + 5e-6 + 3 * 0.5e-6 + 4 * 1e-6).epsilon(1e-3));
  // Large messages: the bytes alone (the call's and the messages' costs overlap them). Each
  // node's 4 ranks send half their bytes off the node: 2 x sent over the node's link, 1/2 x sent
  // over a device's port.
  const double sent = static_cast<double>(1u << 30);
  const pj::Traffic large{1, 1u << 30, 1u << 30};
  CHECK(pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert, large, expert,
                            c) == Approx(2 * sent / 10e9));
  // One rank per node: its network port (5e9) is slower than the node's share.
  c.devices_per_node = 1;
  const ted::Layout pair{1, 2, 1};
  CHECK(pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert, large, pair,
                            c) == Approx(0.5 * sent / 5e9));
}

TEST_CASE("% of peak: model FLOPs as Narayanan et al. count them") {
  pj::StepShape s;
  s.model.vocab = 51200;
  s.model.seq_len = 2048;
  s.model.hidden = 4096;
  s.model.heads = 32;
  s.model.layers = 32;
  s.model.expert_interval = 1000;  // no MoE layer: a dense GPT
  s.model.checkpoint = true;
  s.micro_batch = 8;
  s.layout = {1, 1, 1};
  const double B = 8, S = 2048, l = 32, h = 4096, V = 51200;
  const double narayanan = 96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h));
  CHECK(pj::model_flops(s) == Approx(narayanan));
  const auto c = gpu_cluster();
  CHECK(pj::percent_of_peak(s, c, 2.0) == Approx(narayanan / (2.0 * 100e12) * 100));
  // The step's parts add up; the GEMMs the model runs are the model FLOPs plus the LM head's
  // forward once more (the trainer counts four passes of everything with checkpointing).
  const auto t = pj::step_time(s, c);
  CHECK(t.total() == Approx(t.gemm + t.memory_bound + t.optimizer + t.communication));
  CHECK(pj::step_flops(s) == Approx(narayanan + 2 * B * S * h * V));
}

TEST_CASE(
    "einsum dispatch: DeepSpeed's one-hot matmuls added per MoE layer, on every tensor rank") {
  pj::StepShape s;
  s.model.vocab = 1024;
  s.model.seq_len = 2048;
  s.model.hidden = 1024;
  s.model.heads = 16;
  s.model.layers = 4;
  s.model.gate.experts = 8;
  s.model.gate.top_k = 1;
  s.model.gate.capacity_factor = 1.0;
  s.model.expert_interval = 2;  // 2 MoE layers
  s.model.checkpoint = true;
  s.micro_batch = 1;
  s.micro_batches = 3;
  s.dtype = ted::DataType::f16;
  s.layout = {2, 8, 1};  // T = 2: the einsums run on every tensor rank over all N tokens
  s.parallel.tp = 2;
  s.parallel.ep = 8;
  const auto c = gpu_cluster();
  auto einsum = s;
  einsum.einsum_dispatch = true;
  // N = 2048 tokens, E x C = 8 x 256 = 2048 slots, h = 1024; forward (twice: the recompute)
  // dispatch [EC, N] x [N, h] and combine [N, EC] x [EC, h]; backward three.
  const double N = 2048, EC = 2048, h = 1024;
  const double fwd = pj::gemm_time({EC, h, N}, c, 2) + pj::gemm_time({N, h, EC}, c, 2);
  const double bwd = pj::gemm_time({N, h, EC}, c, 2) + pj::gemm_time({EC, h, N}, c, 2) +
                     pj::gemm_time({N, EC, h}, c, 2);
  CHECK(pj::gemm_seconds(einsum, c) - pj::gemm_seconds(s, c) ==
        Approx(3 * 2 * (2 * fwd + bwd)).epsilon(1e-9));
  // Its masks over [N, EC] replace the gather's copies as memory-bound passes: more bytes here.
  CHECK(pj::memory_bound_bytes(einsum) > pj::memory_bound_bytes(s));
  // The model FLOPs (pct_of_peak) do not count the dispatch.
  CHECK(pj::model_flops(einsum) == Approx(pj::model_flops(s)));
}
