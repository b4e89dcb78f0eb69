// The shared part of the benchmark's cases: size rounding, the data pattern, sentinels, the
// element-by-element check, and the table of plug-ins (cases/*.cpp, one per collective) that
// every function here dispatches through.
#include "ted/bench/collective_cases.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "ted/bench/collective_plugin.hpp"
#include "ted/core/error.hpp"
#include "ted/core/random.hpp"

namespace ted::bench {

// The plug-ins, in CollectiveOp's order; a new collective adds its line here.
extern const CollectivePlugin all_reduce_plugin, all_gather_plugin, reduce_scatter_plugin,
    all_to_all_plugin, all_to_all_v_plugin, broadcast_plugin, barrier_plugin;
namespace {
constexpr std::array<const CollectivePlugin*, kCollectiveOpCount> kPlugins = {
    &all_reduce_plugin,   &all_gather_plugin, &reduce_scatter_plugin, &all_to_all_plugin,
    &all_to_all_v_plugin, &broadcast_plugin,  &barrier_plugin};

// Largest integer magnitude the type holds exactly (and, for uint8, stays below the sentinel).
double exact_limit(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return 16777216.0;  // 2^24
    case DataType::f64:
      return 9007199254740992.0;
    case DataType::f16:
      return 2048.0;
    case DataType::bf16:
      return 256.0;
    case DataType::i32:
      return 2147483647.0;
    case DataType::i64:
      return 9.2e18;
    case DataType::u8:
      return 254.0;
  }
  return 1.0;
}

// Reductions add n values, so the pattern shrinks with the group to keep every sum exact.
int halfwidth_for(const CollectivePlugin& plugin, DataType dtype, int group_size) {
  double limit = exact_limit(dtype);
  double terms = plugin.reduces ? group_size : 1;
  return static_cast<int>(std::clamp(limit / terms, 1.0, 125.0));
}

}  // namespace

std::string benchmarked_collectives() {
  std::string names;
  for (const CollectivePlugin* plugin : kPlugins)
    if (plugin->moves_data)
      names += (names.empty() ? "" : ", ") + std::string(to_string(plugin->op));
  return names;
}

const CollectivePlugin& collective_plugin(CollectiveOp op) {
  const CollectivePlugin* plugin = kPlugins.at(static_cast<std::size_t>(op));
  TED_CHECK(plugin->op == op, "kPlugins is out of CollectiveOp's order");
  return *plugin;
}

double own_pattern(const CollectiveCase& c, std::size_t index) {
  return pattern(c.group_rank, index, c.pattern_halfwidth, c.dtype);
}

double sum_over_ranks(const CollectiveCase& c, std::size_t index) {
  double sum = 0;
  for (int r = 0; r < c.group_size; ++r) sum += pattern(r, index, c.pattern_halfwidth, c.dtype);
  return sum;
}

CollectiveCase plan_case(CollectiveOp op, DataType dtype, std::size_t bytes, int group_size,
                         int group_rank, int root) {
  TED_CHECK(group_size >= 1 && group_rank >= 0 && group_rank < group_size, "bad group");
  const CollectivePlugin& plugin = collective_plugin(op);
  CollectiveCase c{};
  c.op = op;
  c.dtype = dtype;
  c.group_size = group_size;
  c.group_rank = group_rank;
  c.root = root;
  std::size_t width = dtype_size(dtype);
  std::size_t granule = plugin.splits ? static_cast<std::size_t>(group_size) : 1;
  c.elements = bytes / width / granule * granule;
  c.bytes = c.elements * width;
  c.chunk = c.elements / granule;
  plugin.size_buffers(c);
  c.pattern_halfwidth = halfwidth_for(plugin, dtype, group_size);
  return c;
}

double pattern(int rank, std::size_t index, int halfwidth, DataType dtype) {
  std::uint64_t h = random::mix64((static_cast<std::uint64_t>(rank) << 40) ^ index);
  auto span = static_cast<std::uint64_t>(dtype == DataType::u8 ? halfwidth + 1 : 2 * halfwidth + 1);
  double value = static_cast<double>(h % span);
  return dtype == DataType::u8 ? value : value - halfwidth;
}

double sentinel(DataType dtype) {
  switch (dtype) {
    case DataType::i32:
    case DataType::i64:
      return -1073741824.0;
    case DataType::u8:
      return 255.0;
    default:
      return 0.5;  // the pattern and its sums are integers
  }
}

double expected_value(const CollectiveCase& c, std::size_t index) {
  return collective_plugin(c.op).expected(c, index);
}

void fill_send(const CollectiveCase& c, void* host_send) {
  const CollectivePlugin& plugin = collective_plugin(c.op);
  for (std::size_t i = 0; i < c.send_elements; ++i)
    store_from_double(host_send, c.dtype, i, plugin.send_value(c, i));
}

std::uint64_t count_wrong(const CollectiveCase& c, const void* host_result) {
  const CollectivePlugin& plugin = collective_plugin(c.op);
  if (plugin.count_wrong) return plugin.count_wrong(c, host_result);
  std::size_t length = plugin.in_place ? c.send_elements : c.recv_elements;
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < length; ++i)
    if (load_as_double(host_result, c.dtype, i) != plugin.expected(c, i)) ++wrong;
  return wrong;
}

void run_case(const CollectiveCase& c, Communicator& comm, const void* send, void* recv) {
  collective_plugin(c.op).run(c, comm, send, recv);
}

void run_case_raw_mpi(const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
  collective_plugin(c.op).run_raw_mpi(c, comm, send, recv);
}

double bus_factor(CollectiveOp op, int group_size) {
  return collective_plugin(op).bus_factor(group_size);
}

}  // namespace ted::bench
