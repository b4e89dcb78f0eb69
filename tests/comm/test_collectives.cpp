// Every collective of the communication layer, on every group kind of every layout of the
// launched rank count, for every element type, with odd and zero sizes and ragged
// all-to-all-v splits; each result checked element by element and each call's ledger entry
// checked against the byte formula of ledger.hpp; the nonblocking all-to-all against the
// blocking one. Runs on the backend given by --backend.
#include "catch.hpp"

#include <chrono>
#include <cstddef>
#include <memory>
#include <numeric>
#include <sstream>
#include <thread>
#include <vector>

#include "comm/test_env.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/comm/staged_mpi_communicator.hpp"
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

// What rank `me` of `n` receives from all_to_all when rank r's send element i is
// value(r + shift, i): block p holds block `me` of rank p's send buffer.
std::vector<double> all_to_all_expected(int n, int me, std::size_t chunk, DataType dtype,
                                        int shift) {
  std::vector<double> expected(static_cast<std::size_t>(n) * chunk);
  for (int p = 0; p < n; ++p)
    for (std::size_t k = 0; k < chunk; ++k)
      expected[static_cast<std::size_t>(p) * chunk + k] =
          value(p + shift, static_cast<std::size_t>(me) * chunk + k, dtype);
  return expected;
}

void fill_send(Buffer& b, int rank) {
  for (std::size_t i = 0; i < b.elements; ++i) b.set(i, value(rank, i, b.dtype));
  b.upload();
}

// A started all-to-all's entry has the blocking call's op, group and bytes.
void check_like_blocking(const ted::LedgerEntry& e, const ted::LedgerEntry& blocking) {
  CHECK(e.op == CollectiveOp::all_to_all);
  CHECK(e.group == blocking.group);
  CHECK(e.group_size == blocking.group_size);
  CHECK(e.dtype == blocking.dtype);
  CHECK(e.bytes_sent == blocking.bytes_sent);
  CHECK(e.bytes_recv == blocking.bytes_recv);
  CHECK(e.seconds >= 0);
}

// Work unrelated to a started collective, as the MoE layer's expert compute will be: device
// fills of a scratch buffer and host arithmetic, with progress() calls in between. Checks its
// own results, so a transfer that wrote where it should not is caught too.
void local_work(ted::PendingCollective& pending) {
  Buffer scratch(1000, DataType::f32);
  double sum = 0;
  for (int step = 0; step < 8; ++step) {
    ted::test::device().fill(scratch.data(), scratch.elements, DataType::f32, step);
    for (int i = 0; i < 20000; ++i) sum += (i % 7) * 0.5;
    pending.progress();
  }
  CHECK(sum == 8 * 29998.5);  // eight times the sum over i < 20000 of (i % 7) / 2
  scratch.download();
  CHECK(count_wrong(scratch, std::vector<double>(scratch.elements, 7.0)) == 0);
}

// all_to_all_start against the blocking all_to_all on `comm`: alone with work and progress()
// before the wait, two outstanding at once, one destroyed without a wait, and one whose send
// buffer is written and receive buffer read by device work queued around it. Collective over
// comm.
void exercise_started_all_to_all(ted::Communicator& comm, DataType dtype, std::size_t chunk) {
  const int n = comm.size();
  const int me = comm.rank();
  const std::size_t total = static_cast<std::size_t>(n) * chunk;
  const std::size_t w = ted::dtype_size(dtype);
  ted::Ledger ledger;
  ledger.set_keep_entries(true);
  comm.set_ledger(&ledger);

  // Two send buffers with different data (value(r + 3, i) differs from value(r, i) everywhere),
  // so results that trade places are caught.
  Buffer send(total, dtype), other(total, dtype);
  fill_send(send, me);
  fill_send(other, me + 3);
  const auto expected = all_to_all_expected(n, me, chunk, dtype, 0);
  const auto expected_other = all_to_all_expected(n, me, chunk, dtype, 3);

  Buffer blocking(total, dtype);
  poison(blocking);
  comm.all_to_all(send.data(), blocking.data(), chunk, dtype);
  blocking.download();
  REQUIRE(count_wrong(blocking, expected) == 0);
  REQUIRE(ledger.entries().size() == 1);
  const ted::LedgerEntry reference = ledger.entries().back();
  CHECK(reference.bytes_sent == total * w);

  {  // alone: work and progress() between start and wait
    Buffer recv(total, dtype);
    poison(recv);
    auto pending = comm.all_to_all_start(send.data(), recv.data(), chunk, dtype);
    CHECK(ledger.entries().size() == 1);  // recorded when it finishes, not when it starts
    local_work(*pending);
    pending->wait();
    pending->wait();  // a second wait does nothing and records nothing
    recv.download();
    std::size_t unlike_blocking = 0;
    for (std::size_t i = 0; i < total; ++i)
      if (recv.get(i) != blocking.get(i)) ++unlike_blocking;
    CHECK(unlike_blocking == 0);
    REQUIRE(ledger.entries().size() == 2);
    check_like_blocking(ledger.entries().back(), reference);
  }
  {  // two outstanding at once, finished in the other order than started
    Buffer recv(total, dtype), recv_other(total, dtype);
    poison(recv);
    poison(recv_other);
    auto first = comm.all_to_all_start(send.data(), recv.data(), chunk, dtype);
    auto second = comm.all_to_all_start(other.data(), recv_other.data(), chunk, dtype);
    local_work(*first);
    second->progress();
    second->wait();
    first->wait();
    recv.download();
    recv_other.download();
    CHECK(count_wrong(recv, expected) == 0);
    CHECK(count_wrong(recv_other, expected_other) == 0);
    REQUIRE(ledger.entries().size() == 4);
    check_like_blocking(ledger.entries()[2], reference);
    check_like_blocking(ledger.entries()[3], reference);
  }
  {  // destroyed without a wait: the destructor finishes it, and it is still recorded once
    Buffer recv(total, dtype);
    poison(recv);
    {
      auto pending = comm.all_to_all_start(other.data(), recv.data(), chunk, dtype);
      pending->progress();
    }
    recv.download();
    CHECK(count_wrong(recv, expected_other) == 0);
    REQUIRE(ledger.entries().size() == 5);
    check_like_blocking(ledger.entries().back(), reference);
  }
  const auto& t = ledger.total(CollectiveOp::all_to_all, comm.group());
  CHECK(t.calls == 5);
  CHECK(t.bytes_sent == 5 * reference.bytes_sent);
  CHECK(t.bytes_recv == 5 * reference.bytes_recv);

  // Without a ledger (so nothing blocks the host on NCCL either): the send buffer is written by
  // a device fill queued just before the start and the result read by a device copy queued
  // just after the wait, so both must be ordered with the device's own work.
  comm.set_ledger(nullptr);
  {
    Buffer filled(total, dtype), recv(total, dtype), copy(total, dtype);
    poison(filled);
    poison(recv);
    poison(copy);
    ted::test::device().fill(filled.data(), total, dtype, me + 1);
    auto pending = comm.all_to_all_start(filled.data(), recv.data(), chunk, dtype);
    pending->wait();
    ted::test::device().copy(copy.data(), recv.data(), total * w);
    copy.download();
    std::vector<double> from_rank(total);
    for (std::size_t i = 0; i < total; ++i) from_rank[i] = static_cast<double>(i / chunk + 1);
    CHECK(count_wrong(copy, from_rank) == 0);
  }
  CHECK(ledger.entries().size() == 5);
}

// A communicator that keeps the default do_all_to_all_start (the blocking call at the start),
// as a backend without a nonblocking all-to-all would: every other call goes to `inner`.
class BlockingOnlyCommunicator final : public ted::Communicator {
 public:
  explicit BlockingOnlyCommunicator(std::unique_ptr<ted::Communicator> inner)
      : Communicator(inner->group(), inner->rank(), inner->size(), nullptr),
        inner_(std::move(inner)) {}
  ted::CommBackend backend() const override { return inner_->backend(); }
  std::unique_ptr<Communicator> split(int color, int key, GroupKind group) const override {
    return std::make_unique<BlockingOnlyCommunicator>(inner_->split(color, key, group));
  }
  void synchronize() override { inner_->synchronize(); }

 protected:
  void do_all_reduce(const void* send, void* recv, std::size_t count, DataType dtype,
                     ted::ReduceOp op) override {
    inner_->all_reduce(send, recv, count, dtype, op);
  }
  void do_all_gather(const void* send, void* recv, std::size_t count, DataType dtype) override {
    inner_->all_gather(send, recv, count, dtype);
  }
  void do_reduce_scatter(const void* send, void* recv, std::size_t count, DataType dtype) override {
    inner_->reduce_scatter(send, recv, count, dtype);
  }
  void do_all_to_all(const void* send, void* recv, std::size_t count, DataType dtype) override {
    inner_->all_to_all(send, recv, count, dtype);
  }
  void do_all_to_all_v(const void* send, std::span<const std::size_t> send_counts, void* recv,
                       std::span<const std::size_t> recv_counts, DataType dtype) override {
    inner_->all_to_all_v(send, send_counts, recv, recv_counts, dtype);
  }
  void do_broadcast(void* buffer, std::size_t count, DataType dtype, int root) override {
    inner_->broadcast(buffer, count, dtype, root);
  }
  void do_barrier() override { inner_->barrier(); }

 private:
  std::unique_ptr<ted::Communicator> inner_;
};

const std::size_t kStartedChunks[] = {0, 1, 7, 33, 4099};  // 4099: beyond MPI's eager sizes

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

TEST_CASE(
    "collectives that wait sleeping (MpiWait::sleep, as oversubscribed experiments run) give "
    "the same elements") {
  auto& world = ted::test::world();
  const ted::MpiWait before = ted::mpi_wait();  // the run's own (mpi_catch_main.cpp: --wait)
  ted::set_mpi_wait(ted::MpiWait::sleep);
  const auto layouts = ted::all_layouts(world.size());
  ted::ProcessGrid grid(world.size(), layouts.back());
  ted::TedGroups groups(ted::test::control(), world, grid);
  for (GroupKind kind : kGroups)
    for (DataType dtype : kTypes)
      for (std::size_t chunk : kChunks) {
        INFO(layouts.back().to_string()
             << ", " << ted::to_string(kind) << " group, " << ted::to_string(dtype) << ", chunk "
             << chunk << ", rank " << world.rank());
        exercise(groups.group(kind), dtype, chunk);
      }
  for (std::size_t chunk : kStartedChunks) exercise_started_all_to_all(world, DataType::f32, chunk);
  world.barrier();
  ted::set_mpi_wait(before);
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
                    Catch::Matchers::ContainsSubstring("send counts"));
  CHECK_THROWS_WITH(world.broadcast(a.data(), 4, DataType::f32, world.size()),
                    Catch::Matchers::ContainsSubstring("root"));
  CHECK_THROWS_WITH(world.all_to_all(a.data(), a.data(), 4, DataType::f32),
                    Catch::Matchers::ContainsSubstring("overlap"));
  CHECK_THROWS_WITH(world.all_reduce(nullptr, b.data(), 4, DataType::f32),
                    Catch::Matchers::ContainsSubstring("null"));
  CHECK_THROWS_WITH(world.all_to_all_start(a.data(), a.data(), 4, DataType::f32),
                    Catch::Matchers::ContainsSubstring("overlap"));
  CHECK_THROWS_WITH(world.all_to_all_start(nullptr, b.data(), 4, DataType::f32),
                    Catch::Matchers::ContainsSubstring("null"));
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

TEST_CASE("a started all-to-all gives the blocking result, two at once included, recorded once") {
  auto& world = ted::test::world();
  // Even and odd ranks: a group that is not the world, with ranks in a different order.
  auto half = world.split(world.rank() % 2, -world.rank(), GroupKind::custom);
  for (ted::Communicator* comm : {&world, half.get()}) {
    for (DataType dtype : kTypes) {
      for (std::size_t chunk : kStartedChunks) {
        INFO(ted::to_string(comm->group())
             << " group of " << comm->size() << ", " << ted::to_string(dtype) << ", chunk " << chunk
             << ", rank " << world.rank());
        exercise_started_all_to_all(*comm, dtype, chunk);
      }
    }
  }
}

TEST_CASE("the default all_to_all_start of a backend without one runs the blocking call") {
  auto& world = ted::test::world();
  BlockingOnlyCommunicator comm(world.split(0, world.rank(), GroupKind::custom));
  for (DataType dtype : {DataType::f32, DataType::bf16, DataType::i64}) {
    for (std::size_t chunk : kStartedChunks) {
      INFO(ted::to_string(dtype) << ", chunk " << chunk << ", rank " << world.rank());
      exercise_started_all_to_all(comm, dtype, chunk);
    }
  }
}

TEST_CASE("a started all-to-all records the time it blocked, not the time it was in flight") {
  auto& world = ted::test::world();
  auto& control = ted::test::control();
  const std::size_t chunk = 16;
  const auto total = static_cast<std::size_t>(world.size()) * chunk;
  Buffer send(total, DataType::f32), recv(total, DataType::f32);
  fill_send(send, world.rank());
  ted::Ledger ledger;
  ledger.set_keep_entries(true);
  world.set_ledger(&ledger);
  using namespace std::chrono_literals;

  // In flight 300 ms while this rank sleeps (its "compute"), then waited for: everyone has
  // started long before anyone waits, so little of the 300 ms is exposed.
  control.barrier();
  auto pending = world.all_to_all_start(send.data(), recv.data(), chunk, DataType::f32);
  std::this_thread::sleep_for(300ms);
  pending->wait();
  REQUIRE(ledger.entries().size() == 1);
  CHECK(ledger.entries().back().seconds < 0.2);

  // Rank 0 starts 300 ms late: every other rank waits for its data, in wait(), and that counts.
  if (world.size() > 1) {
    control.barrier();
    if (world.rank() == 0) std::this_thread::sleep_for(300ms);
    pending = world.all_to_all_start(send.data(), recv.data(), chunk, DataType::f32);
    pending->wait();
    REQUIRE(ledger.entries().size() == 2);
    if (world.rank() != 0) CHECK(ledger.entries().back().seconds > 0.2);
  }
  recv.download();
  CHECK(count_wrong(recv,
                    all_to_all_expected(world.size(), world.rank(), chunk, DataType::f32, 0)) == 0);
  world.set_ledger(nullptr);
}

namespace {
// A device that counts its host allocations (pinned memory, on a GPU).
class CountingDevice final : public ted::Device {
 public:
  explicit CountingDevice(ted::Device& inner) : inner_(inner) {}
  ted::DeviceKind kind() const override { return inner_.kind(); }
  std::string name() const override { return inner_.name(); }
  void* allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* p) override { inner_.deallocate(p); }
  void copy_from_host(void* d, const void* s, std::size_t n) override {
    inner_.copy_from_host(d, s, n);
  }
  void copy_to_host(void* d, const void* s, std::size_t n) override {
    inner_.copy_to_host(d, s, n);
  }
  void copy(void* d, const void* s, std::size_t n) override { inner_.copy(d, s, n); }
  void copy_2d(void* d, std::size_t dp, const void* s, std::size_t sp, std::size_t w,
               std::size_t h) override {
    inner_.copy_2d(d, dp, s, sp, w, h);
  }
  void fill(void* d, std::size_t n, DataType t, double v) override { inner_.fill(d, n, t, v); }
  void synchronize() override { inner_.synchronize(); }
  void* allocate_host(std::size_t bytes) override {
    ++host_allocations;
    return inner_.allocate_host(bytes);
  }
  void deallocate_host(void* p) override { inner_.deallocate_host(p); }
  std::uint64_t free_bytes() override { return inner_.free_bytes(); }
  ted::Device& base() override { return inner_.base(); }
  int host_allocations = 0;

 private:
  ted::Device& inner_;
};
}  // namespace

TEST_CASE("the host-staged all-to-all keeps its host buffers from one start to the next") {
  CountingDevice device(ted::test::device());
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  ted::StagedMpiCommunicator staged(comm, GroupKind::world, nullptr, device);
  const std::size_t count = 5, total = count * static_cast<std::size_t>(staged.size());
  Buffer send(total, DataType::f32), recv(total, DataType::f32);
  for (std::size_t i = 0; i < total; ++i) send.set(i, value(staged.rank(), i, DataType::f32));
  send.upload();
  int after_first = 0;
  for (int round = 0; round < 4; ++round) {
    auto first = staged.all_to_all_start(send.data(), recv.data(), count, DataType::f32);
    first->wait();
    if (round == 0) after_first = device.host_allocations;
    recv.download();
    for (int source = 0; source < staged.size(); ++source)
      for (std::size_t j = 0; j < count; ++j)
        CHECK(recv.get(static_cast<std::size_t>(source) * count + j) ==
              value(source, static_cast<std::size_t>(staged.rank()) * count + j, DataType::f32));
  }
  CHECK(after_first == 2);  // one send and one receive buffer
  CHECK(device.host_allocations == after_first);
  // Two in flight at once need two pairs; the next round reuses both.
  Buffer recv2(total, DataType::f32);
  for (int round = 0; round < 2; ++round) {
    auto a = staged.all_to_all_start(send.data(), recv.data(), count, DataType::f32);
    auto b = staged.all_to_all_start(send.data(), recv2.data(), count, DataType::f32);
    a->wait();
    b->wait();
    CHECK(device.host_allocations == 4);
  }
}
