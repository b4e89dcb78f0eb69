// What else used the machine while a point was timed, and when a run is called disturbed.
//
// The experiments time several systems on one machine and compare them; a process that takes
// CPU time meanwhile (a build, a browser, the hypervisor) slows whichever systems it overlaps,
// which on two cores can reverse their order. Each node's kernel counts every core's time
// (/proc/stat); our ranks count their own (getrusage); what the cores spent on neither idling
// nor our ranks was taken by others. A run is disturbed when others took more than
// kOthersPercent of the cores our ranks may use in any round, the hypervisor more than
// kStealPercent, or when the rounds of one system disagree by more than kSpreadPercent.
#pragma once

#include <mpi.h>

#include <vector>

#include "ted/comm/mpi_communicator.hpp"

namespace ted::experiments {

// Of the time of the cores our ranks may use (the union of their affinity masks, per node):
// the share that went to other processes and to the hypervisor, in percent; the largest over
// the nodes. known: false where /proc/stat could not be read (not Linux): both 0 then.
struct MachineShare {
  double others_percent = 0;
  double steal_percent = 0;
  bool known = false;
};

// A quiet 2-core machine gives others 0.5-3 % (system daemons, mpirun itself) and no steal;
// one busy process on one of two cores takes 20-50 % of them, depending on how many of our
// ranks compete with it. 10 % lies between.
constexpr double kOthersPercent = 10;
constexpr double kStealPercent = 10;
// One system's round medians, (largest - smallest) / median: five quiet main jobs (5 rounds of 3
// timed iterations, 2-core AMD EPYC Zen 4) spread up to 11-24 %, one slow round being enough;
// a limit above that (docs/experiments.md, "Rounds, waiting, and a disturbed machine").
constexpr double kSpreadPercent = 35;

// Counts what used the cores between start() and stop(). Both collective over `world`.
class MachineWatch {
 public:
  explicit MachineWatch(MpiCommunicator& world);
  ~MachineWatch();
  MachineWatch(const MachineWatch&) = delete;
  MachineWatch& operator=(const MachineWatch&) = delete;
  void start();
  MachineShare stop();

 private:
  MpiCommunicator& world_;
  MPI_Comm node_ = MPI_COMM_NULL;
  int node_rank_ = 0;
  std::vector<int> cpus_;   // the node's cores our ranks may use (node leader only)
  double own_seconds_ = 0;  // this process's CPU time at start()
  double busy_ = 0, steal_ = 0, total_ = 0;  // the node's cores at start(), in clock ticks
  bool known_ = false;
};

// (largest - smallest) / median of `values`, in percent; 0 for fewer than two.
double spread_percent(std::vector<double> values);

}  // namespace ted::experiments
