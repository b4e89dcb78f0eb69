#include "ted/experiments/config.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "ted/core/error.hpp"
#include "ted/model/exchange_plan.hpp"
#include "ted/routing/workload.hpp"

namespace ted::experiments {

ConfigSchema ExperimentConfig::schema() {
  ConfigSchema s = train.schema();
  s.add("experiment", &experiment);
  s.add("run.warmup", &warmup);
  s.add("run.iters", &iters);
  s.add("run.rounds", &rounds);
  s.add_enum("run.wait", &wait, {"blocking", "sleep"});
  s.add("run.csv", &csv);
  s.add("layout.tp", &tp);
  s.add("layout.ep", &ep);
  s.add("layout.dp", &dp);
  s.add("systems", &systems);
  s.add("sweep.ranks", &sweep_ranks);
  s.add("sweep.tp", &sweep_tp);
  s.add("sweep.ep", &sweep_ep);
  s.add("sweep.hidden", &sweep_hidden);
  s.add("sweep.heads", &sweep_heads);
  s.add("sweep.layers", &sweep_layers);
  s.add("family.hidden", &family_hidden);
  s.add("family.heads", &family_heads);
  s.add("family.layers", &family_layers);
  s.add("sweep.experts", &sweep_experts);
  s.add("sweep.global_batch", &sweep_global_batch);
  s.add("sweep.tile", &sweep_tile);
  s.add("sweep.workloads", &sweep_workloads);
  s.add("sweep.dropless", &sweep_dropless);
  s.add("memory.budget_bytes", &budget_bytes);
  s.add("data.global_batch", &global_batch);
  s.add("largest.gpus", &largest_gpus);
  s.add("largest.max_tp", &largest_max_tp);
  s.add("largest.max_experts", &largest_max_experts);
  s.add_enum("projection.dispatch", &dispatch, {"gather", "einsum"});
  return s;
}

namespace {
// The digits after "overlap" in a system name: none (the YAML's parallel.overlap, 0 here) or a
// chunk count of at least 2. False when they are not that.
bool overlap_chunks(const std::string& digits, int* chunks) {
  if (digits.empty()) {
    *chunks = 0;
    return true;
  }
  if (digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
    return false;
  *chunks = std::stoi(digits);
  return *chunks >= 2;
}
}  // namespace

System parse_system(const std::string& name, const std::string& where) {
  System s;
  s.name = name;
  if (name == "deepspeed-moe") {
    s.tensor_parallel = false;
  } else if (name == "ted") {
    s.dtd = s.cac = true;
  } else if (name == "ted-baseline") {
  } else if (name.rfind("ted+", 0) == 0) {
    std::string rest = name.substr(4);
    std::size_t start = 0;
    while (start <= rest.size()) {
      std::size_t plus = rest.find('+', start);
      std::string part = rest.substr(start, plus == std::string::npos ? plus : plus - start);
      if (part == "dtd")
        s.dtd = true;
      else if (part == "cac")
        s.cac = true;
      else if (part == "rs")
        s.reduce_scatter = true;
      else if (part.rfind("overlap", 0) == 0 && overlap_chunks(part.substr(7), &s.overlap))
        ;
      else if (part == "tile")
        s.tile = true;
      else if (part == "bf16" || part == "fp16")
        s.dtype = part;
      else
        throw ConfigError(where + ": system '" + name + "' has an unknown part '" + part +
                          "' (expected dtd, cac, rs, tile, bf16, fp16, or overlap with an "
                          "optional chunk count of at least 2)");
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
    // ted+overlap[N] alone is ted (DTD + CAC) with the overlap, as the ablation compares them.
    if (s.overlap != 1 && !s.dtd && !s.cac && !s.reduce_scatter && !s.tile && s.dtype.empty())
      s.dtd = s.cac = true;
    try {
      model::ExchangeSwitches switches;
      switches.dtd = s.dtd;
      switches.reduce_scatter = s.reduce_scatter;
      model::check_exchange_switches(switches);
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": system '" + name + "' (rs needs dtd): " + e.what());
    }
  } else {
    throw ConfigError(where + ": unknown system '" + name +
                      "' (expected deepspeed-moe, ted-baseline, ted, or ted+dtd/+cac/+rs/"
                      "+overlap[N])");
  }
  return s;
}

ExperimentConfig load_config(const std::string& path, const std::vector<std::string>& overrides,
                             const std::string& experiment) {
  ExperimentConfig c;
  ConfigSchema schema = c.schema();
  schema.load_yaml(path);
  schema.set_all(overrides);
  const std::string where = config_origin(path, overrides);
  // A rule about one key names where that key's value came from: the file or the command line.
  auto fail = [&](const std::string& what, const std::string& key = "") {
    throw ConfigError((key.empty() ? where : config_origin(path, overrides, key)) + ": " + what);
  };
  if (!experiment.empty() && c.experiment != experiment)
    fail("key 'experiment' must be '" + experiment + "' for this program, got '" + c.experiment +
         "'");
  c.backend = to_string(c.train.run.backend);
  auto count = [&](long long value, long long minimum, long long maximum, const char* key) {
    try {
      in_range(value, minimum, maximum, key);
    } catch (const ConfigError& e) {
      fail(std::string("key ") + e.what(), key);
    }
  };
  count(c.warmup, 0, 1000000, "run.warmup");
  count(c.iters, 0, 1000000, "run.iters");
  count(c.rounds, 1, 1000, "run.rounds");
  count(c.tp, 1, 1 << 24, "layout.tp");
  count(c.ep, 1, 1 << 24, "layout.ep");
  count(c.dp, 0, 1 << 24, "layout.dp (0: the launched ranks over tp x ep)");
  count(c.budget_bytes, 0, std::numeric_limits<std::int64_t>::max(), "memory.budget_bytes");
  count(c.global_batch, 0, 1 << 30, "data.global_batch (0: data.micro_batches per rank)");
  count(c.largest_max_tp, 1, 1 << 24, "largest.max_tp");
  count(c.largest_max_experts, 1, 1 << 24, "largest.max_experts");
  const std::pair<const char*, const std::vector<int>*> lists[] = {
      {"sweep.ranks", &c.sweep_ranks},     {"sweep.tp", &c.sweep_tp},
      {"sweep.ep", &c.sweep_ep},           {"sweep.hidden", &c.sweep_hidden},
      {"sweep.heads", &c.sweep_heads},     {"sweep.layers", &c.sweep_layers},
      {"sweep.experts", &c.sweep_experts}, {"sweep.global_batch", &c.sweep_global_batch},
      {"family.hidden", &c.family_hidden}, {"family.heads", &c.family_heads},
      {"family.layers", &c.family_layers}, {"largest.gpus", &c.largest_gpus}};
  for (const auto& [key, list] : lists)
    for (int value : *list)
      if (value < 1)
        fail("key '" + std::string(key) + "' lists positive numbers, got " + std::to_string(value),
             key);
  for (int value : c.sweep_tile)
    if (value < 0)
      fail("key 'sweep.tile' lists tile sizes (0: untiled), got " + std::to_string(value),
           "sweep.tile");
  for (const auto& name : c.sweep_workloads) {
    bool known = false;
    for (int i = 0; i < routing::kWorkloadKindCount; ++i)
      known = known || name == routing::to_string(static_cast<routing::WorkloadKind>(i));
    if (!known)
      fail("key 'sweep.workloads' lists routing workloads (" + routing::workload_names() +
               "), got '" + name + "'",
           "sweep.workloads");
  }
  for (const auto& value : c.sweep_dropless)
    if (value != "false" && value != "true")
      fail("key 'sweep.dropless' lists true or false, got '" + value + "'", "sweep.dropless");
  if (c.systems.empty()) fail("key 'systems' must list at least one system");
  for (const auto& name : c.systems) parse_system(name, where + ", key 'systems'");
  try {
    c.train.validate();
  } catch (const ConfigError& e) {
    fail(e.what());
  }
  return c;
}

}  // namespace ted::experiments
