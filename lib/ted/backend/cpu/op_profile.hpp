// Where a CPU step's time goes, per op of the kernel table: with TED_PROFILE_OPS=1 in the
// environment every CpuOps call adds its wall time to its op's total (TED_PROFILE_OPS=cpu: the
// process's CPU time, all threads, which a busy machine disturbs less), and the totals
// (seconds, calls, share) print to stderr when the program exits. Otherwise a timer is one test
// of a flag. Calls come from the thread that runs the model, so the totals need no lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <string>
#include <vector>

namespace ted::cpu {

class OpProfile {
 public:
  static OpProfile& instance() {
    static OpProfile profile;
    return profile;
  }
  bool enabled() const { return enabled_; }
  double now() const {
    if (!cpu_time_)
      return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
          .count();
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  void add(const char* op, double seconds) {
    auto& entry = totals_[op];
    entry.first += seconds;
    entry.second += 1;
  }
  ~OpProfile() {
    if (!enabled_ || totals_.empty()) return;
    std::vector<std::pair<std::string, std::pair<double, long>>> rows(totals_.begin(),
                                                                      totals_.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double total = 0;
    for (const auto& row : rows) total += row.second.first;
    std::fprintf(stderr, "# CPU ops by %s time (TED_PROFILE_OPS): op, seconds, calls, share\n",
                 cpu_time_ ? "CPU" : "wall");
    for (const auto& [op, entry] : rows)
      std::fprintf(stderr, "%-24s %10.4f %8ld %6.1f%%\n", op.c_str(), entry.first, entry.second,
                   100.0 * entry.first / total);
    std::fprintf(stderr, "%-24s %10.4f\n", "total", total);
  }

 private:
  OpProfile() {
    const char* flag = std::getenv("TED_PROFILE_OPS");
    enabled_ = flag && *flag && std::string(flag) != "0";
    cpu_time_ = enabled_ && std::string(flag) == "cpu";
  }
  bool enabled_ = false, cpu_time_ = false;
  std::map<std::string, std::pair<double, long>> totals_;
};

// Adds the scope's wall time to `op` when profiling is on.
class OpTimer {
 public:
  explicit OpTimer(const char* op) : op_(OpProfile::instance().enabled() ? op : nullptr) {
    if (op_) start_ = OpProfile::instance().now();
  }
  ~OpTimer() {
    if (op_) OpProfile::instance().add(op_, OpProfile::instance().now() - start_);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_;
  double start_ = 0;
};

}  // namespace ted::cpu

#define TED_OP_TIMER(name) ::ted::cpu::OpTimer ted_op_timer_(name)
