// What every executable in apps/ does around its work: start MPI, parse the command line with
// CLI11, check the launch, and turn errors into the suite's exit codes.
//   bad input (CLI11 parse error, ted::ConfigError) -> one line on rank 0, exit 2 on every rank
//   a failed allocation (ted::OutOfMemory, std::bad_alloc) -> one line naming the bytes, exit 2
//   GPUs the CUDA runtime cannot use (ted::UnusableGpu) -> one line naming the CUDA error, exit 2
//                                                       (MPI_Abort(2) when other ranks run on)
//   --help                                          -> help on rank 0, exit 0
//   any other failure                               -> message on the failing rank, exit 1
//                                                       (MPI_Abort(1) when other ranks run on)
// Bad input must be detected identically on every rank (before any collective), so all ranks
// leave with 2 and none hangs. Under Slurm (SLURM_NTASKS set) the world size must equal the
// task count: a wrong srun MPI plugin otherwise starts N one-rank jobs.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "ted/comm/mpi_communicator.hpp"

namespace ted {

// The command line as one string (for CSV rows).
std::string command_line(int argc, char** argv);

// --check [--ranks N]: validate everything a run would (config, layout against N ranks,
// projected memory) as one plain process, print one line, write nothing; for a login node and
// a job's first step, before any GPU time is spent.
struct CheckMode {
  bool enabled = false;
  int ranks = 0;  // 0: SLURM_NTASKS when set, else the launched world size
  int ranks_for(int world_size) const;
};
void add_check_options(CLI::App& app, CheckMode& mode);

// Starts MPI (not with --check on the command line: then no MPI call at all, one rank of one),
// parses the command line into the options declared on `app`, runs `body` and
// returns the process exit code. With `check` enabled the Slurm task count is not compared
// with the world (the check runs as one process inside a many-task job).
int run_app(int argc, char** argv, CLI::App& app, const std::function<int(MpiSession&)>& body,
            const CheckMode* check = nullptr);

}  // namespace ted
