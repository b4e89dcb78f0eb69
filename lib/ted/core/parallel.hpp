// The CPU backend's one set of threads: parallel_for for the element-wise kernels, and
// parallel_chunks for the GEMMs the pool cuts into blocks (kernels/cpu/blas.hpp).
//
// Work is cut into chunks with fixed boundaries, so results never depend on timing; the calling
// thread and the workers claim chunk indices from one counter, so a thread that is late (a worker
// still waking, a core the hypervisor lent elsewhere for a moment) leaves its chunks to the
// others instead of holding them up. A worker spins briefly after a job (the next one usually
// follows within microseconds) and then sleeps, so it does not take a core for long from anyone
// else: OpenBLAS runs on the calling thread only (kernels/cpu/blas.cpp) and there is no other
// pool.
//
// Threads: TED_NUM_THREADS; else the CPUs of the process's affinity mask, shared among the ranks
// an MPI launcher started unbound on this machine (parallel_threads_default); 1 runs everything
// inline.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ted {

using ChunkBody = std::function<void(std::int64_t, std::int64_t)>;

int parallel_threads();
// body(begin, end) on disjoint chunks covering [0, n), each at least `grain` long (small loops
// run inline), at most a few per thread so that a late thread's share is picked up by the
// others. A parallel_for inside a chunk runs inline.
void parallel_for(std::int64_t n, const ChunkBody& body, std::int64_t grain = 4096);
// The same with exactly min(chunks, n) chunks of equal size: for work whose chunks cost more
// each (a GEMM's block packs its operand again), one per thread.
void parallel_chunks(std::int64_t n, int chunks, const ChunkBody& body);
// True on a thread running a chunk of a parallel_for.
bool in_parallel_region();

// The pool itself: `threads` - 1 workers, the caller being the other. parallel_for and
// parallel_chunks run on one of these per process; the tests make their own.
class ThreadPool {
 public:
  static constexpr int kMaxChunks = 0xffff;
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  int threads() const { return threads_; }
  // chunk(c) for every c in [0, chunks), chunks <= kMaxChunks, on the caller and the workers;
  // returns when all are done. chunk must not throw. While another thread's job runs, the
  // caller runs its chunks alone.
  void run(int chunks, const std::function<void(int)>& chunk);

 private:
  void help();  // runs unclaimed chunks of the current job until none is left
  void work(std::uint32_t seen);

  int threads_;
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> state_{0};
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<int> done_{0};
  std::atomic<std::uint32_t> wake_{0};  // bumped per job and at the end: what idle workers watch
  std::atomic<int> sleeping_{0};        // workers blocked in wake_.wait
  std::atomic<bool> busy_{false};
  std::atomic<bool> stop_{false};
};

// The thread count without TED_NUM_THREADS, from the CPUs of the affinity mask `cpus`, the CPUs
// of the machine, and the ranks a launcher started on it (`local_ranks`, 0 when unknown): a
// rank bound to fewer CPUs than the machine has (srun --cpu-bind, mpirun --bind-to) uses its
// own; unbound ranks divide the machine among them, at least one thread each.
int parallel_threads_default(int cpus, int machine_cpus, int local_ranks);
// Ranks on this machine as the launcher says (OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS), or 0.
int launcher_local_ranks();

}  // namespace ted
