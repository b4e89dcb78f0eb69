// The all-to-all cost model (lib/ted/projection/comm_time.cpp) by message size: at large
// messages its time follows the bytes over the slowest level.
#include <string>

#include "catch.hpp"
#include "ted/projection/time.hpp"

namespace pj = ted::projection;

namespace {

const std::string kSource = TED_SOURCE_DIR;

double all_to_all(const pj::Cluster& c, const ted::Layout& layout, double bytes_per_rank) {
  const auto bytes = static_cast<std::uint64_t>(bytes_per_rank);
  return pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert,
                             pj::Traffic{1, bytes, bytes}, layout, c);
}

}  // namespace

TEST_CASE("all-to-all model: at large messages the time follows the bytes") {
  const auto summit = pj::Cluster::load(kSource + "/experiments/clusters/summit.yaml");
  // The paper's ablation layout: expert groups of 16 with T = 4 on nodes of 6 GPUs, 1-2
  // members of a group per node, all six GPUs of a node in an all-to-all at once.
  const ted::Layout ablation{4, 16, 2};
  for (double per_peer = 4 << 20; per_peer <= (256 << 20); per_peer *= 2) {
    const double bytes = 16 * per_peer;
    INFO("Summit, " << per_peer / (1 << 20) << " MiB per peer");
    CHECK(all_to_all(summit, ablation, 2 * bytes) / all_to_all(summit, ablation, bytes) ==
          Approx(2).epsilon(0.01));
  }
  // Small messages: the time is the messages' latency, whatever their size.
  CHECK(all_to_all(summit, ablation, 16 * 64) == Approx(all_to_all(summit, ablation, 16 * 128)));
  // One GPU alone on each of two nodes, a pair: its message reaches the rate of its network
  // device only when it is large.
  auto lone = summit;
  lone.devices_per_node = 1;
  lone.socket_devices = 0;
  const ted::Layout pair{1, 2, 1};
  auto rate = [&](double bytes) {  // the bytes a device sends off its node per second
    return bytes / 2 / all_to_all(lone, pair, bytes) / summit.inter.device_bandwidth;
  };
  CHECK(rate(2 * 64e3) < 0.5);
  CHECK(rate(2 * 64e6) > 0.9);
  CHECK(rate(2 * 64e6) <= 1.0);
}

TEST_CASE("all-to-all model: the paper ablation's messages are in the bandwidth regime") {
  // Per MoE layer and micro-batch each rank sends E x C x h fp16 elements (E = 16, C = 128,
  // h = 4096: 16 MiB, 1 MiB per peer); DTD sends a T-th of it (256 KiB per peer). Both are
  // set by the node's network: the message term (latency and per-peer costs) is under 1/10 of
  // the bytes' time, so DTD's 1/T of the bytes is nearly 1/T of the time.
  const auto summit = pj::Cluster::load(kSource + "/experiments/clusters/summit.yaml");
  const ted::Layout ablation{4, 16, 2};
  const double without_dtd = 16.0 * 128 * 4096 * 2, with_dtd = without_dtd / 4;
  const double tiny = all_to_all(summit, ablation, 16 * 8);  // the message term alone
  for (double bytes : {without_dtd, with_dtd}) {
    INFO(bytes / 16 / 1024 << " KiB per peer: " << all_to_all(summit, ablation, bytes) * 1e6
                           << " us, the messages alone " << tiny * 1e6 << " us");
    CHECK(tiny < 0.1 * all_to_all(summit, ablation, bytes));
  }
  CHECK(all_to_all(summit, ablation, with_dtd) / all_to_all(summit, ablation, without_dtd) ==
        Approx(0.25).epsilon(0.1));
}
