#include "ted/run/train_step.hpp"

#include <cmath>
#include <cstdio>

#include "ted/core/error.hpp"
#include "ted/run/train_csv.hpp"

namespace ted {

LoggedStep step_and_log(TrainingRun& run, const train::TrainConfig& config, const Layout& layout,
                        int step, CsvTable& table, const std::string& command,
                        const std::function<void()>& keep_rows,
                        const std::vector<std::string>& extra) {
  run.ledger().clear();
  LoggedStep logged;
  logged.record = run.trainer().step(step);
  auto& r = logged.record;
  if (!std::isfinite(r.loss)) {  // the same on every rank: the loss is reduced over all
    if (table.rows() > 0 && keep_rows) keep_rows();
    throw Error("loss is " + std::to_string(r.loss) + " at step " + std::to_string(step + 1) +
                (table.rows() ? " (the steps before it are kept)" : ""));
  }
  const auto& columns = train_csv_columns();
  columns.add_row(table, {config, layout, run, r, command});
  for (const auto& field : extra) table.add(field);
  const int done = step + 1;
  logged.evaluated =
      config.eval_every > 0 && (done % config.eval_every == 0 || done == config.steps);
  if (logged.evaluated) {
    r.valid_loss = run.trainer().evaluate(step, config.eval_batches);
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", r.valid_loss);
    table.set_last(columns.index("valid_loss"), text);
  }
  return logged;
}

}  // namespace ted
