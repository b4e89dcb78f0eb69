#include "ted/run/train_csv.hpp"

#include <cmath>

#include "ted/core/git_revision.hpp"
#include "ted/kernels/cpu/blas.hpp"

namespace ted {

namespace {

// The ledger's columns: every kind of collective in every group, op-major.
constexpr CollectiveOp kLedgerOps[] = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                                       CollectiveOp::reduce_scatter, CollectiveOp::all_to_all};

CsvColumns<TrainStepRow> make_columns() {
  using R = const TrainStepRow&;
  CsvColumns<TrainStepRow> c;
  // Optimizer steps count from 1, as the terminal's lines do.
  c.add("step", [](R s) { return s.record.step + 1LL; });
  c.add("loss", [](R s) { return s.record.loss; });
  c.add("lm_loss", [](R s) { return s.record.lm_loss; });
  c.add("aux_loss", [](R s) { return s.record.aux_loss; });
  // The held-out LM loss after this step (training.eval_every), empty where not evaluated.
  c.add("valid_loss", [](R s) -> CsvField {
    if (std::isnan(s.record.valid_loss)) return std::string();
    return s.record.valid_loss;
  });
  c.add("lr", [](R s) { return s.record.lr; });
  c.add("grad_norm", [](R s) { return s.record.grad_norm; });
  c.add("dropped", [](R s) { return static_cast<long long>(s.record.dropped); });
  c.add("seconds", [](R s) { return s.record.seconds; });
  c.add("tokens_per_s", [](R s) { return s.record.tokens_per_second; });
  c.add("gflops_per_s", [](R s) { return s.record.flops / s.record.seconds / 1e9; });
  c.add("G", [](R s) { return static_cast<long long>(s.run.ranks()); });
  c.add("T", [](R s) { return static_cast<long long>(s.layout.tensor); });
  c.add("Ep", [](R s) { return static_cast<long long>(s.layout.expert); });
  c.add("D", [](R s) { return static_cast<long long>(s.layout.data); });
  c.add("dtd", [](R s) { return static_cast<long long>(s.config.parallel.dtd); });
  c.add("cac", [](R s) { return static_cast<long long>(s.config.parallel.cac); });
  c.add("reduce_scatter",
        [](R s) { return static_cast<long long>(s.config.parallel.reduce_scatter); });
  c.add("zero1", [](R s) { return static_cast<long long>(s.config.parallel.zero1); });
  c.add("tile_elems", [](R s) { return static_cast<long long>(s.config.parallel.tile_elems); });
  c.add("backend", [](R s) { return CsvField(std::string(to_string(s.config.run.backend))); });
  c.add("dtype", [](R s) { return CsvField(std::string(precision_name(s.config.run.dtype))); });
  c.add("grad_dtype",
        [](R s) { return CsvField(std::string(precision_name(s.config.model.grad_dtype))); });
  c.add("comm", [](R s) { return s.run.world().name(); });
  c.add("device", [](R s) { return s.run.base_device().name(); });
  c.add("loss_scale", [](R s) { return s.record.loss_scale; });
  c.add("skipped", [](R s) { return static_cast<long long>(s.record.skipped); });
  for (auto op : kLedgerOps)
    for (auto kind : kLedgerGroups)
      c.add(std::string(to_string(op)) + "_" + std::string(to_string(kind)) + "_bytes",
            [op, kind](R s) {
              return static_cast<unsigned long long>(s.run.ledger().total(op, kind).bytes_sent);
            });
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    const auto category = static_cast<MemoryCategory>(i);
    c.add("peak_" + std::string(to_string(category)) + "_bytes", [category](R s) {
      return static_cast<unsigned long long>(s.run.tracked().usage(category).peak);
    });
  }
  c.add("fingerprint", [](R) { return std::string(); });  // the last row's, set at the end
  c.add("git_revision", [](R) { return std::string(git_revision()); });
  c.add("command", [](R s) { return s.command; });
  c.add("attention", [](R s) { return s.run.trainer().attention(); });
  // The host's BLAS and the kernels it ran (core/blas_library.hpp).
  c.add("blas", [](R) { return kernels::cpu::blas_name(); });
  c.add("blas_kernel", [](R) { return kernels::cpu::blas_kernel(); });
  return c;
}

}  // namespace

const CsvColumns<TrainStepRow>& train_csv_columns() {
  static const CsvColumns<TrainStepRow> columns = make_columns();
  return columns;
}

}  // namespace ted
