// ted_collbench: the collective benchmark, in the manner of nccl-tests. Sweeps message sizes
// for one collective on one kind of TED group, checks every result, prints a table and writes
// the rows as CSV (atomically, with the run's layout, backend and git revision).
//
//   mpirun -np 4 --oversubscribe build/apps/ted_collbench --op all_to_all -b 1K -e 16M -f 2 \
//       --compare-mpi --csv results/collbench/all_to_all_world_mpi_G4.csv
//   mpirun -np 8 build/apps/ted_collbench --op all_gather --group tensor --tp 2 --ep 2
//
// -n 0 -w 0 is the correctness-only mode: one checked run per size, nothing timed.
#include <cstdio>
#include <filesystem>
#include <string>

#include "ted/app/app_main.hpp"
#include "ted/backend/registry.hpp"
#include "ted/bench/collbench_report.hpp"
#include "ted/bench/collective_cases.hpp"
#include "ted/core/error.hpp"
#include "ted/run/run.hpp"

namespace {

// The command line: the benchmark's options as text (resolved by bench::resolve), the CSV path,
// the old --backend spelling (refused with a pointer to --comm) and --check.
struct Options {
  ted::bench::CollbenchArgs args;
  std::string csv_path, old_backend;
  ted::CheckMode check;
};

void add_options(CLI::App& app, Options& o) {
  auto& args = o.args;
  auto& options = args.options;
  app.add_option("-o,--op", args.op, ted::bench::benchmarked_collectives())->capture_default_str();
  app.add_option(
         "-g,--group", args.group,
         "world, tensor, expert, expert_data or nonexpert_data (of the --tp/--ep/--dp grid)")
      ->capture_default_str();
  app.add_option("-b,--minbytes", args.min_bytes, "smallest size (bytes; K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", args.max_bytes, "largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", options.step_factor, "size multiplier between rows")
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", options.warmup_iters, "untimed iterations per size")
      ->capture_default_str();
  app.add_option("-n,--iters", options.iters, "timed iterations per size (0: check only)")
      ->capture_default_str();
  app.add_option("-d,--datatype", args.dtype, "float, double, half, bfloat16, int32, int64, uint8")
      ->capture_default_str();
  app.add_option("-r,--root", options.root, "broadcast root (rank in the group)")
      ->capture_default_str();
  app.add_option("--tp", args.tensor, "tensor-parallel size T")->capture_default_str();
  app.add_option("--ep", args.expert, "expert-parallel size Ep")->capture_default_str();
  app.add_option("--dp", args.data, "data-parallel size D (0: ranks / (T * Ep))")
      ->capture_default_str();
  app.add_option("--comm", args.comm, "mpi or nccl: what carries the buffers (nccl: GPU memory)")
      ->capture_default_str();
  // The old spelling: refused with a pointer to --comm (other programs' --backend is cpu|cuda,
  // which here is --device).
  app.add_option("--backend", o.old_backend)->group("");
  app.add_option("--device", args.device,
                 "cpu or cuda: where the buffers live (default: cuda for nccl, else cpu; mpi on "
                 "cuda stages GPU memory through host buffers)");
  app.add_flag("--compare-mpi", options.compare_mpi,
               "also time plain MPI calls in the same run (mpi backend)");
  app.add_flag("--back-to-back", options.back_to_back,
               "time the calls one after another with no barrier between them, as nccl-tests "
               "does (each call: the interval since the previous call's completion); default: a "
               "barrier before every call");
  app.add_option(
      "--csv", o.csv_path,
      "CSV path (default results/local/collbench/<op>_<group>_<comm>_G<ranks>.csv, comm = mpi, "
      "mpi-staged or nccl)");
  ted::add_check_options(app, o.check);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ted_collbench: the collective benchmark (nccl-tests style). Measures the time (median, "
      "p10, p90 of the slowest rank), algbw and busbw of one collective on one kind of TED group "
      "over a sweep of message sizes, checks every element of every result (#wrong), prints a "
      "table and writes a CSV. -n 0 -w 0 checks only.",
      "ted_collbench"};
  Options o;
  add_options(app, o);
  const auto& args = o.args;
  const auto& check = o.check;
  std::string& csv_path = o.csv_path;
  return ted::run_app(
      argc, argv, app,
      [&](ted::MpiSession& mpi) {
        // Everything that can be wrong with the input is checked here, identically on every rank.
        if (app.count("--backend"))
          throw ted::ConfigError("--backend " + o.old_backend +
                                 ": renamed; use --comm mpi|nccl (what carries the buffers; "
                                 "--device cpu|cuda says where they live)");
        const int ranks = check.enabled ? check.ranks_for(mpi.world_size()) : mpi.world_size();
        const ted::bench::CollbenchPlan plan = ted::bench::resolve(args, ranks);
        const bool rank0 = mpi.world_rank() == 0;
        if (check.enabled) {
          const std::string report = ted::bench::check_report(plan);
          if (rank0) std::fputs(report.c_str(), stdout);
          return 0;
        }
        ted::require_backend(plan.device, plan.comm, MPI_COMM_WORLD);
        // The largest size's buffers of all ranks on a device must fit it, before any is
        // allocated (RunSpec::need); no trainer, no tracking allocator.
        ted::RunSpec spec;
        spec.device = plan.device;
        spec.comm = plan.comm;
        spec.need = plan.need;
        spec.track = false;
        spec.refuse = [&](const std::string& text) {
          return "-e/--maxbytes " + args.max_bytes + ": " + text +
                 " (lower -e, or use fewer ranks per node)";
        };
        ted::RunWiring run(spec, plan.layout);
        if (plan.options.compare_mpi && run.world().name() != "mpi")
          throw ted::ConfigError("--compare-mpi needs host memory (--comm mpi --device cpu)");
        const std::string carrier = run.world().name();  // mpi, mpi-staged or nccl
        if (csv_path.empty())
          csv_path = "results/local/collbench/" + std::string(ted::to_string(plan.options.op)) +
                     "_" + std::string(ted::to_string(plan.options.group)) + "_" + carrier + "_G" +
                     std::to_string(mpi.world_size()) + ".csv";
        if (std::filesystem::is_directory(csv_path))
          throw ted::ConfigError("--csv '" + csv_path + "' is a directory, not a file");
        ted::Communicator& group = run.groups().group(plan.options.group);
        group.set_ledger(&run.ledger());  // also for the world, which the run leaves alone

        if (rank0)
          ted::bench::print_header(plan, group, carrier, run.device().name(), mpi.world_size());
        bool compare = plan.options.compare_mpi;
        auto rows = ted::bench::run_collective_bench(
            plan.options, run.control(), group, run.device(), &ted::bench::print_row, &compare);
        const ted::bench::CollectiveBenchContext context{
            carrier, mpi.world_size(), plan.layout, group.size(), ted::command_line(argc, argv)};
        return ted::bench::finish(plan, rows, context, csv_path, rank0);
      },
      &o.check);
}
