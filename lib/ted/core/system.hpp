// What this machine and this launch give a rank: the CPUs its affinity mask allows, the host
// memory still available, and the Slurm task count and job it was launched for.
#pragma once

#include <cstdint>
#include <string>

namespace ted {

// CPUs in this process's affinity mask (what Slurm's --cpu-bind or mpirun's binding left it);
// the hardware threads when the mask cannot be read.
int affinity_cpus();

// Host memory the kernel could hand out now without swapping (MemAvailable), in bytes.
std::uint64_t host_available_bytes();

// SLURM_NTASKS when set and a positive integer, else 0.
int slurm_tasks();

// The Slurm job a CSV row came from: "<job id>", or "<array job id>_<array task id>" in an
// array job (as squeue and sacct write it); "" outside Slurm.
std::string slurm_job();

}  // namespace ted
