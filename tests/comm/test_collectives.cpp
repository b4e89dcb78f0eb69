// Every collective of the communication layer, on every group kind of every layout of the
// launched rank count, for every element type, with odd and zero sizes and ragged
// all-to-all-v splits; each result checked element by element and each call's ledger entry
// checked against the byte formula of ledger.hpp. Runs on the backend given by --backend.
#include <catch2/catch.hpp>

#include <cstddef>
#include <numeric>
#include <sstream>
#include <vector>

#include "comm/test_env.hpp"
#include "ted/core/error.hpp"
#include "ted/grid/ted_groups.hpp"

using ted::CollectiveOp;
using ted::DataType;
using ted::GroupKind;

namespace {

const DataType kTypes[] = {DataType::f32, DataType::f64, DataType::f16, DataType::bf16,
                           DataType::i32, DataType::i64, DataType::u8};
const GroupKind kGroups[] = {GroupKind::world, GroupKind::tensor, GroupKind::expert,
                             GroupKind::expert_data, GroupKind::nonexpert_data};
const std::size_t kChunks[] = {0, 1, 7, 33};  // zero-length and odd sizes

// Rank r's element i: a small integer, so sums over 8 ranks are exact in every type
// (bf16 holds integers up to 256 exactly; uint8 sums stay below 256).
double value(int rank, std::size_t i, DataType dtype) {
  int v = static_cast<int>((static_cast<std::size_t>(rank) * 31 + i * 7) % 17);
  return dtype == DataType::u8 ? v : v - 8;
}

// Ragged all-to-all-v: how many elements `source` sends to `destination` (zero included).
std::size_t ragged(int source, int destination, std::size_t salt) {
  return (static_cast<std::size_t>(source) * 3 + static_cast<std::size_t>(destination) * 5 + salt) %
         4;
}

// Host bytes <-> the backend's memory.
struct Buffer {
  Buffer(std::size_t elements, DataType dtype)
      : dtype(dtype),
        host(std::max<std::size_t>(elements, 1) * ted::dtype_size(dtype)),
        device(ted::test::device(), elements * ted::dtype_size(dtype)),
        elements(elements) {}
  void set(std::size_t i, double v) { ted::store_from_double(host.data(), dtype, i, v); }
  double get(std::size_t i) const { return ted::load_as_double(host.data(), dtype, i); }
  void upload() { ted::test::device().copy_from_host(device.data(), host.data(), device.bytes()); }
  void download() { ted::test::device().copy_to_host(host.data(), device.data(), device.bytes()); }
  void* data() { return device.data(); }
  DataType dtype;
  std::vector<std::byte> host;
  ted::DeviceBuffer device;
  std::size_t elements;
};

// Fills with a value no collective here produces, so an element left unwritten is caught.
void poison(Buffer& b) {
  for (std::size_t i = 0; i < b.elements; ++i) b.set(i, b.dtype == DataType::u8 ? 250 : 100);
  b.upload();
}

std::size_t count_wrong(const Buffer& b, const std::vector<double>& expected) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < expected.size(); ++i)
    if (b.get(i) != expected[i]) ++wrong;
  return wrong;
}

void check_entry(const ted::Ledger& ledger, CollectiveOp op, const ted::Communicator& comm,
                 std::uint64_t sent, std::uint64_t received) {
  REQUIRE(!ledger.entries().empty());
  const auto& e = ledger.entries().back();
  CHECK(e.op == op);
  CHECK(e.group == comm.group());
  CHECK(e.group_size == comm.size());
  CHECK(e.bytes_sent == sent);
  CHECK(e.bytes_recv == received);
  CHECK(e.seconds >= 0);
}

// Runs every collective once on `comm` and checks data and ledger. Collective over comm.
void exercise(ted::Communicator& comm, DataType dtype, std::size_t chunk) {
  const int n = comm.size();
  const int me = comm.rank();
  const auto un = static_cast<std::size_t>(n);
  const std::size_t w = ted::dtype_size(dtype);
  ted::Ledger ledger;
  ledger.set_keep_entries(true);
  comm.set_ledger(&ledger);

  {  // all_reduce of `chunk` elements: the sum of every rank's values.
    Buffer send(chunk, dtype), recv(chunk, dtype);
    std::vector<double> expected(chunk, 0.0);
    for (std::size_t i = 0; i < chunk; ++i) {
      send.set(i, value(me, i, dtype));
      for (int r = 0; r < n; ++r) expected[i] += value(r, i, dtype);
    }
    send.upload();
    poison(recv);
    comm.all_reduce(send.data(), recv.data(), chunk, dtype);
    recv.download();
    CHECK(count_wrong(recv, expected) == 0);
    check_entry(ledger, CollectiveOp::all_reduce, comm, chunk * w, chunk * w);

    comm.all_reduce(send.data(), send.data(), chunk, dtype);  // in place
    send.download();
    CHECK(count_wrong(send, expected) == 0);
  }
  {  // all_gather: rank r's chunk lands at r * chunk.
    Buffer send(chunk, dtype), recv(un * chunk, dtype);
    std::vector<double> expected(un * chunk);
    for (std::size_t i = 0; i < chunk; ++i) send.set(i, value(me, i, dtype));
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < chunk; ++i) expected[r * chunk + i] = value(r, i, dtype);
    send.upload();
    poison(recv);
    comm.all_gather(send.data(), recv.data(), chunk, dtype);
    recv.download();
    CHECK(count_wrong(recv, expected) == 0);
    check_entry(ledger, CollectiveOp::all_gather, comm, chunk * w, un * chunk * w);
  }
  {  // reduce_scatter: rank me gets the sum of block me.
    Buffer send(un * chunk, dtype), recv(chunk, dtype);
    std::vector<double> expected(chunk, 0.0);
    for (std::size_t i = 0; i < un * chunk; ++i) send.set(i, value(me, i, dtype));
    for (std::size_t i = 0; i < chunk; ++i)
      for (int r = 0; r < n; ++r)
        expected[i] += value(r, static_cast<std::size_t>(me) * chunk + i, dtype);
    send.upload();
    poison(recv);
    comm.reduce_scatter(send.data(), recv.data(), chunk, dtype);
    recv.download();
    CHECK(count_wrong(recv, expected) == 0);
    check_entry(ledger, CollectiveOp::reduce_scatter, comm, un * chunk * w, chunk * w);
  }
  {  // all_to_all: block p of my send goes to p; block p of my recv came from p.
    Buffer send(un * chunk, dtype), recv(un * chunk, dtype);
    std::vector<double> expected(un * chunk);
    for (std::size_t i = 0; i < un * chunk; ++i) send.set(i, value(me, i, dtype));
    for (int p = 0; p < n; ++p)
      for (std::size_t k = 0; k < chunk; ++k)
        expected[p * chunk + k] = value(p, static_cast<std::size_t>(me) * chunk + k, dtype);
    send.upload();
    poison(recv);
    comm.all_to_all(send.data(), recv.data(), chunk, dtype);
    recv.download();
    CHECK(count_wrong(recv, expected) == 0);
    check_entry(ledger, CollectiveOp::all_to_all, comm, un * chunk * w, un * chunk * w);
  }
  {  // all_to_all_v with ragged blocks (some empty).
    std::vector<std::size_t> send_counts(un), recv_counts(un);
    for (int p = 0; p < n; ++p) {
      send_counts[p] = ragged(me, p, chunk);
      recv_counts[p] = ragged(p, me, chunk);
    }
    std::size_t sent = std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0});
    std::size_t received = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
    Buffer send(sent, dtype), recv(received, dtype);
    for (std::size_t i = 0; i < sent; ++i) send.set(i, value(me, i, dtype));
    std::vector<double> expected;
    for (int p = 0; p < n; ++p) {
      std::size_t offset = 0;  // where p's block for me starts in p's send buffer
      for (int q = 0; q < me; ++q) offset += ragged(p, q, chunk);
      for (std::size_t k = 0; k < recv_counts[p]; ++k)
        expected.push_back(value(p, offset + k, dtype));
    }
    send.upload();
    poison(recv);
    comm.all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, dtype);
    recv.download();
    CHECK(count_wrong(recv, expected) == 0);
    check_entry(ledger, CollectiveOp::all_to_all_v, comm, sent * w, received * w);
  }
  for (int root = 0; root < n; ++root) {  // broadcast from every root
    Buffer buffer(chunk, dtype);
    std::vector<double> expected(chunk);
    for (std::size_t i = 0; i < chunk; ++i) expected[i] = value(root, i, dtype);
    if (me == root) {
      for (std::size_t i = 0; i < chunk; ++i) buffer.set(i, expected[i]);
      buffer.upload();
    } else {
      poison(buffer);
    }
    comm.broadcast(buffer.data(), chunk, dtype, root);
    buffer.download();
    CHECK(count_wrong(buffer, expected) == 0);
    check_entry(ledger, CollectiveOp::broadcast, comm, me == root ? chunk * w : 0,
                me == root ? 0 : chunk * w);
  }
  comm.barrier();
  check_entry(ledger, CollectiveOp::barrier, comm, 0, 0);
  CHECK(ledger.total().calls == 7u + un);  // in-place all_reduce and one broadcast per root
  comm.set_ledger(nullptr);
}

}  // namespace

TEST_CASE("every collective on every group kind of every layout, checked element by element") {
  auto& world = ted::test::world();
  for (const auto& layout : ted::all_layouts(world.size())) {
    ted::ProcessGrid grid(world.size(), layout);
    ted::TedGroups groups(ted::test::control(), world, grid);
    for (GroupKind kind : kGroups) {
      for (DataType dtype : kTypes) {
        for (std::size_t chunk : kChunks) {
          INFO(layout.to_string() << ", " << ted::to_string(kind) << " group, "
                                  << ted::to_string(dtype) << ", chunk " << chunk << ", rank "
                                  << world.rank());
          exercise(groups.group(kind), dtype, chunk);
        }
      }
    }
  }
}

TEST_CASE("max and min reductions") {
  auto& world = ted::test::world();
  for (DataType dtype : kTypes) {
    INFO(ted::to_string(dtype));
    Buffer send(5, dtype), max(5, dtype), min(5, dtype);
    for (std::size_t i = 0; i < 5; ++i) send.set(i, value(world.rank(), i, dtype));
    send.upload();
    world.all_reduce(send.data(), max.data(), 5, dtype, ted::ReduceOp::max);
    world.all_reduce(send.data(), min.data(), 5, dtype, ted::ReduceOp::min);
    max.download();
    min.download();
    for (std::size_t i = 0; i < 5; ++i) {
      double hi = value(0, i, dtype), lo = hi;
      for (int r = 1; r < world.size(); ++r) {
        hi = std::max(hi, value(r, i, dtype));
        lo = std::min(lo, value(r, i, dtype));
      }
      CHECK(max.get(i) == hi);
      CHECK(min.get(i) == lo);
    }
  }
}

TEST_CASE("typed spans pick the element type and check their lengths") {
  auto& world = ted::test::world();
  if (ted::test::device().kind() != ted::DeviceKind::cpu) return;  // spans here are host memory
  const auto n = static_cast<std::size_t>(world.size());
  std::vector<double> mine(3, world.rank() + 1.0), all(3 * n);
  world.all_gather(std::span<const double>(mine), std::span<double>(all));
  for (std::size_t r = 0; r < n; ++r) CHECK(all[3 * r + 2] == r + 1.0);
  std::vector<double> wrong_length(3 * n + 1);
  CHECK_THROWS_AS(world.all_gather(std::span<const double>(mine), std::span<double>(wrong_length)),
                  ted::Error);
}

TEST_CASE("bad arguments throw on every rank before anything is sent") {
  auto& world = ted::test::world();
  const auto n = static_cast<std::size_t>(world.size());
  Buffer a(4 * n, DataType::f32), b(4 * n, DataType::f32);
  std::vector<std::size_t> short_counts(n + 1, 1), counts(n, 1);
  CHECK_THROWS_WITH(world.all_to_all_v(a.data(), short_counts, b.data(), counts, DataType::f32),
                    Catch::Matchers::Contains("send counts"));
  CHECK_THROWS_WITH(world.broadcast(a.data(), 4, DataType::f32, world.size()),
                    Catch::Matchers::Contains("root"));
  CHECK_THROWS_WITH(world.all_to_all(a.data(), a.data(), 4, DataType::f32),
                    Catch::Matchers::Contains("overlap"));
  CHECK_THROWS_WITH(world.all_reduce(nullptr, b.data(), 4, DataType::f32),
                    Catch::Matchers::Contains("null"));
  world.barrier();  // everyone is still in step
}

TEST_CASE("ledger totals add up by operation and group") {
  auto& world = ted::test::world();
  ted::Ledger ledger;
  world.set_ledger(&ledger);
  Buffer a(8, DataType::f64), b(8, DataType::f64);
  for (int i = 0; i < 3; ++i) world.all_reduce(a.data(), b.data(), 8, DataType::f64);
  world.barrier();
  const auto& t = ledger.total(CollectiveOp::all_reduce, GroupKind::world);
  CHECK(t.calls == 3);
  CHECK(t.bytes_sent == 3 * 64);
  CHECK(t.bytes_recv == 3 * 64);
  CHECK(ledger.total(CollectiveOp::barrier).calls == 1);
  CHECK(ledger.total().calls == 4);
  CHECK(ledger.entries().empty());  // entries only when asked for
  ledger.set_enabled(false);
  world.all_reduce(a.data(), b.data(), 8, DataType::f64);
  CHECK(ledger.total().calls == 4);
  ledger.clear();
  CHECK(ledger.total().calls == 0);
  world.set_ledger(nullptr);
}

TEST_CASE("split by any color and key") {
  auto& world = ted::test::world();
  // Even and odd ranks, each ordered from the highest rank down.
  auto half = world.split(world.rank() % 2, -world.rank(), GroupKind::custom);
  int expected_size = (world.size() + (world.rank() % 2 == 0 ? 1 : 0)) / 2;
  CHECK(half->size() == expected_size);
  CHECK(half->group() == GroupKind::custom);
  Buffer mine(1, DataType::i32), all(static_cast<std::size_t>(half->size()), DataType::i32);
  mine.set(0, world.rank());
  mine.upload();
  half->all_gather(mine.data(), all.data(), 1, DataType::i32);
  all.download();
  for (int i = 1; i < half->size(); ++i) CHECK(all.get(i) == all.get(i - 1) - 2);
  CHECK(all.get(static_cast<std::size_t>(half->rank())) == world.rank());
}
