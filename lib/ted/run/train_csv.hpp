// ted_train's CSV, declared once (core/csv_columns.hpp): one row per optimizer step with the
// loss, the schedule, the time, the layout and switches, backend, dtypes, communicator and
// device, the bytes each collective kind moved in each group (the ledger), the allocator's peak
// per category, and the fingerprint (last row only), git revision, command line and attention.
// baselines/deepspeed/run.py writes the same columns; test csv_columns holds them equal.
#pragma once

#include <string>

#include "ted/core/csv_columns.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/run/run.hpp"
#include "ted/train/train_config.hpp"
#include "ted/train/trainer.hpp"

namespace ted {

// What one step's row is read from.
struct TrainStepRow {
  const train::TrainConfig& config;
  const Layout& layout;
  TrainingRun& run;
  const train::StepRecord& record;
  const std::string& command;
};

const CsvColumns<TrainStepRow>& train_csv_columns();

}  // namespace ted
