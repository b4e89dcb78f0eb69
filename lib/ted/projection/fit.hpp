// Does a run fit in memory? Asked before anything is allocated or measured, from the memory
// model (projection/memory.hpp): against this machine's free memory when a program starts, and
// against the cluster a YAML names (run.cluster) in --check mode on a login node. The memory
// model's total is the persistent state plus the larger of its two phases (training, the
// optimizer step), tested at 0.95-1.2x the allocator's true peak.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "ted/grid/process_grid.hpp"
#include "ted/projection/cluster.hpp"
#include "ted/projection/step.hpp"
#include "ted/train/train_config.hpp"

namespace ted::projection {

// The projected peak bytes of one rank (the memory model's total).
std::uint64_t projected_peak(const train::TrainConfig& train, const Layout& layout);

struct MemoryFit {
  bool fits = true;
  std::string text;  // "needs X per rank x N ranks sharing D = Y, Z free" (empty when it fits)
};

// Collective over `comm`: every rank gives its projected need (0: takes no part), the name of
// the device it runs on and that device's free bytes; ranks of one node on the same device
// share its memory. Returns the same answer on every rank (the worst device's numbers).
MemoryFit agree_memory_fit(std::uint64_t need, const std::string& device, std::uint64_t free_bytes,
                           MPI_Comm comm);

// One rank's need against the memory of one device of `cluster` (one rank per device).
MemoryFit cluster_fit(std::uint64_t need, const Cluster& cluster);

}  // namespace ted::projection
