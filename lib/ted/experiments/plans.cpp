#include "ted/experiments/plans.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "ted/core/error.hpp"
#include "ted/model/gpt.hpp"
#include "ted/projection/cluster.hpp"
#include "ted/projection/fit.hpp"
#include "ted/routing/workload.hpp"

namespace ted::experiments {

Point make_point(const ExperimentConfig& config, const System& system, Layout layout,
                 const train::TrainConfig& base, int global_batch, const std::string& where) {
  Point p;
  p.system = system;
  p.einsum_dispatch = config.dispatch == ExperimentConfig::Dispatch::einsum;
  if (!system.tensor_parallel) {  // DeepSpeed-MoE: the tensor ranks become data ranks
    layout.data *= layout.tensor;
    layout.tensor = 1;
  }
  p.layout = layout;
  p.train = base;
  auto& par = p.train.parallel;
  par.tp = layout.tensor;
  par.ep = layout.expert;
  par.dp = layout.data;
  par.dtd = system.dtd;
  par.cac = system.cac;
  // The YAML's parallel.cac_all_reduce belongs to CAC: the systems with CAC stash the tensor
  // all-reduces' outputs too (the paper's CAC), the others have nothing to extend.
  par.cac_all_reduce = system.cac && base.parallel.cac_all_reduce;
  par.reduce_scatter = system.reduce_scatter;
  // The YAML's parallel.tile_elems is TED's tiled optimizer step: DeepSpeed-MoE's ZeRO-1 builds
  // each parameter group's fp32 gradient partition whole (docs/deepspeed.md).
  if (!system.tensor_parallel) par.tile_elems = 0;
  // +tile: the YAML's tile, or where it leaves the step untiled 64 Ki elements (256 KiB of
  // fp32 a tile), which splits the shards of the CPU experiments' models into many tiles.
  if (system.tile) par.tile_elems = base.parallel.tile_elems > 0 ? base.parallel.tile_elems : 65536;
  if (!system.dtype.empty()) {
    p.train.run.dtype = system.dtype == "bf16" ? DataType::bf16 : DataType::f16;
    // 16-bit gradients as DeepSpeed keeps them where the YAML asks for them.
    if (base.model.grad_dtype != DataType::f32) p.train.model.grad_dtype = p.train.run.dtype;
  }
  par.overlap = system.overlap == 1  ? 1
                : system.overlap > 1 ? system.overlap
                                     : base.parallel.overlap;
  if (par.overlap < 2 && system.overlap == 0)
    throw ConfigError(where + ": system " + system.name +
                      " takes its chunk count from parallel.overlap, which is " +
                      std::to_string(par.overlap) + "; give at least 2 (or name it, ted+overlap4)");
  if (system.cac) p.train.model.checkpoint = true;
  p.train.steps = std::max(1, config.warmup + config.iters);
  if (global_batch > 0) {
    const int per_step = p.train.data.micro_batch * layout.expert * layout.data;
    if (global_batch % per_step != 0)
      throw ConfigError(where + ": a global batch of " + std::to_string(global_batch) +
                        " sequences does not divide into micro-batches of " +
                        std::to_string(p.train.data.micro_batch) + " over the " +
                        std::to_string(layout.expert * layout.data) + " data-parallel ranks of " +
                        system.name + " at " + layout.to_string());
    p.train.data.micro_batches = global_batch / per_step;
  }
  const auto& m = p.train.model;
  // Appended, not "h" + std::to_string(...): GCC 12 warns (-Wrestrict) on a literal plus a
  // temporary string, a known false alarm of its optimiser.
  p.model_name = "h";
  p.model_name += std::to_string(m.hidden);
  p.model_name += "-L";
  p.model_name += std::to_string(m.layers);
  p.model_name += "-E";
  p.model_name += std::to_string(m.gate.experts);
  return p;
}

bool fixed_layout(const ExperimentConfig& config, const std::string& where, int world_size,
                  Layout* layout, std::vector<std::string>* skipped) {
  const int ranks = config.dp > 0 ? config.tp * config.ep * config.dp : world_size;
  try {
    *layout = resolve_layout(ranks, config.tp, config.ep, config.dp);
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": keys 'layout.tp/ep/dp': " + e.what());
  }
  if (ranks <= world_size) return true;
  skipped->push_back("skipping " + layout->to_string() + ": needs " + std::to_string(ranks) +
                     " ranks, " + std::to_string(world_size) + " launched");
  return false;
}

// The sweep points of weak and strong scaling and of the memory experiment's layouts: one
// layout per entry of sweep.ranks / sweep.tp / sweep.ep, the model changed by sweep.hidden /
// heads / layers where given, every system at every point. Points needing more ranks than
// launched are skipped with a line.
Plan sweep_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  auto fail = [&](const std::string& what) { throw ConfigError(where + ": " + what); };
  const auto& ranks = config.sweep_ranks;
  if (ranks.empty()) fail("key 'sweep.ranks' must list the rank count of every point");
  auto check_length = [&](const char* key, const std::vector<int>& list, bool required) {
    if ((required || !list.empty()) && list.size() != ranks.size())
      fail("key '" + std::string(key) + "' has " + std::to_string(list.size()) +
           " entries, but 'sweep.ranks' has " + std::to_string(ranks.size()) +
           " (one entry per point)");
  };
  check_length("sweep.tp", config.sweep_tp, true);
  check_length("sweep.ep", config.sweep_ep, true);
  check_length("sweep.hidden", config.sweep_hidden, false);
  check_length("sweep.heads", config.sweep_heads, false);
  check_length("sweep.layers", config.sweep_layers, false);
  check_length("sweep.experts", config.sweep_experts, false);
  check_length("sweep.global_batch", config.sweep_global_batch, false);
  check_length("sweep.tile", config.sweep_tile, false);
  Plan plan;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const std::string point = "sweep point " + std::to_string(i + 1);
    Layout layout;
    try {
      layout = resolve_layout(ranks[i], config.sweep_tp[i], config.sweep_ep[i], 0);
    } catch (const ConfigError& e) {
      fail("keys 'sweep.ranks/tp/ep', " + point + ": " + e.what());
    }
    train::TrainConfig train = config.train;
    if (!config.sweep_hidden.empty()) train.model.hidden = config.sweep_hidden[i];
    if (!config.sweep_heads.empty()) train.model.heads = config.sweep_heads[i];
    if (!config.sweep_layers.empty()) train.model.layers = config.sweep_layers[i];
    if (!config.sweep_experts.empty()) train.model.gate.experts = config.sweep_experts[i];
    if (!config.sweep_tile.empty()) train.parallel.tile_elems = config.sweep_tile[i];
    try {
      train.model.validate();
      train.model.validate_batch(train.data.micro_batch);
    } catch (const ConfigError& e) {
      fail("keys 'sweep.hidden/heads/layers/experts', " + point + ": " + e.what());
    }
    const int global_batch =
        config.sweep_global_batch.empty() ? config.global_batch : config.sweep_global_batch[i];
    if (ranks[i] > world_size) {
      plan.skipped.push_back("skipping " + point + " (G=" + std::to_string(ranks[i]) + ", " +
                             layout.to_string() + "): needs " + std::to_string(ranks[i]) +
                             " ranks, " + std::to_string(world_size) + " launched");
      continue;
    }
    for (const auto& name : config.systems)
      plan.points.push_back(make_point(config, parse_system(name, where), layout, train,
                                       global_batch, where + ", " + point));
  }
  return plan;
}

// The other experiments' plans: the ablation (every system on layout.*), strong scaling (the
// sweep with the whole step's data.micro_batches shared by the data-parallel ranks), memory
// (the sweep's layouts plus the family within memory.budget_bytes on layout.*).
Plan ablation_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  Plan plan;
  Layout layout;
  if (!fixed_layout(config, where, world_size, &layout, &plan.skipped)) return plan;
  for (const auto& name : config.systems)
    plan.points.push_back(make_point(config, parse_system(name, where), layout, config.train,
                                     config.global_batch, where));
  return plan;
}

Plan strong_scaling_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  Plan plan = sweep_plan(config, where, world_size);
  // A global batch already shares the step's sequences among the data-parallel ranks.
  if (config.global_batch > 0 || !config.sweep_global_batch.empty()) return plan;
  for (auto& point : plan.points) {
    const int data_parallel = point.layout.expert * point.layout.data;
    int& micro = point.train.data.micro_batches;
    if (micro % data_parallel != 0)
      throw ConfigError(where + ": key 'data.micro_batches' (" + std::to_string(micro) +
                        ", the whole step's) must divide over the " +
                        std::to_string(data_parallel) + " data-parallel ranks of " +
                        point.system.name + " at " + point.layout.to_string());
    micro /= data_parallel;
  }
  return plan;
}

namespace {

// The family's base models (checked: one entry per model, each a valid model).
std::vector<train::TrainConfig> family_models(const ExperimentConfig& config,
                                              const std::string& where) {
  const auto& hidden = config.family_hidden;
  if (config.family_heads.size() != hidden.size() || config.family_layers.size() != hidden.size())
    throw ConfigError(where +
                      ": keys 'family.hidden/heads/layers' must have one entry per model (" +
                      std::to_string(hidden.size()) + ")");
  if (config.budget_bytes <= 0)
    throw ConfigError(where + ": key 'memory.budget_bytes' must be positive with a family");
  std::vector<train::TrainConfig> models;
  for (std::size_t i = 0; i < hidden.size(); ++i) {
    train::TrainConfig train = config.train;
    train.model.hidden = hidden[i];
    train.model.heads = config.family_heads[i];
    train.model.layers = config.family_layers[i];
    try {
      train.model.validate();
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": keys 'family.*', model " + std::to_string(i + 1) + ": " +
                        e.what());
    }
    models.push_back(train);
  }
  return models;
}

// The largest trainable model: for each GPU count and system, every family model with every
// power-of-two expert count up to largest.max_experts (expert-parallel degree = experts) and
// every tensor degree up to largest.max_tp that lays it out (TED; DeepSpeed-MoE has none) and,
// as the paper's rule, stays inside a node of run.cluster; the one with the most parameters
// whose projected peak fits memory.budget_bytes (ties: the smaller peak). When none fits, the
// candidate with the smallest peak, so its row says by how much.
Plan largest_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  if (config.family_hidden.empty())
    throw ConfigError(where + ": keys 'largest.*' need the base models in 'family.*'");
  const auto models = family_models(config, where);
  const auto budget = static_cast<std::uint64_t>(config.budget_bytes);
  int max_tp = config.largest_max_tp;
  if (!config.train.run.cluster.empty())
    max_tp = std::min(max_tp, projection::Cluster::load(config.train.run.cluster).devices_per_node);
  Plan plan;
  for (int gpus : config.largest_gpus) {
    if (gpus > world_size) {
      plan.skipped.push_back("skipping the largest model on " + std::to_string(gpus) +
                             " GPUs: needs " + std::to_string(gpus) + " ranks, " +
                             std::to_string(world_size) + " launched");
      continue;
    }
    for (const auto& name : config.systems) {
      const System system = parse_system(name, where);
      struct Best {
        Point point;
        std::uint64_t parameters = 0, peak = 0;
        bool found = false;
      } fitting, smallest;
      for (const auto& base : models)
        for (int experts = 2; experts <= config.largest_max_experts; experts *= 2)
          for (int tp = 1; tp <= (system.tensor_parallel ? max_tp : 1); ++tp) {
            if (gpus % (tp * experts) != 0) continue;
            train::TrainConfig train = base;
            train.model.gate.experts = experts;
            const Layout layout{tp, experts, gpus / (tp * experts)};
            Point point = make_point(config, system, layout, train);
            try {
              point.train.check_layout(tp, experts);
              point.train.model.validate_batch(point.train.data.micro_batch);
            } catch (const ConfigError&) {
              continue;  // this tensor degree does not split the model
            }
            const std::uint64_t peak = projection::projected_peak(point.train, point.layout);
            const projection::ParameterParts whole =
                projection::parameter_parts(point.train.model, Layout{1, 1, 1}, true);
            const std::uint64_t parameters = whole.dense + whole.expert;
            if (peak <= budget && (!fitting.found || parameters > fitting.parameters ||
                                   (parameters == fitting.parameters && peak < fitting.peak)))
              fitting = {point, parameters, peak, true};
            if (!smallest.found || peak < smallest.peak) smallest = {point, parameters, peak, true};
          }
      if (!smallest.found)
        throw ConfigError(where + ": no family model lays out on " + std::to_string(gpus) +
                          " GPUs for " + name);
      Point chosen = fitting.found ? fitting.point : smallest.point;
      chosen.budget = config.budget_bytes;
      plan.points.push_back(chosen);
    }
  }
  return plan;
}

}  // namespace

Plan memory_plan(const ExperimentConfig& config, const std::string& where, int world_size) {
  if (!config.largest_gpus.empty()) return largest_plan(config, where, world_size);
  Plan plan = sweep_plan(config, where, world_size);
  const auto& hidden = config.family_hidden;
  if (hidden.empty()) return plan;
  const auto models = family_models(config, where);
  Layout layout;
  if (!fixed_layout(config, where, world_size, &layout, &plan.skipped)) return plan;
  for (const auto& train : models) {
    for (const auto& name : config.systems) {
      Point point =
          make_point(config, parse_system(name, where), layout, train, config.global_batch, where);
      point.budget = config.budget_bytes;
      plan.points.push_back(point);
    }
  }
  return plan;
}

Plan routing_sweep(Plan plan, const ExperimentConfig& config, const std::string& where) {
  const routing::Workload base = config.train.model.gate.workload;
  std::vector<routing::WorkloadKind> workloads;
  for (const auto& name : config.sweep_workloads)
    for (int i = 0; i < routing::kWorkloadKindCount; ++i)
      if (name == routing::to_string(static_cast<routing::WorkloadKind>(i)))
        workloads.push_back(static_cast<routing::WorkloadKind>(i));
  if (workloads.empty()) workloads.push_back(base.kind);
  std::vector<bool> dropless;
  for (const auto& value : config.sweep_dropless) dropless.push_back(value == "true");
  if (dropless.empty()) dropless.push_back(config.train.model.gate.dropless);
  std::vector<Point> points;
  for (auto workload : workloads)
    for (bool drop_none : dropless)
      for (Point point : plan.points) {
        auto& gate = point.train.model.gate;
        gate.workload.kind = workload;
        gate.dropless = drop_none;
        try {
          routing::validate(gate.workload, gate.experts, gate.top_k);
        } catch (const ConfigError& e) {
          throw ConfigError(where + ": key 'sweep.workloads', workload " +
                            std::string(routing::to_string(workload)) + " on " + point.model_name +
                            ": " + e.what());
        }
        points.push_back(std::move(point));
      }
  plan.points = std::move(points);
  return plan;
}

namespace {

// Every experiment's planner, by the name experiments/registry.txt gives it: the one list of
// them (its program and plan_for both read it; convergence trains every system on layout.*).
struct NamedPlanner {
  const char* name;
  Plan (*planner)(const ExperimentConfig& config, const std::string& where, int world_size);
};
constexpr NamedPlanner kPlanners[] = {
    {"ablation", ablation_plan},
    {"weak_scaling", sweep_plan},
    {"strong_scaling", strong_scaling_plan},
    {"memory", memory_plan},
    {"convergence", ablation_plan},
};

}  // namespace

Planner plan_for(const std::string& experiment) {
  std::string names;
  const std::size_t count = std::size(kPlanners);
  for (std::size_t i = 0; i < count; ++i) {
    if (experiment == kPlanners[i].name) return kPlanners[i].planner;
    names += (i == 0 ? "" : i + 1 == count ? " or " : ", ") + std::string(kPlanners[i].name);
  }
  throw ConfigError("unknown experiment '" + experiment + "' (expected " + names + ")");
}

}  // namespace ted::experiments
