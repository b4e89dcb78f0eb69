// ted_project validate: the projection against measured rows, point by point. The measured
// CSV is an experiment's (results/<experiment>/*.csv); its rows are checked before use (a CSV
// of another kind is bad input), then either one run's timed rows (--run ID) or the latest
// timed row of each point are compared with the time the model predicts for that point.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ted/core/csv.hpp"
#include "ted/experiments/config.hpp"
#include "ted/projection/cluster.hpp"

namespace ted::experiments {

using MeasuredRow = std::map<std::string, std::string>;

// The rows to compare from the measured CSV at `path`: with `run` given, the timed rows of that
// run id; else the latest timed row of each point (a CSV that several runs appended to holds a
// row per run and point). `said`: a line saying what it took. ConfigError naming the row and
// column when a column validate reads is missing or not a number.
std::vector<MeasuredRow> measured_rows(const std::string& path, const std::string& run,
                                       std::string* said);

// The validation CSV's columns.
CsvTable validation_table();

// Each row's point (the row's model size, checkpointing, micro-batches, layout and system on
// `config`) projected on `cluster` and compared with its measured time: a line printed and a
// row of `table` per point. Returns the |relative errors|.
std::vector<double> validate_rows(const ExperimentConfig& config,
                                  const projection::Cluster& cluster,
                                  const std::vector<MeasuredRow>& rows, const std::string& measured,
                                  const std::string& command, CsvTable& table);

}  // namespace ted::experiments
