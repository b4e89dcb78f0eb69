#include "ted/experiments/validation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/experiments/projected.hpp"

namespace ted::experiments {

namespace {

// The measured CSV's rows, each with the columns validate reads as numbers checked: a CSV of
// another kind is bad input, not a crash.
std::vector<MeasuredRow> checked_rows(const std::string& path) {
  auto rows = read_csv(path);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string where = path + ": row " + std::to_string(i + 2);
    auto field = [&](const char* column) -> const std::string& {
      auto it = rows[i].find(column);
      if (it == rows[i].end())
        throw ConfigError(where + " has no column '" + column +
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
        throw ConfigError(where + ", column '" + column + "': '" + text + "' is not a number");
    }
  }
  return rows;
}

// The rows validate compares: with `run` given, the timed rows of that run id; else the latest
// timed row of each point (a CSV that several runs appended to holds a row per run and point).
// `said`: a line saying what it took.
std::vector<MeasuredRow> rows_to_validate(const std::vector<MeasuredRow>& rows,
                                          const std::string& run, const std::string& path,
                                          std::string* said) {
  auto field = [](const MeasuredRow& row, const char* column) {
    auto it = row.find(column);
    return it == row.end() ? std::string() : it->second;
  };
  std::vector<std::string> runs;  // in order of first appearance
  std::vector<const MeasuredRow*> timed;
  for (const auto& row : rows) {
    if (std::stod(row.at("time_ms_median")) <= 0) continue;  // correctness-only rows
    if (!field(row, "round").empty()) continue;  // one round of several: its summary row counts
    timed.push_back(&row);
    const std::string id = field(row, "run_id");
    if (std::find(runs.begin(), runs.end(), id) == runs.end()) runs.push_back(id);
  }
  if (timed.empty()) throw ConfigError(path + ": no timed rows to validate against");
  std::vector<MeasuredRow> chosen;
  if (!run.empty()) {
    if (rows.empty() || !rows.front().count("run_id"))
      throw ConfigError(path + " has no column 'run_id' (written before runs had ids): " +
                        "leave --run out to take the latest row of each point");
    for (const auto* row : timed)
      if (field(*row, "run_id") == run) chosen.push_back(*row);
    if (chosen.empty()) {
      std::string known;
      for (const auto& id : runs) known += (known.empty() ? "" : ", ") + id;
      throw ConfigError(path + ": no timed row of run '" + run +
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

std::vector<MeasuredRow> measured_rows(const std::string& path, const std::string& run,
                                       std::string* said) {
  return rows_to_validate(checked_rows(path), run, path, said);
}

CsvTable validation_table() {
  return CsvTable({"experiment", "system", "G", "T", "Ep", "D", "model", "measured_ms",
                   "predicted_ms", "predicted_compute_ms", "predicted_comm_ms", "relative_error",
                   "cluster", "git_revision", "command"});
}

std::vector<double> validate_rows(const ExperimentConfig& config,
                                  const projection::Cluster& cluster,
                                  const std::vector<MeasuredRow>& rows, const std::string& measured,
                                  const std::string& command, CsvTable& table) {
  std::vector<double> errors;
  for (const auto& row : rows) {
    train::TrainConfig train = config.train;
    train.model.hidden = std::stoi(row.at("hidden"));
    train.model.heads = std::stoi(row.at("heads"));
    train.model.layers = std::stoi(row.at("layers"));
    train.model.checkpoint = row.at("checkpoint") == "1";
    train.data.micro_batches = std::stoi(row.at("micro_batches"));
    Layout layout{std::stoi(row.at("T")), std::stoi(row.at("Ep")), std::stoi(row.at("D"))};
    auto point = make_point(config, parse_system(row.at("system"), measured), layout, train);
    const auto t = projection::step_time(shape_of(point, cluster), cluster);
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
        .add(git_revision())
        .add(command);
  }
  return errors;
}

}  // namespace ted::experiments
