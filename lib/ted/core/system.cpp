#include "ted/core/system.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace ted {

int affinity_cpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) return std::max(1, CPU_COUNT(&mask));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::uint64_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * page : 0;
}

int slurm_tasks() {
  const char* text = std::getenv("SLURM_NTASKS");
  if (!text) return 0;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && value > 0 && value < (1L << 30) ? static_cast<int>(value)
                                                                        : 0;
}

std::string slurm_job() {
  const char* array_job = std::getenv("SLURM_ARRAY_JOB_ID");
  const char* array_task = std::getenv("SLURM_ARRAY_TASK_ID");
  if (array_job && *array_job && array_task && *array_task)
    return std::string(array_job) + "_" + array_task;
  const char* job = std::getenv("SLURM_JOB_ID");
  return job ? job : "";
}

}  // namespace ted
