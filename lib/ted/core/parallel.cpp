#include "ted/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "ted/core/system.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TED_CPU_RELAX() _mm_pause()
#else
#define TED_CPU_RELAX() std::this_thread::yield()
#endif

namespace ted {
namespace {

// How long a thread spins on a flag before it sleeps: long enough to catch the next parallel
// loop of a step (they follow each other within microseconds), short enough that an idle pool
// gives its cores back at once.
constexpr auto kSpin = std::chrono::microseconds(50);

// Spins until ready() or kSpin has passed; true when ready.
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      TED_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
  }
}

thread_local bool in_parallel = false;  // inside a chunk: nested loops run inline

}  // namespace

// One job at a time. state_ is the claim word: the job's generation (high 32 bits), its chunk
// count (16 bits) and the next unclaimed chunk (16 bits). A thread owns a chunk once its
// compare-exchange moved the next index past it; a job ends only when all its chunks are
// reported done, so whoever owns a chunk may still read the job's body.
ThreadPool::ThreadPool(int threads) : threads_(std::max(1, threads)) {
  // Each worker starts from wake_'s value now (0), not from what it reads when it first runs:
  // a job, or the destructor, may bump wake_ before the thread gets there.
  for (int t = 1; t < threads_; ++t) workers_.emplace_back([this] { work(0); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  wake_.fetch_add(1);
  wake_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run(int chunks, const std::function<void(int)>& chunk) {
  if (busy_.exchange(true, std::memory_order_acquire)) {  // another thread's job is running
    for (int c = 0; c < chunks; ++c) chunk(c);
    return;
  }
  job_.store(&chunk, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const std::uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;
  state_.store(generation << 32 | static_cast<std::uint64_t>(chunks) << 16,
               std::memory_order_release);
  // Sequentially consistent with the worker's count-then-wait, so one of the two sees the
  // other: either the worker finds wake_ moved, or this sees it sleeping and wakes it.
  wake_.fetch_add(1);
  if (sleeping_.load() > 0) wake_.notify_all();
  help();
  if (!spin_until([&] { return done_.load(std::memory_order_acquire) == chunks; })) {
    for (int seen = done_.load(std::memory_order_acquire); seen != chunks;
         seen = done_.load(std::memory_order_acquire))
      done_.wait(seen, std::memory_order_acquire);
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::help() {
  std::uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    const int chunks = static_cast<int>(s >> 16 & 0xffff), next = static_cast<int>(s & 0xffff);
    if (next >= chunks) return;
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire))
      continue;
    (*job_.load(std::memory_order_relaxed))(next);
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) done_.notify_one();
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::work(std::uint32_t seen) {
  for (;;) {
    if (!spin_until([&] { return wake_.load(std::memory_order_acquire) != seen; })) {
      sleeping_.fetch_add(1);
      wake_.wait(seen);
      sleeping_.fetch_sub(1);
    }
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    help();
  }
}

namespace {

int env_int(const char* name) {
  const char* text = std::getenv(name);
  if (!text || !*text) return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  return *end == '\0' && value > 0 && value < (1L << 20) ? static_cast<int>(value) : 0;
}

int configured_threads() {
  if (const int asked = env_int("TED_NUM_THREADS")) return asked;
  const int machine = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return parallel_threads_default(affinity_cpus(), machine, launcher_local_ranks());
}

ThreadPool& pool() {
  static ThreadPool instance(configured_threads());
  return instance;
}

// Runs body over `chunks` equal chunks of [0, n) on the pool (inline when nested or single).
// A chunk that throws does not stop the others (they may be running already); the first
// exception is rethrown here once every chunk is done, so no thread is left inside `body`.
void run_chunks(std::int64_t n, int chunks, const ChunkBody& body) {
  if (chunks <= 1 || in_parallel) {
    body(0, n);
    return;
  }
  std::mutex mutex;
  std::exception_ptr failure;
  std::function<void(int)> chunk = [&](int c) {
    const std::int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    struct Region {  // marks the thread as inside a chunk, also when the body throws
      Region() { in_parallel = true; }
      ~Region() { in_parallel = false; }
    } region;
    try {
      body(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex);
      if (!failure) failure = std::current_exception();
    }
  };
  pool().run(chunks, chunk);
  if (failure) std::rethrow_exception(failure);
}

// Chunks per thread of parallel_for: enough that a late thread's share is taken over in pieces.
constexpr std::int64_t kChunksPerThread = 4;

}  // namespace

int parallel_threads_default(int cpus, int machine_cpus, int local_ranks) {
  cpus = std::max(1, cpus);
  if (local_ranks > 1 && cpus >= machine_cpus) return std::max(1, cpus / local_ranks);
  return cpus;
}

int launcher_local_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
    if (const int ranks = env_int(name)) return ranks;
  return 0;
}

int parallel_threads() {
  return pool().threads();
}

bool in_parallel_region() {
  return in_parallel;
}

void parallel_for(std::int64_t n, const ChunkBody& body, std::int64_t grain) {
  if (n <= 0) return;
  const std::int64_t threads = pool().threads();
  const std::int64_t pieces = std::max<std::int64_t>(1, n / std::max<std::int64_t>(grain, 1));
  const auto chunks = static_cast<int>(std::min(
      {threads * kChunksPerThread, pieces, static_cast<std::int64_t>(ThreadPool::kMaxChunks)}));
  run_chunks(n, threads > 1 ? chunks : 1, body);
}

void parallel_chunks(std::int64_t n, int chunks, const ChunkBody& body) {
  if (n <= 0) return;
  run_chunks(n, static_cast<int>(std::min<std::int64_t>({chunks, n, ThreadPool::kMaxChunks})),
             body);
}

}  // namespace ted
