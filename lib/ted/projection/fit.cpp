#include "ted/projection/fit.hpp"

#include <algorithm>
#include <functional>
#include <limits>

#include "ted/core/error.hpp"
#include "ted/core/units.hpp"
#include "ted/projection/memory.hpp"

namespace ted::projection {

std::uint64_t projected_peak(const train::TrainConfig& train, const Layout& layout) {
  return step_memory(shape_of(train, layout)).total;
}

MemoryFit agree_memory_fit(std::uint64_t need, const std::string& device, std::uint64_t free_bytes,
                           MPI_Comm comm) {
  int rank = 0;
  TED_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  MPI_Comm node = MPI_COMM_NULL, sharing = MPI_COMM_NULL;
  TED_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  const int color =
      need > 0 ? static_cast<int>(std::hash<std::string>{}(device)&0x3fffffff) : MPI_UNDEFINED;
  TED_CHECK_MPI(MPI_Comm_split(node, color, rank, &sharing));
  int sharers = 0;
  if (sharing != MPI_COMM_NULL) {
    TED_CHECK_MPI(MPI_Comm_size(sharing, &sharers));
    MPI_Comm_free(&sharing);
  }
  MPI_Comm_free(&node);
  const std::uint64_t total = need * static_cast<std::uint64_t>(std::max(sharers, 1));
  const bool fits = need == 0 || total <= free_bytes;
  // The worst failing device's numbers, so every rank words the same message.
  std::uint64_t worst[3] = {fits ? 0 : total, fits ? 0 : need,
                            static_cast<std::uint64_t>(fits ? 0 : sharers)};
  std::uint64_t least_free = fits ? std::numeric_limits<std::uint64_t>::max() : free_bytes;
  TED_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, worst, 3, MPI_UINT64_T, MPI_MAX, comm));
  TED_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &least_free, 1, MPI_UINT64_T, MPI_MIN, comm));
  MemoryFit fit;
  fit.fits = worst[0] == 0;
  if (!fit.fits)
    fit.text = "the projected peak of " + format_bytes(worst[1]) + " per rank x " +
               std::to_string(worst[2]) +
               " rank(s) sharing one device = " + format_bytes(worst[0]) + ", but only " +
               format_bytes(least_free) + " is free";
  return fit;
}

MemoryFit cluster_fit(std::uint64_t need, const Cluster& cluster) {
  MemoryFit fit;
  fit.fits = static_cast<double>(need) <= cluster.memory_bytes;
  if (!fit.fits)
    fit.text = "the projected peak of " + format_bytes(need) + " per rank exceeds the " +
               format_bytes(static_cast<std::size_t>(cluster.memory_bytes)) + " of one " +
               cluster.device + " of cluster " + cluster.name;
  return fit;
}

}  // namespace ted::projection
