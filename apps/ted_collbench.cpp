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
#include "ted/bench/collective_bench.hpp"
#include "ted/core/error.hpp"
#include "ted/core/git_revision.hpp"
#include "ted/core/units.hpp"
#include "ted/run/check.hpp"
#include "ted/run/run.hpp"

namespace {

void print_row(const ted::bench::CollectiveBenchRow& row, void* user) {
  bool compare = *static_cast<bool*>(user);
  std::printf("%12zu %12zu %10.2f %10.2f %10.2f %8.3f %8.3f %8llu", row.bytes, row.elements,
              row.time_us.median, row.time_us.p10, row.time_us.p90, row.algbw_gbs, row.busbw_gbs,
              static_cast<unsigned long long>(row.wrong));
  if (compare) {
    double ratio = row.reference_busbw_gbs > 0 ? row.busbw_gbs / row.reference_busbw_gbs : 0.0;
    std::printf(" %10.2f %8.3f %6.3f", row.reference_time_us.median, row.reference_busbw_gbs,
                ratio);
  }
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "ted_collbench: the collective benchmark (nccl-tests style). Measures the time (median, "
      "p10, p90 of the slowest rank), algbw and busbw of one collective on one kind of TED group "
      "over a sweep of message sizes, checks every element of every result (#wrong), prints a "
      "table and writes a CSV. -n 0 -w 0 checks only.",
      "ted_collbench"};
  std::string op_name = "all_to_all", group_name = "world", dtype_name = "float";
  std::string comm_name = "mpi", device_name, min_text = "1K", max_text = "16M", csv_path;
  int tensor = 1, expert = 1, data = 0;
  ted::bench::CollectiveBenchOptions options;
  app.add_option("-o,--op", op_name,
                 "all_reduce, all_gather, reduce_scatter, all_to_all, all_to_all_v, broadcast")
      ->capture_default_str();
  app.add_option(
         "-g,--group", group_name,
         "world, tensor, expert, expert_data or nonexpert_data (of the --tp/--ep/--dp grid)")
      ->capture_default_str();
  app.add_option("-b,--minbytes", min_text, "smallest size (bytes; K, M, G suffixes)")
      ->capture_default_str();
  app.add_option("-e,--maxbytes", max_text, "largest size")->capture_default_str();
  app.add_option("-f,--stepfactor", options.step_factor, "size multiplier between rows")
      ->capture_default_str();
  app.add_option("-w,--warmup_iters", options.warmup_iters, "untimed iterations per size")
      ->capture_default_str();
  app.add_option("-n,--iters", options.iters, "timed iterations per size (0: check only)")
      ->capture_default_str();
  app.add_option("-d,--datatype", dtype_name, "float, double, half, bfloat16, int32, int64, uint8")
      ->capture_default_str();
  app.add_option("-r,--root", options.root, "broadcast root (rank in the group)")
      ->capture_default_str();
  app.add_option("--tp", tensor, "tensor-parallel size T")->capture_default_str();
  app.add_option("--ep", expert, "expert-parallel size Ep")->capture_default_str();
  app.add_option("--dp", data, "data-parallel size D (0: ranks / (T * Ep))")->capture_default_str();
  app.add_option("--comm", comm_name, "mpi or nccl: what carries the buffers (nccl: GPU memory)")
      ->capture_default_str();
  // The old spelling: refused with a pointer to --comm (other programs' --backend is cpu|cuda,
  // which here is --device).
  std::string old_backend;
  app.add_option("--backend", old_backend)->group("");
  app.add_option("--device", device_name,
                 "cpu or cuda: where the buffers live (default: cuda for nccl, else cpu; mpi on "
                 "cuda stages GPU memory through host buffers)");
  app.add_flag("--compare-mpi", options.compare_mpi,
               "also time plain MPI calls in the same run (mpi backend)");
  app.add_option(
      "--csv", csv_path,
      "CSV path (default results/local/collbench/<op>_<group>_<comm>_G<ranks>.csv, comm = mpi, "
      "mpi-staged or nccl)");

  ted::CheckMode check;
  ted::add_check_options(app, check);

  return ted::run_app(
      argc, argv, app,
      [&](ted::MpiSession& mpi) {
        // Everything that can be wrong with the input is checked here, identically on every rank.
        if (app.count("--backend"))
          throw ted::ConfigError("--backend " + old_backend +
                                 ": renamed; use --comm mpi|nccl (what carries the buffers; "
                                 "--device cpu|cuda says where they live)");
        options.op = ted::parse_collective(op_name);
        options.group = ted::parse_group(group_name);
        options.dtype = ted::parse_dtype(dtype_name);
        options.min_bytes = ted::parse_bytes(min_text, "-b/--minbytes");
        options.max_bytes = ted::parse_bytes(max_text, "-e/--maxbytes");
        ted::CommBackend backend = ted::parse_comm_backend(comm_name);
        if (options.compare_mpi && backend != ted::CommBackend::mpi)
          throw ted::ConfigError("--compare-mpi needs --comm mpi");
        const int ranks = check.enabled ? check.ranks_for(mpi.world_size()) : mpi.world_size();
        ted::Layout layout = ted::resolve_layout(ranks, tensor, expert, data);
        ted::ProcessGrid grid(ranks, layout);
        ted::bench::validate(options, grid.group_size(options.group));
        if (device_name.empty()) device_name = backend == ted::CommBackend::nccl ? "cuda" : "cpu";
        const ted::DeviceKind device_kind = ted::parse_device_kind(device_name);
        const bool on_host = device_kind == ted::DeviceKind::cpu;
        const std::uint64_t need =
            ted::bench::peak_bytes(options, grid.group_size(options.group), on_host);
        if (check.enabled) {
          const std::string needs =
              ted::check_needs(device_kind, backend, ranks, "--comm/--device");
          if (mpi.world_rank() == 0)
            std::printf(
                "ted_collbench: check passed: %s on the %s group, %d ranks as %s, up to %s "
                "per rank\n%s",
                std::string(ted::to_string(options.op)).c_str(),
                std::string(ted::to_string(options.group)).c_str(), ranks,
                layout.to_string().c_str(), ted::format_bytes(need).c_str(), needs.c_str());
          return 0;
        }
        ted::require_backend(device_kind, backend, MPI_COMM_WORLD);
        // The largest size's buffers of all ranks on a device must fit it, before any is
        // allocated (RunSpec::need); no trainer, no tracking allocator.
        ted::RunSpec spec;
        spec.device = device_kind;
        spec.comm = backend;
        spec.need = need;
        spec.track = false;
        spec.refuse = [&](const std::string& text) {
          return "-e/--maxbytes " + max_text + ": " + text +
                 " (lower -e, or use fewer ranks per node)";
        };
        ted::RunWiring run(spec, layout);
        ted::Device& device = run.device();
        ted::Communicator& world = run.world();
        if (options.compare_mpi && world.name() != "mpi")
          throw ted::ConfigError("--compare-mpi needs host memory (--comm mpi --device cpu)");
        const std::string carrier = world.name();  // mpi, mpi-staged or nccl
        if (csv_path.empty())
          csv_path = "results/local/collbench/" + std::string(ted::to_string(options.op)) + "_" +
                     std::string(ted::to_string(options.group)) + "_" + carrier + "_G" +
                     std::to_string(mpi.world_size()) + ".csv";
        if (std::filesystem::is_directory(csv_path))
          throw ted::ConfigError("--csv '" + csv_path + "' is a directory, not a file");
        ted::Communicator& group = run.groups().group(options.group);
        group.set_ledger(&run.ledger());  // also for the world, which the run leaves alone

        if (mpi.world_rank() == 0) {
          std::printf("# ted_collbench %s: %s on the %s group (size %d), %d ranks %s\n",
                      std::string(ted::git_revision()).c_str(),
                      std::string(ted::to_string(options.op)).c_str(),
                      std::string(ted::to_string(options.group)).c_str(), group.size(),
                      mpi.world_size(), layout.to_string().c_str());
          std::printf(
              "# backend %s (%s), dtype %s, warm-up %d, timed %d; time = slowest rank, "
              "median (p10 p90) in us; bandwidth GB/s\n",
              carrier.c_str(), device.name().c_str(),
              std::string(ted::to_string(options.dtype)).c_str(), options.warmup_iters,
              options.iters);
          std::printf("#%11s %12s %10s %10s %10s %8s %8s %8s", "size", "count", "time", "p10",
                      "p90", "algbw", "busbw", "#wrong");
          if (options.compare_mpi) std::printf(" %10s %8s %6s", "mpi_time", "mpi_bus", "ratio");
          std::printf("\n");
        }
        auto rows = ted::bench::run_collective_bench(options, run.control(), group, device,
                                                     &print_row, &options.compare_mpi);

        std::uint64_t wrong = 0;
        double ratio_sum = 0;
        for (const auto& row : rows) {
          wrong += row.wrong;
          if (row.reference_busbw_gbs > 0) ratio_sum += row.busbw_gbs / row.reference_busbw_gbs;
        }
        if (mpi.world_rank() == 0) {
          ted::CsvTable table = ted::bench::collective_bench_table();
          ted::bench::CollectiveBenchContext context{carrier, mpi.world_size(), layout,
                                                     group.size(), ted::command_line(argc, argv)};
          for (const auto& row : rows) ted::bench::add_row(table, options, context, row);
          table.write_atomic(csv_path);
          if (options.compare_mpi && !rows.empty() && options.iters > 0)
            std::printf("# mean busbw ratio vs plain MPI: %.3f\n", ratio_sum / rows.size());
          std::printf("# %s: %llu wrong elements\n# CSV: %s\n", wrong ? "Failed" : "Passed",
                      static_cast<unsigned long long>(wrong), csv_path.c_str());
        }
        return wrong ? 1 : 0;
      },
      &check);
}
