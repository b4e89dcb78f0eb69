#include "ted/experiments/disturbance.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

#include "ted/core/error.hpp"
#include "ted/core/stats.hpp"

namespace ted::experiments {

namespace {

double own_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The cores' time in clock ticks from /proc/stat's per-core lines ("cpuN user nice system idle
// iowait irq softirq steal ..."; guest time is inside user): busy = user + nice + system + irq
// + softirq, steal, and the total of the eight. False when the file cannot be read.
bool read_cores(const std::vector<int>& cpus, double* busy, double* steal, double* total) {
  std::ifstream stat("/proc/stat");
  if (!stat) return false;
  *busy = *steal = *total = 0;
  std::string line;
  int found = 0;
  while (std::getline(stat, line)) {
    if (line.compare(0, 3, "cpu") != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9')
      continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    double t[8] = {};
    fields >> cpu;
    for (double& x : t) fields >> x;
    if (!fields || std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    *busy += t[0] + t[1] + t[2] + t[5] + t[6];
    *steal += t[7];
    for (double x : t) *total += x;
    ++found;
  }
  return found > 0;
}

}  // namespace

MachineWatch::MachineWatch(MpiCommunicator& world) : world_(world) {
  TED_CHECK_MPI(
      MPI_Comm_split_type(world.native_handle(), MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node_));
  cpus_ = node_cpus(node_);
  TED_CHECK_MPI(MPI_Comm_rank(node_, &node_rank_));
}

MachineWatch::~MachineWatch() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

// The barriers wait as the ranks' collectives do (MpiWait): sleeping, a rank that waits for the
// node leader's read burns no core that the window would book to others.
void MachineWatch::start() {
  world_.barrier();
  known_ = node_rank_ == 0 && read_cores(cpus_, &busy_, &steal_, &total_);
  own_seconds_ = own_cpu_seconds();
}

MachineShare MachineWatch::stop() {
  const double own = own_cpu_seconds() - own_seconds_;
  world_.barrier();  // every rank has read its own time: the cores' counters cover all of it
  double busy = 0, steal = 0, total = 0;
  const bool read = known_ && read_cores(cpus_, &busy, &steal, &total) && total > total_;
  double ours = 0;
  TED_CHECK_MPI(MPI_Reduce(&own, &ours, 1, MPI_DOUBLE, MPI_SUM, 0, node_));
  double mine[3] = {0, 0, 0};  // others %, steal %, known
  if (read) {
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    const double span = total - total_;
    mine[0] = std::max(0.0, (busy - busy_) - ours * ticks) / span * 100;
    mine[1] = (steal - steal_) / span * 100;
    mine[2] = 1;
  }
  double most[3];
  TED_CHECK_MPI(MPI_Allreduce(mine, most, 3, MPI_DOUBLE, MPI_MAX, world_.native_handle()));
  return {most[0], most[1], most[2] > 0};
}

double spread_percent(std::vector<double> values) {
  if (values.size() < 2) return 0;
  const auto [low, high] = std::minmax_element(values.begin(), values.end());
  const double median = percentile(values, 50);
  return median > 0 ? (*high - *low) / median * 100 : 0;
}

}  // namespace ted::experiments
