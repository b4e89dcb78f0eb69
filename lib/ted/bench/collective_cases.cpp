#include "ted/bench/collective_cases.hpp"

#include <algorithm>
#include <string>

#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"

namespace ted::bench {
namespace {

bool reduces(CollectiveOp op) {
  return op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
}

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
int halfwidth_for(CollectiveOp op, DataType dtype, int group_size) {
  double limit = exact_limit(dtype);
  double terms = reduces(op) ? group_size : 1;
  return static_cast<int>(std::clamp(limit / terms, 1.0, 125.0));
}

std::uint64_t mix(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Offset of the block that `source` sends to `destination` inside source's send buffer.
std::size_t ragged_offset(int source, int destination, int group_size, std::size_t unit) {
  std::size_t offset = 0;
  for (int p = 0; p < destination; ++p) offset += ragged_count(source, p, group_size, unit);
  return offset;
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

CollectiveCase plan_case(CollectiveOp op, DataType dtype, std::size_t bytes, int group_size,
                         int group_rank, int root) {
  TED_CHECK(group_size >= 1 && group_rank >= 0 && group_rank < group_size, "bad group");
  CollectiveCase c{};
  c.op = op;
  c.dtype = dtype;
  c.group_size = group_size;
  c.group_rank = group_rank;
  c.root = root;
  auto n = static_cast<std::size_t>(group_size);
  std::size_t width = dtype_size(dtype);
  bool splits = op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter ||
                op == CollectiveOp::all_to_all || op == CollectiveOp::all_to_all_v;
  std::size_t granule = splits ? n : 1;
  c.elements = bytes / width / granule * granule;
  c.bytes = c.elements * width;
  c.chunk = c.elements / granule;
  switch (op) {
    case CollectiveOp::all_reduce:
      c.send_elements = c.recv_elements = c.elements;
      break;
    case CollectiveOp::all_gather:
      c.send_elements = c.chunk;
      c.recv_elements = c.elements;
      break;
    case CollectiveOp::reduce_scatter:
      c.send_elements = c.elements;
      c.recv_elements = c.chunk;
      break;
    case CollectiveOp::all_to_all:
      c.send_elements = c.recv_elements = c.elements;
      break;
    case CollectiveOp::all_to_all_v:
      for (int p = 0; p < group_size; ++p) {
        c.send_counts.push_back(ragged_count(group_rank, p, group_size, c.chunk));
        c.recv_counts.push_back(ragged_count(p, group_rank, group_size, c.chunk));
      }
      c.send_elements = c.recv_elements = c.elements;  // the ragged blocks add up to n * chunk
      break;
    case CollectiveOp::broadcast:
      c.send_elements = c.elements;
      c.recv_elements = 0;
      break;
    case CollectiveOp::barrier:
      c.send_elements = c.recv_elements = 0;
      break;
  }
  c.pattern_halfwidth = halfwidth_for(op, dtype, group_size);
  return c;
}

double pattern(int rank, std::size_t index, int halfwidth, DataType dtype) {
  std::uint64_t h = mix((static_cast<std::uint64_t>(rank) << 40) ^ index);
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
  int h = c.pattern_halfwidth;
  auto sum_over_ranks = [&](std::size_t i) {
    double sum = 0;
    for (int r = 0; r < c.group_size; ++r) sum += pattern(r, i, h, c.dtype);
    return sum;
  };
  switch (c.op) {
    case CollectiveOp::all_reduce:
      return sum_over_ranks(index);
    case CollectiveOp::all_gather:
      return pattern(static_cast<int>(index / c.chunk), index % c.chunk, h, c.dtype);
    case CollectiveOp::reduce_scatter:
      return sum_over_ranks(static_cast<std::size_t>(c.group_rank) * c.chunk + index);
    case CollectiveOp::all_to_all: {
      auto source = static_cast<int>(index / c.chunk);
      return pattern(source, static_cast<std::size_t>(c.group_rank) * c.chunk + index % c.chunk, h,
                     c.dtype);
    }
    case CollectiveOp::all_to_all_v: {
      std::size_t offset = index;
      int source = 0;
      while (offset >= c.recv_counts[static_cast<std::size_t>(source)])
        offset -= c.recv_counts[static_cast<std::size_t>(source++)];
      std::size_t start = ragged_offset(source, c.group_rank, c.group_size, c.chunk);
      return pattern(source, start + offset, h, c.dtype);
    }
    case CollectiveOp::broadcast:
      return pattern(c.root, index, h, c.dtype);
    case CollectiveOp::barrier:
      break;
  }
  return 0;
}

void fill_send(const CollectiveCase& c, void* host_send) {
  bool broadcast_receiver = c.op == CollectiveOp::broadcast && c.group_rank != c.root;
  for (std::size_t i = 0; i < c.send_elements; ++i) {
    double value = broadcast_receiver ? sentinel(c.dtype)
                                      : pattern(c.group_rank, i, c.pattern_halfwidth, c.dtype);
    store_from_double(host_send, c.dtype, i, value);
  }
}

std::uint64_t count_wrong(const CollectiveCase& c, const void* host_recv) {
  std::size_t length = c.op == CollectiveOp::broadcast ? c.send_elements : c.recv_elements;
  std::uint64_t wrong = 0;
  if (c.op == CollectiveOp::all_to_all_v) {  // walk the blocks instead of searching each index
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
  for (std::size_t i = 0; i < length; ++i)
    if (load_as_double(host_recv, c.dtype, i) != expected_value(c, i)) ++wrong;
  return wrong;
}

void run_case(const CollectiveCase& c, Communicator& comm, const void* send, void* recv) {
  switch (c.op) {
    case CollectiveOp::all_reduce:
      comm.all_reduce(send, recv, c.elements, c.dtype);
      return;
    case CollectiveOp::all_gather:
      comm.all_gather(send, recv, c.chunk, c.dtype);
      return;
    case CollectiveOp::reduce_scatter:
      comm.reduce_scatter(send, recv, c.chunk, c.dtype);
      return;
    case CollectiveOp::all_to_all:
      comm.all_to_all(send, recv, c.chunk, c.dtype);
      return;
    case CollectiveOp::all_to_all_v:
      comm.all_to_all_v(send, c.send_counts, recv, c.recv_counts, c.dtype);
      return;
    case CollectiveOp::broadcast:
      comm.broadcast(const_cast<void*>(send), c.elements, c.dtype, c.root);
      return;
    case CollectiveOp::barrier:
      comm.barrier();
      return;
  }
}

void run_case_raw_mpi(const CollectiveCase& c, MPI_Comm comm, const void* send, void* recv) {
  MPI_Datatype type = mpi_datatype(c.dtype);
  int chunk = static_cast<int>(c.chunk);
  switch (c.op) {
    case CollectiveOp::all_reduce:
      MPI_Allreduce(send, recv, static_cast<int>(c.elements), type,
                    mpi_reduce_op(ReduceOp::sum, c.dtype), comm);
      return;
    case CollectiveOp::all_gather:
      MPI_Allgather(send, chunk, type, recv, chunk, type, comm);
      return;
    case CollectiveOp::reduce_scatter:
      MPI_Reduce_scatter_block(send, recv, chunk, type, mpi_reduce_op(ReduceOp::sum, c.dtype),
                               comm);
      return;
    case CollectiveOp::all_to_all:
      MPI_Alltoall(send, chunk, type, recv, chunk, type, comm);
      return;
    case CollectiveOp::all_to_all_v: {
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
      MPI_Alltoallv(send, sc.data(), sd.data(), type, recv, rc.data(), rd.data(), type, comm);
      return;
    }
    case CollectiveOp::broadcast:
      MPI_Bcast(const_cast<void*>(send), static_cast<int>(c.elements), type, c.root, comm);
      return;
    case CollectiveOp::barrier:
      MPI_Barrier(comm);
      return;
  }
}

double bus_factor(CollectiveOp op, int group_size) {
  double n = group_size;
  switch (op) {
    case CollectiveOp::all_reduce:
      return 2.0 * (n - 1) / n;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all:
    case CollectiveOp::all_to_all_v:
      return (n - 1) / n;
    case CollectiveOp::broadcast:
      return 1.0;
    case CollectiveOp::barrier:
      return 0.0;
  }
  return 0.0;
}

}  // namespace ted::bench
