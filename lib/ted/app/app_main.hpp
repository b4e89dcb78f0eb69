// What every executable in apps/ does around its work: start MPI, parse the command line with
// CLI11, and turn errors into the suite's exit codes.
//   bad input (CLI11 parse error, ted::ConfigError) -> one line on rank 0, exit 2 on every rank
//   --help                                          -> help on rank 0, exit 0
//   any other failure                               -> message on the failing rank, MPI_Abort(1)
// Bad input must be detected identically on every rank (before any collective), so all ranks
// leave with 2 and none hangs.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "ted/comm/mpi_communicator.hpp"

namespace ted {

// The command line as one string (for CSV rows).
std::string command_line(int argc, char** argv);

// Starts MPI, parses the command line into the options declared on `app`, runs `body` and
// returns the process exit code.
int run_app(int argc, char** argv, CLI::App& app, const std::function<int(MpiSession&)>& body);

}  // namespace ted
