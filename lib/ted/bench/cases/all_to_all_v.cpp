// The all-to-all-v plug-in of the collective benchmark (collective_plugin.hpp): the all-to-all
// with blocks of different lengths, ragged_count's split (collective_cases.hpp), so a rank
// still sends and receives group_size * chunk elements in all. `bytes` is one rank's send
// buffer.
#include <vector>

#include "ted/bench/collective_plugin.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::bench {
namespace {

// Offset of the block that `source` sends to `destination` inside source's send buffer.
std::size_t ragged_offset(int source, int destination, int group_size, std::size_t unit) {
  std::size_t offset = 0;
  for (int p = 0; p < destination; ++p) offset += ragged_count(source, p, group_size, unit);
  return offset;
}

void size_ragged_buffers(CollectiveCase& c) {
  for (int p = 0; p < c.group_size; ++p) {
    c.send_counts.push_back(ragged_count(c.group_rank, p, c.group_size, c.chunk));
    c.recv_counts.push_back(ragged_count(p, c.group_rank, c.group_size, c.chunk));
  }
  c.send_elements = c.recv_elements = c.elements;  // the ragged blocks add up to n * chunk
}

double expected_ragged(const CollectiveCase& c, std::size_t index) {
  std::size_t offset = index;
  int source = 0;
  while (offset >= c.recv_counts[static_cast<std::size_t>(source)])
    offset -= c.recv_counts[static_cast<std::size_t>(source++)];
  std::size_t start = ragged_offset(source, c.group_rank, c.group_size, c.chunk);
  return pattern(source, start + offset, c.pattern_halfwidth, c.dtype);
}

// Walks the blocks instead of searching each index's block as expected_ragged does.
std::uint64_t count_wrong_by_blocks(const CollectiveCase& c, const void* host_recv) {
  std::uint64_t wrong = 0;
  std::size_t index = 0;
  for (int source = 0; source < c.group_size; ++source) {
    std::size_t start = ragged_offset(source, c.group_rank, c.group_size, c.chunk);
    for (std::size_t k = 0; k < c.recv_counts[static_cast<std::size_t>(source)]; ++k, ++index)
      if (load_as_double(host_recv, c.dtype, index) !=
          pattern(source, start + k, c.pattern_halfwidth, c.dtype))
        ++wrong;
  }
  return wrong;
}

void run_mpi_alltoallv(const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
  std::vector<int> sc, sd, rc, rd;
  int s = 0, r = 0;
  for (std::size_t p = 0; p < c.send_counts.size(); ++p) {
    sc.push_back(static_cast<int>(c.send_counts[p]));
    rc.push_back(static_cast<int>(c.recv_counts[p]));
    sd.push_back(s);
    rd.push_back(r);
    s += sc.back();
    r += rc.back();
  }
  MPI_Datatype type = mpi_datatype(c.dtype);
  MPI_Alltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm);
}

}  // namespace

std::size_t ragged_count(int source, int destination, int group_size, std::size_t unit) {
  int distance = ((destination - source) % group_size + group_size) % group_size;
  int pairs = group_size / 2;
  std::size_t half = unit / 2;
  if (distance < pairs) return unit - half;
  if (distance >= group_size - pairs) return unit + half;
  return unit;
}

extern const CollectivePlugin all_to_all_v_plugin{
    .op = CollectiveOp::all_to_all_v,
    .moves_data = true,
    .splits = true,
    .reduces = false,
    .has_root = false,
    .in_place = false,
    .check = "--group world -d int32",
    .size_buffers = size_ragged_buffers,
    .send_value = own_pattern,
    .expected = expected_ragged,
    .count_wrong = count_wrong_by_blocks,
    .run = [](const CollectiveCase& c, Communicator& comm, const void* send,
              void* recv) { comm.all_to_all_v(send, c.send_counts, recv, c.recv_counts, c.dtype); },
    .run_raw_mpi = run_mpi_alltoallv,
    .bus_factor = [](int n) { return (n - 1.0) / n; },
};

}  // namespace ted::bench
