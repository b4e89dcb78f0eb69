#include "ted/core/parallel.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "ted/core/system.hpp"

namespace ted {
namespace {

class Pool {
 public:
  explicit Pool(int threads) : threads_(threads) {
    for (int t = 1; t < threads_; ++t) workers_.emplace_back([this, t] { work(t); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& worker : workers_) worker.join();
  }
  int threads() const { return threads_; }

  void run(int chunks, const std::function<void(int)>& chunk) {
    {
      std::lock_guard lock(mutex_);
      job_ = &chunk;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
    wake_.notify_all();
    chunk(0);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void work(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        if (index >= chunks_) continue;
        job = job_;
      }
      (*job)(index);
      std::lock_guard lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int chunks_ = 0;
  int pending_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

int configured_threads() {
  if (const char* text = std::getenv("TED_NUM_THREADS")) {
    int value = std::atoi(text);
    if (value >= 1) return value;
  }
  return affinity_cpus();  // a rank bound to 4 cores runs 4 threads, not the machine's count
}

Pool& pool() {
  static Pool instance(configured_threads());
  return instance;
}

}  // namespace

int parallel_threads() {
  return pool().threads();
}

namespace {
thread_local bool in_parallel = false;  // inside a chunk of a parallel_for: nested ones run inline
}  // namespace

bool in_parallel_region() {
  return in_parallel;
}

void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& body,
                  std::int64_t grain) {
  if (n <= 0) return;
  Pool& p = pool();
  auto chunks = static_cast<int>(std::min<std::int64_t>(p.threads(), (n + grain - 1) / grain));
  if (chunks <= 1 || in_parallel) {
    body(0, n);
    return;
  }
  std::function<void(int)> chunk = [&](int c) {
    std::int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    const bool outer = in_parallel;
    in_parallel = true;
    body(begin, end);
    in_parallel = outer;
  };
  p.run(chunks, chunk);
}

}  // namespace ted
