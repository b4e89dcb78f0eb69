// Measured collective curves in a cluster file (scripts/calibration/calibrate_cluster.sh writes
// them from ted_collbench): for one collective on groups of `members` ranks laid `per_node` to a
// node, the time of one call by the bytes each rank sends in it (the ledger's bytes_sent, as the
// traffic model counts them). Where a group of a point is laid as a curve was measured, the
// projection reads its collectives' time off the curve (comm_time.cpp) instead of the
// latency-bandwidth form, interpolated by message size:
//   between two measured sizes: linear in log(time) over log(bytes) (a power law between them);
//   below the smallest: the smallest's time (a call costs at least what the smallest did);
//   above the largest: the largest's time scaled by the bytes (the bandwidth regime).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ted/comm/ledger.hpp"

namespace ted::projection {

struct MeasuredCurve {
  CollectiveOp op = CollectiveOp::all_to_all;
  int members = 2;              // ranks in a group
  int per_node = 1;             // of them on each node it spans (members: one node)
  std::vector<double> bytes;    // per rank per call, strictly increasing, positive
  std::vector<double> seconds;  // per call, positive, one per size
};

// The file's `curves:` list (none when the key is absent). Throws ConfigError naming the file,
// the entry and the rule: an unknown op or key, sizes not increasing, a time not positive, lists
// of different lengths, a layout that does not fit nodes of `devices_per_node`, two curves for
// the same op and layout.
std::vector<MeasuredCurve> load_curves(const std::string& path, int devices_per_node);

// The time of one call that sends `bytes` per rank, off the curve (rules above).
double curve_time(const MeasuredCurve& curve, double bytes);

// The curve measured for `op` on groups of `members` laid `per_node` to a node, if any
// (all_to_all_v reads all_to_all's: the same messages, of uneven sizes).
const MeasuredCurve* find_curve(const std::vector<MeasuredCurve>& curves, CollectiveOp op,
                                int members, int per_node);

}  // namespace ted::projection
