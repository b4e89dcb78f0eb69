#include "ted/projection/curves.hpp"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <set>
#include <tuple>

#include "ted/core/error.hpp"

namespace ted::projection {

namespace {

// The numbers of a YAML sequence of scalars; ConfigError naming `where` otherwise.
std::vector<double> numbers(const YAML::Node& node, const std::string& where,
                            const std::string& key) {
  if (!node || !node.IsSequence() || node.size() == 0)
    throw ConfigError(where + ": key '" + key + "' must be a non-empty list of numbers");
  std::vector<double> out;
  for (std::size_t i = 0; i < node.size(); ++i) {
    double value = 0;
    if (!node[i].IsScalar() || !YAML::convert<double>::decode(node[i], value) ||
        !std::isfinite(value))
      throw ConfigError(where + ": " + key + "[" + std::to_string(i) + "] must be a number, got '" +
                        (node[i].IsScalar() ? node[i].Scalar() : std::string("a nested value")) +
                        "'");
    out.push_back(value);
  }
  return out;
}

int integer(const YAML::Node& node, const std::string& where) {
  int value = 0;
  if (!node || !node.IsScalar() || !YAML::convert<int>::decode(node, value))
    throw ConfigError(where + " must be an integer");
  return value;
}

}  // namespace

std::vector<MeasuredCurve> load_curves(const std::string& path, int devices_per_node) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML: " + e.msg);
  }
  std::vector<MeasuredCurve> curves;
  if (!root.IsMap() || !root["curves"]) return curves;
  const YAML::Node list = root["curves"];
  if (!list.IsSequence())
    throw ConfigError(path +
                      ": key 'curves' must be a list of curves (op, members, per_node, "
                      "bytes, seconds)");
  std::set<std::tuple<CollectiveOp, int, int>> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string where = path + ": curves[" + std::to_string(i) + "]";
    const YAML::Node entry = list[i];
    if (!entry.IsMap()) throw ConfigError(where + " must be a map (op, members, per_node, ...)");
    for (const auto& item : entry) {
      const std::string key = item.first.as<std::string>();
      if (key != "op" && key != "members" && key != "per_node" && key != "bytes" &&
          key != "seconds")
        throw ConfigError(where + ": unknown key '" + key +
                          "' (expected op, members, per_node, bytes, seconds)");
    }
    MeasuredCurve c;
    if (!entry["op"] || !entry["op"].IsScalar()) throw ConfigError(where + ": key 'op' is missing");
    try {
      c.op = parse_collective(entry["op"].Scalar());
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": " + e.what());
    }
    if (c.op == CollectiveOp::barrier || c.op == CollectiveOp::all_to_all_v)
      throw ConfigError(where + ": op '" + entry["op"].Scalar() +
                        "' has no curve of its own (all_to_all_v reads all_to_all's)");
    c.members = integer(entry["members"], where + ": key 'members'");
    c.per_node = integer(entry["per_node"], where + ": key 'per_node'");
    if (c.members < 2) throw ConfigError(where + ": key 'members' must be at least 2");
    if (c.per_node < 1 || c.per_node > c.members || c.members % c.per_node != 0)
      throw ConfigError(where + ": key 'per_node' (" + std::to_string(c.per_node) +
                        ") must divide 'members' (" + std::to_string(c.members) + ")");
    if (c.per_node > devices_per_node)
      throw ConfigError(where + ": key 'per_node' (" + std::to_string(c.per_node) +
                        ") exceeds 'devices_per_node' (" + std::to_string(devices_per_node) + ")");
    c.bytes = numbers(entry["bytes"], where, "bytes");
    c.seconds = numbers(entry["seconds"], where, "seconds");
    if (c.bytes.size() != c.seconds.size())
      throw ConfigError(where + ": 'bytes' has " + std::to_string(c.bytes.size()) +
                        " sizes but 'seconds' " + std::to_string(c.seconds.size()) + " times");
    for (std::size_t k = 0; k < c.bytes.size(); ++k) {
      if (!(c.bytes[k] > 0))
        throw ConfigError(where + ": bytes[" + std::to_string(k) + "] must be positive");
      if (k > 0 && !(c.bytes[k] > c.bytes[k - 1]))
        throw ConfigError(where + ": bytes[" + std::to_string(k) +
                          "] must be larger than the size before it (sizes increase)");
      if (!(c.seconds[k] > 0))
        throw ConfigError(where + ": seconds[" + std::to_string(k) + "] must be positive");
    }
    if (!seen.insert({c.op, c.members, c.per_node}).second)
      throw ConfigError(where + ": a second curve for " + std::string(to_string(c.op)) + " on " +
                        std::to_string(c.members) + " members, " + std::to_string(c.per_node) +
                        " per node");
    curves.push_back(std::move(c));
  }
  return curves;
}

double curve_time(const MeasuredCurve& curve, double bytes) {
  const auto& x = curve.bytes;
  const auto& y = curve.seconds;
  if (bytes <= x.front()) return y.front();
  if (bytes >= x.back()) return y.back() * bytes / x.back();
  std::size_t k = 1;
  while (x[k] < bytes) ++k;
  const double f = std::log(bytes / x[k - 1]) / std::log(x[k] / x[k - 1]);
  return y[k - 1] * std::pow(y[k] / y[k - 1], f);
}

const MeasuredCurve* find_curve(const std::vector<MeasuredCurve>& curves, CollectiveOp op,
                                int members, int per_node) {
  if (op == CollectiveOp::all_to_all_v) op = CollectiveOp::all_to_all;
  for (const auto& c : curves)
    if (c.op == op && c.members == members && c.per_node == per_node) return &c;
  return nullptr;
}

}  // namespace ted::projection
