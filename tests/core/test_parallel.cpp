// The thread pool (core/parallel.hpp): chunks cover the range once with the boundaries they
// promise, whichever thread claims them and however late one is; nested loops run inline; two
// threads calling at once both finish; and the default thread count shares an unbound machine
// among the ranks a launcher started on it. CTest runs this with TED_NUM_THREADS=2.
#include "catch.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "ted/core/parallel.hpp"

namespace {

// The chunks a call made, each [begin, end), and how often each index was visited.
struct Record {
  std::mutex mutex;
  std::set<std::pair<std::int64_t, std::int64_t>> chunks;
  std::vector<std::atomic<int>> visits;
  explicit Record(std::int64_t n) : visits(static_cast<std::size_t>(n)) {}
  void add(std::int64_t begin, std::int64_t end) {
    {
      std::lock_guard lock(mutex);
      chunks.insert({begin, end});
    }
    for (std::int64_t i = begin; i < end; ++i) ++visits[static_cast<std::size_t>(i)];
  }
  bool each_once() const {
    for (const auto& v : visits)
      if (v.load() != 1) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("parallel_for covers the range once, in chunks of at least the grain") {
  const char* asked = std::getenv("TED_NUM_THREADS");
  if (asked && std::atoi(asked) > 1) REQUIRE(ted::parallel_threads() > 1);
  for (std::int64_t n : {1, 7, 100, 4096, 100003}) {
    for (std::int64_t grain : {1, 16, 4096}) {
      Record record(n);
      ted::parallel_for(
          n, [&](std::int64_t b, std::int64_t e) { record.add(b, e); }, grain);
      INFO("n " << n << " grain " << grain);
      CHECK(record.each_once());
      if (n >= 2 * grain)
        for (const auto& [b, e] : record.chunks) CHECK(e - b >= grain);
      CHECK(record.chunks.size() <= static_cast<std::size_t>(4 * ted::parallel_threads()));
    }
  }
}

TEST_CASE("parallel_chunks makes exactly the chunks asked for, at fixed boundaries") {
  const std::int64_t n = 1000;
  for (int chunks : {1, 2, 3, 8}) {
    Record record(n);
    ted::parallel_chunks(n, chunks, [&](std::int64_t b, std::int64_t e) { record.add(b, e); });
    CHECK(record.each_once());
    std::set<std::pair<std::int64_t, std::int64_t>> want;
    for (int c = 0; c < chunks; ++c) want.insert({n * c / chunks, n * (c + 1) / chunks});
    CHECK(record.chunks == want);
  }
}

TEST_CASE("a blocked chunk holds up only itself: the other thread takes the rest") {
  if (ted::parallel_threads() < 2) return;
  // The first chunk claimed blocks until every other index is done. With chunks claimed from
  // one counter the other thread does them all; with a fixed share per thread the blocked
  // thread's share would never run and the deadline would pass.
  const std::int64_t n = 64;
  Record record(n);
  std::atomic<bool> first{true}, in_time{true};
  std::atomic<std::int64_t> others{0};  // indices done by the other chunks
  ted::parallel_for(
      n,
      [&](std::int64_t b, std::int64_t e) {
        if (first.exchange(false)) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (others.load() < n - (e - b)) {
            if (std::chrono::steady_clock::now() > deadline) {
              in_time = false;
              break;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        } else {
          others += e - b;
        }
        record.add(b, e);
      },
      1);
  CHECK(record.each_once());
  CHECK(in_time.load());
  CHECK(record.chunks.size() > 2);
}

TEST_CASE("a parallel_for inside a chunk runs inline on its thread") {
  if (ted::parallel_threads() < 2) return;  // one thread: every loop runs inline anyway
  std::atomic<int> nested_inline{0}, nested_calls{0};
  ted::parallel_for(
      8,
      [&](std::int64_t, std::int64_t) {
        CHECK(ted::in_parallel_region());
        const auto id = std::this_thread::get_id();
        ted::parallel_for(
            1000,
            [&](std::int64_t, std::int64_t) {
              ++nested_calls;
              if (std::this_thread::get_id() == id) ++nested_inline;
            },
            1);
      },
      1);
  CHECK(!ted::in_parallel_region());
  CHECK(nested_calls.load() == nested_inline.load());
  CHECK(nested_calls.load() == 8);  // one inline chunk per outer chunk
}

TEST_CASE("a chunk that throws: the caller gets the exception once all chunks are done") {
  const std::int64_t n = 1000;
  for (int round = 0; round < 3; ++round) {
    Record record(n);
    CHECK_THROWS_WITH(ted::parallel_for(
                          n,
                          [&](std::int64_t b, std::int64_t e) {
                            record.add(b, e);
                            if (b == 0) throw std::runtime_error("chunk 0 failed");
                          },
                          16),
                      "chunk 0 failed");
    CHECK(record.each_once());  // the other chunks ran to their end
    CHECK(!ted::in_parallel_region());
  }
  // The pool is whole again: a later loop splits as before.
  std::set<std::thread::id> threads;
  std::mutex mutex;
  ted::parallel_for(
      64,
      [&](std::int64_t, std::int64_t) {
        std::lock_guard lock(mutex);
        threads.insert(std::this_thread::get_id());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      },
      1);
  CHECK(!threads.empty());
}

TEST_CASE("two threads using the pool at once both get every chunk done") {
  const std::int64_t n = 20000;
  for (int round = 0; round < 50; ++round) {
    Record ra(n), rb(n);
    std::thread other([&] {
      ted::parallel_for(
          n, [&](std::int64_t x, std::int64_t y) { rb.add(x, y); }, 64);
    });
    ted::parallel_for(
        n, [&](std::int64_t x, std::int64_t y) { ra.add(x, y); }, 64);
    other.join();
    REQUIRE(ra.each_once());
    REQUIRE(rb.each_once());
  }
}

TEST_CASE("pools made and ended at once, with or without a job, never hang") {
  // A worker whose thread first runs after its pool's destructor has begun must still see the
  // end (one that took the destructor's wake-up as its starting point slept forever).
  auto finished = std::async(std::launch::async, [] {
    for (int i = 0; i < 2000; ++i) {
      ted::ThreadPool pool(2 + i % 3);
      if (i % 2) {
        std::atomic<int> ran{0};
        pool.run(4, [&](int) { ++ran; });
        if (ran.load() != 4) return false;
      }
    }
    return true;
  });
  if (finished.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    // The hung thread cannot be joined: say so and end the process.
    std::fprintf(stderr, "FAILED: a thread pool's destructor hung\n");
    std::_Exit(1);
  }
  CHECK(finished.get());
}

TEST_CASE("default threads: a bound rank keeps its CPUs, unbound ranks share the machine") {
  using ted::parallel_threads_default;
  CHECK(parallel_threads_default(2, 2, 0) == 2);  // one process, no launcher
  CHECK(parallel_threads_default(2, 2, 1) == 2);  // one rank
  CHECK(parallel_threads_default(2, 2, 4) == 1);  // 4 unbound ranks on 2 cores: 1 each
  CHECK(parallel_threads_default(16, 16, 4) == 4);
  CHECK(parallel_threads_default(16, 16, 3) == 5);
  CHECK(parallel_threads_default(4, 16, 4) == 4);  // bound to 4 of 16: its own 4
  CHECK(parallel_threads_default(1, 2, 8) == 1);
  CHECK(parallel_threads_default(0, 2, 0) == 1);
}
