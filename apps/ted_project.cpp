// ted_project: carries the experiments to cluster scale with the suite's performance and memory
// model (lib/ted/projection), and checks the model against measured runs.
//
//   ted_project experiment -c experiments/ablation/paper.yaml --cluster
//   experiments/clusters/summit.yaml
//       the experiment's points projected: the experiments' CSV columns, backend
//       "projected:<cluster>", plus <csv>.assumptions.txt
//   ted_project search -c experiments/ablation/paper.yaml --cluster ... --gpus 128
//       every layout and switch set at the config's global batch, fitting ones first, fastest
//       first; the --top rows printed and written in the experiment's columns (the same row as
//       `experiment` gives on that layout)
//   ted_project validate -c experiments/ablation/cpu.yaml --cluster experiments/clusters/cpu.yaml \
//       --measured results/ablation/cpu.csv [--run RUN_ID]
//       predicted against measured time per iteration, the error of every point: the latest
//       row of each point, or the rows of one run
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ted/app/app_main.hpp"
#include "ted/core/config_schema.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/stats.hpp"
#include "ted/core/units.hpp"
#include "ted/experiments/projected.hpp"
#include "ted/experiments/rows.hpp"

namespace ex = ted::experiments;
namespace pj = ted::projection;

namespace {

std::string stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

void write_assumptions(const std::string& csv, const pj::Cluster& c,
                       const ex::ExperimentConfig& config, const std::string& command,
                       const std::string& memory = "") {
  const auto& m = config.train.model;
  std::string text;
  auto line = [&](const char* format, auto... values) {
    char buffer[1024];
    std::snprintf(buffer, sizeof buffer, format, values...);
    text += buffer;
  };
  line("Projected by %s (revision %s).\n", command.c_str(),
       std::string(ted::git_revision()).c_str());
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
  text +=
      "Time model (lib/ted/projection/time.hpp), per rank, nothing overlapped except with\n"
      "  parallel.overlap = N: the MoE exchange in n = min(N, sent capacity) chunks pipelines\n"
      "  all-to-alls and experts; per MoE layer and pass that communicates, with a its all-to-all\n"
      "  time (n calls' latencies) and b its experts' GEMMs, (n - 1)/n x min(a, b) is hidden.\n"
      "  GEMMs shape by shape (forward; backward: input and weight gradient; the recompute with\n"
      "  checkpointing): max(waves of tiles over the units x 2 tile_m tile_n (k + k_overhead) at\n"
      "  the per-unit large-shape rate, the GEMM's bytes / memory bandwidth). Attention: two\n"
      "  batched GEMMs per sequence and head; materialised (model.attention), the softmax over\n"
      "  B x heads x S x S elements is memory-bound work; fused (FlashAttention-2), the scores\n"
      "  stay on chip (q, k, v, o read and written instead, and one touch per score forward, two\n"
      "  backward, for the softmax work) and backward recomputes Q K^T.\n"
      "  Memory-bound work, bytes / memory bandwidth: LayerNorms, bias + GeLU, bias + residual,\n"
      "  the materialised scale-mask-softmax, the gate's softmax, the dispatch/combine and DTD "
      "slice\n"
      "  copies, the loss, and the fp32 gradient accumulation once per micro-batch; a backward\n"
      "  pass reads its input and the incoming gradient and writes the outgoing one. Dropout is\n"
      "  not modelled (the suite's model has none).\n"
      "  The optimizer step, bytes / memory bandwidth: per element of the rank's ZeRO-1 shard the\n"
      "  norm's read, the gradient copy into the temporary (the spike; a tile at a time with\n"
      "  tiles: the same bytes), Adam's reads and writes of its state (and the fp32 master in\n"
      "  mixed precision), the 16-bit weights written; and the gradients zeroed.\n"
      "  Collectives (lib/ted/projection/comm_time.cpp): each kind in each TED group, call by\n"
      "  call at its size, every call paying the latency of the outermost level its group spans.\n"
      "  Rings (all-reduce, all-gather, reduce-scatter): plus a message latency per ring step\n"
      "  (inside the node or across it) and the slowest of: the bus bytes (nccl-tests) over a\n"
      "  device's own link and, times the groups whose ring crosses the same socket link or node\n"
      "  injection, over that link. All-to-alls: plus the larger of the\n"
      "  messages' term (one message's latency to the farthest peer and the rank's own cost per\n"
      "  peer) and the bytes' term (the bytes over a device's own link and network port, and the\n"
      "  bytes all members of all groups on a node send off it, or to its other socket, over\n"
      "  that link): a peer's message reaches a link's rate only when large. The slowest node\n"
      "  counts. Ranks fill nodes in order, tensor fastest, then expert, then data.\n"
      "  pct_of_peak: model FLOPs per step (Narayanan et al., SC'21: per token and layer 24 h^2 +\n"
      "  4 S h forward, an MoE FFN as top_k dense FFNs plus the gate's 2 h E, the LM head 2 h V;\n"
      "  x 3, x 4 with full activation checkpointing) / (time x GPUs x peak).\n"
      "Traffic: exact per-rank bytes of every collective of the schedule (tested equal to the\n"
      "  ledger). Memory: per-category peaks of the memory model (tested within 5% of the\n"
      "  allocator); peak_total is the persistent state (weights, gradients, Adam state) plus\n"
      "  the larger phase: forward and backward (activations, CAC stash, the exchange's\n"
      "  buffers) or the optimizer step (its tile and communication buffers). A point whose\n"
      "  peak_total exceeds the device's memory keeps its projected time, with fits = 0.\n";
  const bool sixteen_bit_gradients = config.train.run.dtype != "fp32" && m.storage_gradients();
  line("Run: %s, gradients %s; %s.\n", config.train.run.dtype.c_str(),
       std::string(ted::precision_name(m.grad_dtype)).c_str(),
       config.train.run.dtype == "fp32" ? "fp32 throughout"
       : sixteen_bit_gradients
           ? "mixed precision as DeepSpeed's fp16 ZeRO-1: 16-bit weights, activations,\n"
             "  messages and gradients (accumulated per micro-batch through an fp32 stage of one\n"
             "  block, reduced in 16-bit); fp32 master weights and Adam state in the ZeRO-1 shard"
           : "mixed precision: 16-bit weights, activations and messages, fp32 gradients,\n"
             "  master weights and Adam state");
  line("Gating: top-%d, capacity factor %.3g, min capacity %d, capacity from the formula.\n",
       m.gate.top_k, m.gate.capacity_factor, m.gate.min_capacity);
  text += memory;
  ted::write_file_atomic(csv + ".assumptions.txt", text);
}

// The memory model's terms for every point (the sidecar's last section): what each rank holds,
// by category, and the paper's count (its Eqs. 2-6, DeepSpeed's fp16 ZeRO-1: weights and
// gradients on every rank holding a parameter, 12 bytes of fp32 master and Adam state sharded
// over its data group) with this run's widths, which leaves out activations and temporaries.
std::string memory_terms(const std::vector<ex::Point>& points, const pj::Cluster& cluster,
                         const std::string& dtype) {
  std::string text =
      "Memory per rank (the memory model, lib/ted/projection/memory.hpp), per point: N_d and "
      "N_e\n"
      "  the non-expert and expert parameters a rank holds (split over T, experts over Ep);\n"
      "  persistent: weights w N, gradients g N (16-bit gradients: plus one block's fp32 stage\n"
      "  during backward), optimizer state (m, v, and the fp32 master in mixed precision) over\n"
      "  each part's data group (Ep D for N_d, D for N_e) with ZeRO-1; then the larger phase:\n"
      "  training (activations with checkpointing, the CAC stash, the exchange's buffers) or the\n"
      "  optimizer step (its fp32 tile and shard buffers). paper: (w + g + s/(Ep D)) N_d +\n"
      "  (w + g + s/D) N_e, the paper's count (s = 12 in mixed precision), for comparison.\n";
  char buffer[1024];
  for (const auto& point : points) {
    const pj::StepShape shape = ex::shape_of(point, dtype);
    const pj::MemoryEstimate e = pj::step_memory(shape);
    const pj::ParameterParts parts =
        pj::parameter_parts(shape.model, shape.layout, pj::exchange_of(shape).split);
    const double w = static_cast<double>(shape.element_bytes);
    const double g = static_cast<double>(shape.grad_bytes());
    const double state = (shape.element_bytes < 4 ? 3.0 : 2.0) * shape.master_bytes();
    const double dense_group = shape.parallel.zero1 ? shape.layout.expert * shape.layout.data : 1;
    const double expert_group = shape.parallel.zero1 ? shape.layout.data : 1;
    const double paper = (w + g + state / dense_group) * static_cast<double>(parts.dense) +
                         (w + g + state / expert_group) * static_cast<double>(parts.expert);
    const std::uint64_t gradients = static_cast<std::uint64_t>(g) * (parts.dense + parts.expert);
    auto gb = [](double bytes) { return bytes / 1e9; };
    std::snprintf(
        buffer, sizeof buffer,
        "  %s %s %s: N_d %.4g, N_e %.4g; weights %.3f GB, gradients %.3f GB (+ stage %.3f),"
        " optimizer state %.3f GB, activations %.3f GB, CAC stash %.3f GB, communication %.3f"
        " GB, optimizer tile %.3f GB; total %.3f GB of %.3f GB: %s; paper %.3f GB\n",
        point.system.name.c_str(), point.layout.to_string().c_str(), point.model_name.c_str(),
        static_cast<double>(parts.dense), static_cast<double>(parts.expert),
        gb(static_cast<double>(e.of(ted::MemoryCategory::parameters))),
        gb(static_cast<double>(gradients)),
        gb(static_cast<double>(e.of(ted::MemoryCategory::gradients) - gradients)),
        gb(static_cast<double>(e.of(ted::MemoryCategory::optimizer_state))),
        gb(static_cast<double>(e.of(ted::MemoryCategory::activations))),
        gb(static_cast<double>(e.of(ted::MemoryCategory::cac_stash))),
        gb(static_cast<double>(e.of(ted::MemoryCategory::communication))),
        gb(static_cast<double>(e.of(ted::MemoryCategory::optimizer_temporaries))),
        gb(static_cast<double>(e.total)), gb(cluster.memory_bytes),
        static_cast<double>(e.total) <= cluster.memory_bytes ? "fits" : "does not fit", gb(paper));
    text += buffer;
  }
  return text;
}

ted::CsvTable validation_table() {
  return ted::CsvTable({"experiment", "system", "G", "T", "Ep", "D", "model", "measured_ms",
                        "predicted_ms", "predicted_compute_ms", "predicted_comm_ms",
                        "relative_error", "cluster", "git_revision", "command"});
}

// The measured CSV's rows, each with the columns validate reads as numbers checked: a CSV of
// another kind is bad input, not a crash.
std::vector<std::map<std::string, std::string>> measured_rows(const std::string& path) {
  auto rows = ted::read_csv(path);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string where = path + ": row " + std::to_string(i + 2);
    auto field = [&](const char* column) -> const std::string& {
      auto it = rows[i].find(column);
      if (it == rows[i].end())
        throw ted::ConfigError(where + " has no column '" + column +
                               "' (give an experiment's measured CSV)");
      return it->second;
    };
    for (const char* column : {"system", "experiment", "model"}) field(column);
    for (const char* column : {"time_ms_median", "hidden", "heads", "layers", "checkpoint",
                               "micro_batches", "G", "T", "Ep", "D"}) {
      const std::string& text = field(column);
      char* end = nullptr;
      std::strtod(text.c_str(), &end);
      if (text.empty() || *end != '\0')
        throw ted::ConfigError(where + ", column '" + column + "': '" + text + "' is not a number");
    }
  }
  return rows;
}

// The rows validate compares: with `run` given, the timed rows of that run id; else the latest
// timed row of each point (a CSV that several runs appended to holds a row per run and point).
// `said`: a line saying what it took.
std::vector<std::map<std::string, std::string>> rows_to_validate(
    const std::vector<std::map<std::string, std::string>>& rows, const std::string& run,
    const std::string& path, std::string* said) {
  auto field = [](const std::map<std::string, std::string>& row, const char* column) {
    auto it = row.find(column);
    return it == row.end() ? std::string() : it->second;
  };
  std::vector<std::string> runs;  // in order of first appearance
  std::vector<const std::map<std::string, std::string>*> timed;
  for (const auto& row : rows) {
    if (std::stod(row.at("time_ms_median")) <= 0) continue;  // correctness-only rows
    timed.push_back(&row);
    const std::string id = field(row, "run_id");
    if (std::find(runs.begin(), runs.end(), id) == runs.end()) runs.push_back(id);
  }
  if (timed.empty()) throw ted::ConfigError(path + ": no timed rows to validate against");
  std::vector<std::map<std::string, std::string>> chosen;
  if (!run.empty()) {
    if (rows.empty() || !rows.front().count("run_id"))
      throw ted::ConfigError(path + " has no column 'run_id' (written before runs had ids): " +
                             "leave --run out to take the latest row of each point");
    for (const auto* row : timed)
      if (field(*row, "run_id") == run) chosen.push_back(*row);
    if (chosen.empty()) {
      std::string known;
      for (const auto& id : runs) known += (known.empty() ? "" : ", ") + id;
      throw ted::ConfigError(path + ": no timed row of run '" + run +
                             "' (its runs: " + (known.empty() ? "none" : known) + ")");
    }
    *said = path + ": " + std::to_string(rows.size()) + " rows, " + std::to_string(timed.size()) +
            " timed, " + std::to_string(runs.size()) + " runs; using run " + run + ": " +
            std::to_string(chosen.size()) + " rows";
    return chosen;
  }
  // A point: what the prediction depends on, and what names it.
  const char* key_columns[] = {
      "experiment",    "system",     "G",      "T",      "Ep",      "D",
      "model",         "layers",     "hidden", "heads",  "experts", "micro_batch",
      "micro_batches", "checkpoint", "dtype",  "backend"};
  std::vector<std::string> keys;
  for (const auto* row : timed) {
    std::string key;
    for (const char* column : key_columns) key += field(*row, column) + ",";
    auto at = std::find(keys.begin(), keys.end(), key);
    if (at == keys.end()) {
      keys.push_back(key);
      chosen.push_back(*row);
    } else {
      chosen[static_cast<std::size_t>(at - keys.begin())] = *row;  // a later run's row
    }
  }
  *said = path + ": " + std::to_string(rows.size()) + " rows, " + std::to_string(timed.size()) +
          " timed, " + std::to_string(runs.size()) + " runs; using the latest row of each of " +
          std::to_string(chosen.size()) + " points (" +
          std::to_string(timed.size() - chosen.size()) +
          " older rows left out; --run ID takes one run)";
  return chosen;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "TED projection (runs nothing): time per iteration, traffic and memory per rank of "
      "an experiment on a cluster file, from the suite's performance model; layout "
      "search; validation against measured rows",
      "ted_project"};
  app.require_subcommand(1);
  // CLI11 would say only that a subcommand is required; name the word it did not know.
  if (argc > 1 && argv[1][0] != '-') {
    const std::string word = argv[1];
    if (word != "experiment" && word != "search" && word != "validate") {
      std::fprintf(stderr,
                   "ted_project: error: unknown subcommand '%s' (expected experiment, search or "
                   "validate)\n",
                   word.c_str());
      return 2;
    }
  }
  std::string config_path, cluster_path, csv, measured, run;
  std::vector<std::string> overrides;
  int gpus = 0, top = 20, global_batch = 0;
  ted::CheckMode check;
  auto* experiment = app.add_subcommand("experiment", "project an experiment's points");
  auto* search = app.add_subcommand("search", "rank the layouts of a model on a cluster");
  auto* validate = app.add_subcommand("validate", "predicted against measured time per point");
  for (auto* sub : {experiment, search, validate}) {
    sub->add_option("-c,--config", config_path, "experiment YAML")->required();
    sub->add_option("--cluster", cluster_path,
                    "cluster YAML (experiments/clusters/; default: the config's run.cluster)");
    sub->add_option("--set", overrides, "override a key of the experiment YAML");
    sub->add_option("--csv", csv, "CSV to append to (default under results/local/projection/)");
    sub->add_flag("--check", check.enabled, "only validate the inputs; project and write nothing");
  }
  search->add_option("--gpus", gpus, "devices to lay the model out on")
      ->required()
      ->check(CLI::Range(1, 1 << 24));
  search
      ->add_option("--global-batch", global_batch,
                   "sequences per step of every layout (default: data.global_batch, else the "
                   "config's layout's data.micro_batches x micro_batch x ep x dp)")
      ->check(CLI::Range(1, 1 << 30));
  search->add_option("--top", top, "rows to print and write")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  validate->add_option("--measured", measured, "the experiment's measured CSV")->required();
  validate->add_option("--run", run,
                       "compare the rows of this run id (column run_id; default: the latest row "
                       "of each point)");

  return ted::run_app(argc, argv, app, [&](ted::MpiSession& mpi) {
    ex::ExperimentConfig config = ex::load_config(config_path, overrides, "");
    if (cluster_path.empty()) cluster_path = config.train.run.cluster;
    if (cluster_path.empty())
      throw ted::ConfigError(config_path +
                             ": no cluster: give --cluster or name one in key 'run.cluster'");
    const pj::Cluster cluster = pj::Cluster::load(cluster_path);
    const std::string where = ted::config_origin(config_path, overrides);
    const std::string command = ted::command_line(argc, argv);
    if (mpi.world_rank() != 0) return 0;  // nothing to share: one process does it all
    std::vector<std::map<std::string, std::string>> measured_table;  // the rows validate takes
    std::string measured_said;
    if (*validate) {  // the input first, then where the output goes
      ted::check_readable_file(measured, "--measured CSV");
      measured_table = rows_to_validate(measured_rows(measured), run, measured, &measured_said);
    }
    // Where the rows will go, before anything is projected: an unusable path is bad input.
    if (csv.empty() && *experiment)
      csv = "results/local/projection/" + config.experiment + "_" + stem(config_path) + "_" +
            cluster.name + ".csv";
    if (csv.empty() && *validate)
      csv = "results/local/projection/validation_" + cluster.name + ".csv";
    if (!csv.empty())
      ted::check_csv_appendable(*validate ? validation_table() : ex::result_table(), csv);
    if (check.enabled) {
      std::printf("ted_project: check passed: %s on cluster %s\n", where.c_str(),
                  cluster.name.c_str());
      return 0;
    }

    if (*experiment) {
      ex::Plan plan =
          ex::plan_for(config.experiment)(config, where, std::numeric_limits<int>::max());
      ted::CsvTable table = ex::result_table();
      ex::ExperimentConfig labelled = config;
      labelled.backend = "projected:" + cluster.name;
      labelled.iters = 0;
      labelled.warmup = 0;
      for (std::size_t i = 0; i < plan.points.size(); ++i) {
        // Every projected row is judged against the cluster's memory (the fits column), the
        // memory experiment's against its own budget.
        if (plan.points[i].budget < 0)
          plan.points[i].budget = static_cast<std::int64_t>(cluster.memory_bytes);
        auto result = ex::project(plan.points[i], cluster, config.train.run.dtype);
        ex::print_progress(static_cast<int>(i), static_cast<int>(plan.points.size()),
                           plan.points[i], result);
        const auto budget = static_cast<std::uint64_t>(plan.points[i].budget);
        std::printf(
            "      memory: peak %s per rank, %s %s: %s\n",
            ted::format_bytes(result.peak_total).c_str(),
            budget == static_cast<std::uint64_t>(cluster.memory_bytes) ? "device" : "budget",
            ted::format_bytes(budget).c_str(),
            result.peak_total <= budget ? "fits" : "does not fit");
        ex::add_result(table, labelled, plan.points[i], result, command);
      }
      ex::append_rows(table, csv);
      write_assumptions(csv, cluster, config, command,
                        memory_terms(plan.points, cluster, config.train.run.dtype));
      std::printf("# CSV: %s (assumptions: %s.assumptions.txt)\n", csv.c_str(), csv.c_str());
      return 0;
    }

    if (*search) {
      // Every layout processes the same sequences per step, or their times do not compare.
      if (global_batch == 0) global_batch = config.global_batch;
      if (global_batch == 0 && config.ep > 0 && config.dp > 0)
        global_batch =
            config.train.data.micro_batches * config.train.data.micro_batch * config.ep * config.dp;
      if (global_batch == 0)
        throw ted::ConfigError(where +
                               ": the search compares layouts at one global batch: give "
                               "--global-batch, data.global_batch, or layout.ep and layout.dp");
      int left_out = 0;
      auto candidates = ex::search(config, gpus, cluster, global_batch, &left_out);
      if (candidates.empty())
        throw ted::ConfigError(where + ": no layout of " + std::to_string(gpus) +
                               " GPUs splits this model at a global batch of " +
                               std::to_string(global_batch) +
                               " (T must divide the heads, Ep the experts, micro_batch x Ep x D "
                               "the global batch); nothing written");
      std::printf(
          "# %s on %d x %s (%s), %s, %d sequences per step: %zu candidates (%d layouts left "
          "out: their data-parallel ranks do not divide the global batch), fitting first, "
          "fastest first\n",
          config_path.c_str(), gpus, cluster.device.c_str(), cluster.name.c_str(),
          config.train.run.dtype.c_str(), global_batch, candidates.size(), left_out);
      std::printf("%4s %-18s %3s %3s %4s %6s %10s %10s %10s %10s %5s\n", "rank", "system", "T",
                  "Ep", "D", "micro", "ms/iter", "compute", "comm", "peak GB", "fits");
      ted::CsvTable table = ex::result_table();
      ex::ExperimentConfig labelled = config;
      labelled.backend = "projected:" + cluster.name;
      labelled.iters = 0;
      labelled.warmup = 0;
      // The --top rows, printed and written: the CSV stays small.
      for (std::size_t i = 0; i < candidates.size() && static_cast<int>(i) < top; ++i) {
        const auto& c = candidates[i];
        std::printf("%4zu %-18s %3d %3d %4d %6d %10.1f %10.1f %10.1f %10.2f %5s\n", i + 1,
                    c.point.system.name.c_str(), c.point.layout.tensor, c.point.layout.expert,
                    c.point.layout.data, c.point.train.data.micro_batches, c.time.total() * 1e3,
                    c.time.compute * 1e3, c.time.communication * 1e3, c.peak / 1e9,
                    c.fits ? "yes" : "no");
        ex::add_result(table, labelled, c.point, c.result, command);  // in rank order
      }
      if (!csv.empty()) {
        ted::append_csv(table, csv);
        write_assumptions(csv, cluster, config, command);
        std::printf("# CSV: %s\n", csv.c_str());
      }
      return 0;
    }

    // validate
    ted::CsvTable table = validation_table();
    std::vector<double> errors;
    std::printf("# %s\n", measured_said.c_str());
    for (const auto& row : measured_table) {
      ted::train::TrainConfig train = config.train;
      train.model.hidden = std::stoi(row.at("hidden"));
      train.model.heads = std::stoi(row.at("heads"));
      train.model.layers = std::stoi(row.at("layers"));
      train.model.checkpoint = row.at("checkpoint") == "1";
      train.data.micro_batches = std::stoi(row.at("micro_batches"));
      ted::Layout layout{std::stoi(row.at("T")), std::stoi(row.at("Ep")), std::stoi(row.at("D"))};
      auto point =
          ex::make_point(config, ex::parse_system(row.at("system"), measured), layout, train);
      const auto t = pj::step_time(ex::shape_of(point, config.train.run.dtype, cluster), cluster);
      const double measured_ms = std::stod(row.at("time_ms_median"));
      const double error = (t.total() * 1e3 - measured_ms) / measured_ms;
      errors.push_back(std::abs(error));
      std::printf(
          "%-16s %-14s G=%-3s T=%s Ep=%s D=%s %-12s measured %8.2f ms, predicted %8.2f "
          "ms (compute %.2f, comm %.2f): %+.1f%%\n",
          row.at("experiment").c_str(), row.at("system").c_str(), row.at("G").c_str(),
          row.at("T").c_str(), row.at("Ep").c_str(), row.at("D").c_str(), row.at("model").c_str(),
          measured_ms, t.total() * 1e3, t.compute * 1e3, t.communication * 1e3, error * 100);
      table.row()
          .add(row.at("experiment"))
          .add(row.at("system"))
          .add(row.at("G"))
          .add(row.at("T"))
          .add(row.at("Ep"))
          .add(row.at("D"))
          .add(row.at("model"))
          .add(measured_ms)
          .add(t.total() * 1e3)
          .add(t.compute * 1e3)
          .add(t.communication * 1e3)
          .add(error)
          .add(cluster.name)
          .add(ted::git_revision())
          .add(command);
    }
    ex::append_rows(table, csv);
    std::printf("# median |error| %.1f%% over %zu points; CSV: %s\n",
                ted::percentile(errors, 50) * 100, errors.size(), csv.c_str());
    return 0;
  });
}
