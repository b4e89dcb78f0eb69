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
//   ted_project experiment -c experiments/ablation/cpu.yaml --print-config
//       every key's type and default, and the config's resolved values, as JSON (the DeepSpeed
//       runner reads the first part, committed as experiments/config_schema.json)
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ted/app/app_main.hpp"
#include "ted/core/config_schema.hpp"
#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/core/stats.hpp"
#include "ted/experiments/assumptions.hpp"
#include "ted/experiments/projected.hpp"
#include "ted/experiments/rows.hpp"
#include "ted/experiments/validation.hpp"

namespace ex = ted::experiments;
namespace pj = ted::projection;

namespace {

std::string stem(const std::string& path) {
  return std::filesystem::path(path).stem().string();
}

// The command line: the three subcommands and their options.
struct Options {
  std::string config_path, cluster_path, csv, measured, run;
  std::vector<std::string> overrides;
  int gpus = 0, top = 20, global_batch = 0;
  bool print_config = false;
  ted::CheckMode check;
  CLI::App *experiment = nullptr, *search = nullptr, *validate = nullptr;
};

void add_options(CLI::App& app, Options& o) {
  o.experiment = app.add_subcommand("experiment", "project an experiment's points");
  o.search = app.add_subcommand("search", "rank the layouts of a model on a cluster");
  o.validate = app.add_subcommand("validate", "predicted against measured time per point");
  for (auto* sub : {o.experiment, o.search, o.validate}) {
    sub->add_option("-c,--config", o.config_path, "experiment YAML")->required();
    sub->add_option("--cluster", o.cluster_path,
                    "cluster YAML (experiments/clusters/; default: the config's run.cluster)");
    sub->add_option("--set", o.overrides, "override a key of the experiment YAML");
    sub->add_flag("--print-config", o.print_config,
                  "print every key's type and default and the config's resolved values as JSON "
                  "(experiments/config_schema.json is the first part), and nothing else");
    sub->add_option("--csv", o.csv, "CSV to append to (default under results/local/projection/)");
    sub->add_flag("--check", o.check.enabled,
                  "only validate the inputs; project and write nothing");
  }
  o.search->add_option("--gpus", o.gpus, "devices to lay the model out on")
      ->required()
      ->check(CLI::Range(1, 1 << 24));
  o.search
      ->add_option("--global-batch", o.global_batch,
                   "sequences per step of every layout (default: data.global_batch, else the "
                   "config's layout's data.micro_batches x micro_batch x ep x dp)")
      ->check(CLI::Range(1, 1 << 30));
  o.search->add_option("--top", o.top, "rows to print and write")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  o.validate->add_option("--measured", o.measured, "the experiment's measured CSV")->required();
  o.validate->add_option("--run", o.run,
                         "compare the rows of this run id (column run_id; default: the latest row "
                         "of each point)");
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
  Options o;
  add_options(app, o);
  std::string &config_path = o.config_path, &cluster_path = o.cluster_path, &csv = o.csv;
  const std::vector<std::string>& overrides = o.overrides;
  int& global_batch = o.global_batch;
  const auto& check = o.check;
  CLI::App &experiment = *o.experiment, &search = *o.search, &validate = *o.validate;
  return ted::run_app(argc, argv, app, [&](ted::MpiSession& mpi) {
    ex::ExperimentConfig config = ex::load_config(config_path, overrides, "");
    if (o.print_config) {
      if (mpi.world_rank() == 0)
        std::printf("{\"schema\": %s,\n\"values\": %s}\n",
                    ex::ExperimentConfig{}.schema().json_schema().c_str(),
                    config.schema().json_values().c_str());
      return 0;
    }
    if (cluster_path.empty()) cluster_path = config.train.run.cluster;
    if (cluster_path.empty())
      throw ted::ConfigError(config_path +
                             ": no cluster: give --cluster or name one in key 'run.cluster'");
    const pj::Cluster cluster = pj::Cluster::load(cluster_path);
    const std::string where = ted::config_origin(config_path, overrides);
    const std::string command = ted::command_line(argc, argv);
    if (mpi.world_rank() != 0) return 0;          // nothing to share: one process does it all
    std::vector<ex::MeasuredRow> measured_table;  // the rows validate takes
    std::string measured_said;
    if (validate) {  // the input first, then where the output goes
      ted::check_readable_file(o.measured, "--measured CSV");
      measured_table = ex::measured_rows(o.measured, o.run, &measured_said);
    }
    // Where the rows will go, before anything is projected: an unusable path is bad input.
    if (csv.empty() && experiment)
      csv = "results/local/projection/" + config.experiment + "_" + stem(config_path) + "_" +
            cluster.name + ".csv";
    if (csv.empty() && validate)
      csv = "results/local/projection/validation_" + cluster.name + ".csv";
    if (!csv.empty())
      ted::check_csv_appendable(validate ? ex::validation_table() : ex::result_table(), csv);
    if (check.enabled) {
      std::printf("ted_project: check passed: %s on cluster %s\n", where.c_str(),
                  cluster.name.c_str());
      return 0;
    }

    if (experiment) {
      std::vector<ex::Point> points;
      ex::append_rows(ex::project_plan(config, cluster, where, command, &points), csv);
      ex::write_assumptions(csv, cluster, config, command, ex::memory_terms(points, cluster));
      std::printf("# CSV: %s (assumptions: %s.assumptions.txt)\n", csv.c_str(), csv.c_str());
      return 0;
    }

    if (search) {
      global_batch = ex::search_global_batch(config, global_batch, where);
      int left_out = 0;
      std::vector<ex::Refused> refused;
      auto candidates = ex::search(config, o.gpus, cluster, global_batch, &left_out, &refused);
      if (candidates.empty())
        throw ted::ConfigError(where + ": no layout of " + std::to_string(o.gpus) +
                               " GPUs splits this model at a global batch of " +
                               std::to_string(global_batch) +
                               " (T must divide the heads, Ep the experts, micro_batch x Ep x D "
                               "the global batch); nothing written");
      std::printf(
          "# %s on %d x %s (%s), %s, %d sequences per step: %zu candidates (%d layouts left "
          "out: their data-parallel ranks do not divide the global batch), fitting first, "
          "fastest first\n",
          config_path.c_str(), o.gpus, cluster.device.c_str(), cluster.name.c_str(),
          std::string(ted::precision_name(config.train.run.dtype)).c_str(), global_batch,
          candidates.size(), left_out);
      ted::CsvTable table = ex::print_search(config, candidates, o.top, cluster, command);
      ex::print_refused(refused, candidates, cluster, o.top);
      if (!csv.empty()) {
        ted::append_csv(table, csv);
        ex::write_assumptions(csv, cluster, config, command);
        std::printf("# CSV: %s\n", csv.c_str());
      }
      return 0;
    }

    ted::CsvTable table = ex::validation_table();  // validate
    std::printf("# %s\n", measured_said.c_str());
    const std::vector<double> errors =
        ex::validate_rows(config, cluster, measured_table, o.measured, command, table);
    ex::append_rows(table, csv);
    std::printf("# median |error| %.1f%% over %zu points; CSV: %s\n",
                ted::percentile(errors, 50) * 100, errors.size(), csv.c_str());
    return 0;
  });
}
