// What a measured point leaves: its row of the experiments' CSV and rank 0's progress line.
#pragma once

#include <string>

#include "ted/core/csv.hpp"
#include "ted/experiments/config.hpp"
#include "ted/experiments/measure.hpp"
#include "ted/experiments/plans.hpp"

namespace ted::experiments {

// This process's run id, the same in every row it writes: UTC start time and process id,
// "20250101T120000Z-4242". The rows of one run share it; validate and the figures pick runs by it.
const std::string& run_id();

// The CSV of every experiment, and one row of it.
CsvTable result_table();
void add_result(CsvTable& table, const ExperimentConfig& config, const Point& point,
                const Result& result, const std::string& command);
// Appends the rows to `path` (core/csv.hpp append_csv: locked, whole rows; an existing file
// with another header is an error rather than a mixed file).
void append_rows(const CsvTable& table, const std::string& path);

// Rank 0's progress line for point i of n.
void print_progress(int index, int count, const Point& point, const Result& result);

}  // namespace ted::experiments
