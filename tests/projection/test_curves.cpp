// Measured collective curves in a cluster file (lib/ted/projection/curves.hpp): the projection
// holds to the curve it was given. The curves are the all-to-alls ted_collbench measured on the
// emulated two-node cluster (results/collbench/all_to_all_emulated_2x2-rate.csv: a pair inside a
// node, a pair across the nodes, the world of 4), written into a cluster file as
// scripts/calibration/make_cluster.py writes them; the groups of layouts laid as they were
// measured must take the measured time at every measured size (within 5%), a time between its
// neighbours' between them, and a held-out size near what was measured there; a group laid as no
// curve was measured, and a cluster file without curves, keep the latency-bandwidth model.
// Bad curves: one ConfigError line naming the file, the curve and the rule.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "catch.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/projection/time.hpp"

namespace pj = ted::projection;

namespace {

const std::string kSource = TED_SOURCE_DIR;
const std::string kBase = kSource + "/experiments/clusters/cpu-emulated_2x2-rate.yaml";

struct Measured {
  ted::Layout layout;
  int members = 0, per_node = 0;
  std::map<double, double> time;  // bytes per rank -> seconds
};

// The three measured all-to-alls, by the layout whose expert group is laid as each was.
std::map<std::string, Measured> measured() {
  std::map<std::string, Measured> out{{"intra", {{1, 2, 2}, 2, 2, {}}},
                                      {"inter", {{2, 2, 1}, 2, 1, {}}},
                                      {"world", {{1, 4, 1}, 4, 2, {}}}};
  for (const auto& row :
       ted::read_csv(kSource + "/results/collbench/all_to_all_emulated_2x2-rate.csv")) {
    const std::string kind = row.at("group") == "world" ? "world"
                             : row.at("T") == "1"       ? "intra"
                                                        : "inter";
    out[kind].time[std::stod(row.at("ledger_bytes_sent"))] =
        std::stod(row.at("time_us_median")) * 1e-6;
  }
  return out;
}

// `base` with a curves section appended: every `step`-th size of each measured curve.
std::string with_curves(const std::map<std::string, Measured>& curves, int step,
                        const std::string& name, const std::string& extra = "") {
  std::ifstream in(kBase);
  std::stringstream text;
  text << in.rdbuf() << "curves:\n";
  for (const auto& [kind, m] : curves) {
    std::string bytes, seconds;
    int i = 0;
    for (const auto& [b, t] : m.time) {
      if (i++ % step) continue;
      bytes += (bytes.empty() ? "" : ", ") + std::to_string(static_cast<long long>(b));
      std::ostringstream s;
      s.precision(9);
      s << t;
      seconds += (seconds.empty() ? "" : ", ") + s.str();
    }
    text << "  - op: all_to_all\n    members: " << m.members << "\n    per_node: " << m.per_node
         << "\n    bytes: [" << bytes << "]\n    seconds: [" << seconds << "]\n";
  }
  text << extra;
  const auto path = std::filesystem::temp_directory_path() / ("ted_curves_" + name + ".yaml");
  std::ofstream(path) << text.str();
  return path.string();
}

double all_to_all(const pj::Cluster& c, const ted::Layout& layout, double bytes) {
  const auto b = static_cast<std::uint64_t>(bytes);
  return pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert,
                             pj::Traffic{3, 3 * b, 3 * b}, layout, c) /
         3;
}

}  // namespace

TEST_CASE("measured curves: the projection takes the measured time at the measured sizes") {
  const auto curves = measured();
  const auto cluster = pj::Cluster::load(with_curves(curves, 1, "all"));
  REQUIRE(cluster.curves.size() == 3);
  int checked = 0;
  for (const auto& [kind, m] : curves) {
    REQUIRE(m.time.size() >= 10);
    for (const auto& [bytes, seconds] : m.time) {
      INFO(kind << " at " << bytes << " bytes per rank");
      CHECK(all_to_all(cluster, m.layout, bytes) == Approx(seconds).epsilon(0.05));
      ++checked;
    }
    // Between two measured sizes: between their times; beyond the largest: its rate.
    for (auto it = m.time.begin(); std::next(it) != m.time.end(); ++it) {
      const auto next = std::next(it);
      const double mid = all_to_all(cluster, m.layout, std::sqrt(it->first * next->first));
      CHECK(mid >= std::min(it->second, next->second) * (1 - 1e-9));
      CHECK(mid <= std::max(it->second, next->second) * (1 + 1e-9));
    }
    const auto& last = *m.time.rbegin();
    CHECK(all_to_all(cluster, m.layout, 4 * last.first) == Approx(4 * last.second));
    CHECK(all_to_all(cluster, m.layout, 1) == Approx(m.time.begin()->second));
  }
  std::printf("measured curves: %d sizes held within 5%%\n", checked);
}

TEST_CASE("measured curves: a held-out size interpolated from its neighbours") {
  // Every other size given; those left out are read between their neighbours (a factor 4
  // apart). Across the emulated link (the pair across nodes, the world): from 32 KiB per rank up,
  // where the time follows the link's bytes, within 12%; below, where the call's cost and the
  // link's idle-time gain bend the curve, within 25%. The pair inside a node (shared memory) has
  // knees of MPI's own (its protocols change with the size: -30% at 512 KiB) that no sparser
  // sweep sees: within 35%, which is why the calibration measures every factor of 4.
  const auto curves = measured();
  const auto cluster = pj::Cluster::load(with_curves(curves, 2, "half"));
  double worst_large = 0;
  for (const auto& [kind, m] : curves) {
    int i = 0;
    for (const auto& [bytes, seconds] : m.time) {
      if (i++ % 2 == 0 || bytes >= m.time.rbegin()->first) continue;
      const double error = all_to_all(cluster, m.layout, bytes) / seconds - 1;
      std::printf("%-6s %10.0f measured %12.1f us, interpolated %+6.1f%%\n", kind.c_str(), bytes,
                  seconds * 1e6, 100 * error);
      INFO(kind << " at " << bytes << " bytes per rank: " << 100 * error << "%");
      const bool link = kind != "intra";
      CHECK(std::abs(error) <= (!link ? 0.35 : bytes >= (32 << 10) ? 0.12 : 0.25));
      if (link && bytes >= (32 << 10)) worst_large = std::max(worst_large, std::abs(error));
    }
  }
  std::printf("held out across the link from 32 KiB up: worst %.1f%%\n", 100 * worst_large);
}

TEST_CASE("measured curves: other groups and files without curves keep the link model") {
  const auto plain = pj::Cluster::load(kBase);
  CHECK(plain.curves.empty());
  auto curves = measured();
  curves.erase("intra");  // no curve for the pair inside a node
  const auto cluster = pj::Cluster::load(with_curves(curves, 1, "no_intra"));
  for (double bytes : {4096.0, 65536.0, 1048576.0}) {
    CHECK(all_to_all(cluster, {1, 2, 2}, bytes) == all_to_all(plain, {1, 2, 2}, bytes));
    // The other collectives have no curve here: the ring model, as before.
    const auto b = static_cast<std::uint64_t>(bytes);
    for (auto op : {ted::CollectiveOp::all_reduce, ted::CollectiveOp::all_gather})
      CHECK(pj::collective_time(op, ted::GroupKind::expert, pj::Traffic{1, b, b}, {1, 4, 1},
                                cluster) == pj::collective_time(op, ted::GroupKind::expert,
                                                                pj::Traffic{1, b, b}, {1, 4, 1},
                                                                plain));
  }
  // all_to_all_v reads all_to_all's curve.
  const auto b = static_cast<std::uint64_t>(65536);
  CHECK(pj::collective_time(ted::CollectiveOp::all_to_all_v, ted::GroupKind::expert,
                            pj::Traffic{1, b, b}, {1, 4, 1},
                            cluster) == all_to_all(cluster, {1, 4, 1}, 65536));
}

TEST_CASE("measured curves: on an emulated cluster's shared cores, fewer ranks run faster") {
  // 2 nodes of 2 ranks on one machine of 2 cores, the curves measured with all 4 ranks running
  // (each at half a core): a point of 2 ranks gets a core each, so its pair inside a node takes
  // half the measured time; the world's 4 ranks and the pair across the link (its bytes) as
  // measured; without host_cores, as measured everywhere.
  const auto curves = measured();
  auto cluster = [&](const std::string& name, const std::string& extra) {
    const std::string path = with_curves(curves, 1, name, extra);
    std::stringstream text;
    text << std::ifstream(path).rdbuf();
    std::string yaml = text.str();
    const std::string per_node = "cores_per_node: 1";  // the base file's: a core a node
    REQUIRE(yaml.find(per_node) != std::string::npos);
    std::ofstream(path) << yaml.replace(yaml.find(per_node), per_node.size(), "cores_per_node: 2");
    return pj::Cluster::load(path);
  };
  const auto shared = cluster("shared", "host_cores: 2\ncurves_ranks: 4\n");
  const auto apart = cluster("apart", "curves_ranks: 4\n");
  CHECK(shared.core_share(1, 1) == 1);
  CHECK(shared.core_share(2, 2) == 1);
  CHECK(shared.core_share(2, 4) == 0.5);
  CHECK(apart.core_share(2, 4) == 1);
  for (double bytes : {8192.0, 1048576.0}) {
    const auto b = static_cast<std::uint64_t>(bytes);
    auto time = [&](const pj::Cluster& c, const ted::Layout& layout) {
      return pj::collective_time(ted::CollectiveOp::all_to_all, ted::GroupKind::expert,
                                 pj::Traffic{1, b, b}, layout, c);
    };
    CHECK(time(shared, {1, 2, 1}) == Approx(time(apart, {1, 2, 1}) / 2));  // 2 ranks, 1 node
    CHECK(time(shared, {1, 2, 2}) == Approx(time(apart, {1, 2, 2})));      // 4 ranks
    CHECK(time(shared, {2, 2, 1}) == Approx(time(apart, {2, 2, 1})));      // across the link
    CHECK(time(shared, {1, 4, 1}) == Approx(time(apart, {1, 4, 1})));      // the world
  }
}

TEST_CASE("measured curves: bad curves are one line naming the file, curve and rule") {
  const auto curves = measured();
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"  - {op: all_to_al, members: 2, per_node: 2, bytes: [1], seconds: [1]}\n", "all_to_al"},
      {"  - {op: all_reduce, members: 2, per_node: 2, bytes: [2, 1], seconds: [1, 1]}\n",
       "curves[3]: bytes[1] must be larger"},
      {"  - {op: all_reduce, members: 2, per_node: 2, bytes: [1, 2], seconds: [1]}\n",
       "'bytes' has 2 sizes but 'seconds' 1"},
      {"  - {op: all_reduce, members: 2, per_node: 2, bytes: [1], seconds: [0]}\n",
       "seconds[0] must be positive"},
      {"  - {op: all_reduce, members: 4, per_node: 3, bytes: [1], seconds: [1]}\n",
       "must divide 'members'"},
      {"  - {op: all_reduce, members: 8, per_node: 4, bytes: [1], seconds: [1]}\n",
       "exceeds 'devices_per_node'"},
      {"  - {op: all_reduce, members: 2, per_node: 2, bytes: [x], seconds: [1]}\n",
       "bytes[0] must be a number, got 'x'"},
      {"  - {op: all_reduce, members: 2, per_node: 2, byte: [1], seconds: [1]}\n",
       "unknown key 'byte'"},
      {"  - {op: all_to_all, members: 4, per_node: 2, bytes: [1], seconds: [1]}\n",
       "a second curve for all_to_all on 4 members, 2 per node"},
  };
  int i = 0;
  for (const auto& [entry, words] : bad) {
    const std::string path = with_curves(curves, 1, "bad" + std::to_string(i++), entry);
    INFO(entry);
    try {
      pj::Cluster::load(path);
      FAIL("accepted a bad curve");
    } catch (const ted::ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find(path) != std::string::npos);
      CHECK(what.find(words) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
  }
}
