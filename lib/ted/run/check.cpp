#include "ted/run/check.hpp"

#include <cstdio>

#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/core/system.hpp"
#include "ted/core/units.hpp"

namespace ted {

CheckedFit check_fit(const train::RunConfig& run, int ranks, std::uint64_t need) {
  CheckedFit checked;
  if (!run.cluster.empty()) {
    const auto cluster = projection::Cluster::load(run.cluster);
    checked.fit = projection::cluster_fit(need, cluster);
    checked.against = "cluster " + cluster.name + " (" +
                      format_bytes(static_cast<std::size_t>(cluster.memory_bytes)) + " per " +
                      cluster.device + ")";
  } else if (run.backend == DeviceKind::cpu) {  // every rank on this host
    const std::uint64_t available = host_available_bytes();
    const std::uint64_t total = need * static_cast<std::uint64_t>(ranks);
    checked.fit.fits = total <= available;
    if (!checked.fit.fits)
      checked.fit.text = "the projected peak of " + format_bytes(need) + " per rank x " +
                         std::to_string(ranks) + " ranks = " + format_bytes(total) +
                         ", but this host has " + format_bytes(available) + " available";
    checked.against = "this host (" + format_bytes(available) + " available)";
  } else {
    checked.judged = false;
    checked.against = "nothing: no run.cluster names the GPUs";
  }
  return checked;
}

std::string check_needs(DeviceKind backend, CommBackend comm, int ranks, const std::string& where) {
  try {
    require_built(backend, comm);
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": " + e.what());
  }
  return "needs: backend=" + std::string(to_string(backend)) +
         " comm=" + std::string(to_string(comm)) + " ranks=" + std::to_string(ranks) + "\n";
}

int report_check(const std::string& program, const std::string& where, const train::RunConfig& run,
                 int ranks, const Layout& layout, std::uint64_t need, bool print) {
  const std::string needs = check_needs(run.backend, run.comm, ranks, where);
  const CheckedFit checked = check_fit(run, ranks, need);
  if (!checked.fit.fits) throw ConfigError(where + ": does not fit: " + checked.fit.text);
  if (print)
    std::printf(
        "%s: check passed: %s on %d ranks as %s; projected peak %s per rank, judged "
        "against %s\n",
        program.c_str(), where.c_str(), ranks, layout.to_string().c_str(),
        format_bytes(need).c_str(), checked.against.c_str());
  if (print) std::fputs(needs.c_str(), stdout);
  return 0;
}

}  // namespace ted
