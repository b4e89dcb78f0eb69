#include "ted/app/app_main.hpp"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/core/system.hpp"

namespace ted {

std::string command_line(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) {
    if (i) text += ' ';
    text += argv[i];
  }
  return text;
}

int CheckMode::ranks_for(int world_size) const {
  if (ranks > 0) return ranks;
  if (int tasks = slurm_tasks()) return tasks;
  return world_size;
}

void add_check_options(CLI::App& app, CheckMode& mode) {
  app.add_flag("--check", mode.enabled,
               "only validate: config, layout against the ranks, projected memory fit; run "
               "nothing, write nothing");
  app.add_option("--ranks", mode.ranks,
                 "with --check: the rank count to check the layout against (default "
                 "SLURM_NTASKS, else the launched ranks)")
      ->check(CLI::Range(1, 1 << 24));
}

namespace {

void check_slurm_world(int world_size) {
  const int tasks = slurm_tasks();
  if (tasks > 0 && tasks != world_size)
    throw ConfigError("Slurm gave this job step " + std::to_string(tasks) +
                      " tasks (SLURM_NTASKS) but MPI started a world of " +
                      std::to_string(world_size) +
                      " rank(s): srun's MPI plugin does not match this MPI (try srun --mpi=pmix "
                      "or pmi2), or unset SLURM_NTASKS outside srun");
}

// Ends the run from one rank: returning lets a lone process exit without MPI's abort banner;
// with other ranks alive only MPI_Abort stops them.
int fail(const MpiSession& mpi, int code) {
  std::fflush(stderr);
  if (mpi.world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  return code;
}

}  // namespace

int run_app(int argc, char** argv, CLI::App& app, const std::function<int(MpiSession&)>& body,
            const CheckMode* check) {
  // --check validates as one plain process: no MPI_Init, so it runs on a login node that
  // refuses MPI outside srun (the body sees one rank of one).
  const bool check_only = std::any_of(
      argv + 1, argv + argc, [](const char* arg) { return std::strcmp(arg, "--check") == 0; });
  MpiSession mpi(&argc, &argv, mpi_thread_level(), !check_only);
  const std::string name = app.get_name();
  bool rank0 = mpi.world_rank() == 0;
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      if (rank0) std::fputs(app.help().c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError& e) {
      throw ConfigError(e.what());
    }
    if (!check || !check->enabled) check_slurm_world(mpi.world_size());
    return body(mpi);
  } catch (const ConfigError& e) {
    if (rank0) std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 2;
  } catch (const OutOfMemory& e) {
    std::fprintf(stderr, "%s: error: %s: %s\n", name.c_str(), rank_tag().c_str(), e.what());
    return fail(mpi, 2);
  } catch (const UnusableGpu& e) {
    std::fprintf(stderr, "%s: error: %s: %s\n", name.c_str(), rank_tag().c_str(), e.what());
    return fail(mpi, 2);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "%s: error: %s: out of host memory (a host allocation failed)\n",
                 name.c_str(), rank_tag().c_str());
    return fail(mpi, 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s: %s\n", name.c_str(), rank_tag().c_str(), e.what());
    return fail(mpi, 1);
  }
}

}  // namespace ted
