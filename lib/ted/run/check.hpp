// The verdict of --check (the option app/app_main.hpp declares): does a run's projected peak fit
// where it will run? On the cluster the YAML names (run.cluster) when it names one; else, for the
// CPU backend, this host's available memory shared by all the ranks; a GPU run without run.cluster
// is not judged (said so in the line).
#pragma once

#include <cstdint>
#include <string>

#include "ted/grid/process_grid.hpp"
#include "ted/projection/fit.hpp"
#include "ted/train/train_config.hpp"

namespace ted {

// The fit of `need` bytes per rank for `ranks` ranks of `run`; `judged` false when there is
// nothing to judge by. ConfigError when run.cluster cannot be loaded.
struct CheckedFit {
  projection::MemoryFit fit;
  bool judged = true;
  std::string against;  // "cluster v100 (32 GB per V100)", "this host (20 GiB available)"
};
CheckedFit check_fit(const train::RunConfig& run, int ranks, std::uint64_t need);

// The line --check prints last, which slurm/submit.sh and the sbatch scripts read:
//   needs: backend=<cpu|cuda> comm=<mpi|nccl> ranks=<N>
// after checking that this build has that backend and communicator (registry.hpp
// require_built: the build, not this machine's GPUs; the ConfigError starts with `where`).
std::string check_needs(DeviceKind backend, CommBackend comm, int ranks, const std::string& where);

// --check of one training run: ConfigError "<where>: does not fit: ..." when it does not fit
// or the build lacks its backend; else prints "<program>: check passed: ..." and the needs line
// (when `print`) and returns 0.
int report_check(const std::string& program, const std::string& where, const train::RunConfig& run,
                 int ranks, const Layout& layout, std::uint64_t need, bool print);

}  // namespace ted
