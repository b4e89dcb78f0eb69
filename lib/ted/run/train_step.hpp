// One optimizer step as the training programs log it (ted_train, the convergence experiment):
// the ledger cleared, the step, a non-finite loss refused, the CSV row, and after the update the
// held-out loss where training.eval_every says so (the row's valid_loss; its collectives are not
// the step's bytes, the row being read first).
#pragma once

#include <functional>
#include <string>

#include "ted/core/csv.hpp"
#include "ted/grid/process_grid.hpp"
#include "ted/run/run.hpp"
#include "ted/train/train_config.hpp"
#include "ted/train/trainer.hpp"

namespace ted {

struct LoggedStep {
  train::StepRecord record;  // with valid_loss where evaluated
  bool evaluated = false;
};

// Runs 0-based step `step` of `config.steps` and adds its row (train_csv_columns' fields, then
// `extra` where the table has more columns) to `table`. A non-finite loss (the same on every
// rank) calls keep_rows (to save what was measured) and throws ted::Error naming the step.
LoggedStep step_and_log(TrainingRun& run, const train::TrainConfig& config, const Layout& layout,
                        int step, CsvTable& table, const std::string& command,
                        const std::function<void()>& keep_rows,
                        const std::vector<std::string>& extra = {});

}  // namespace ted
