// What the emulated GPU's sources share: settings, errors, streams, the memory registry and the
// grid runner. Not a public header.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace ted_emu {

struct Settings {
  int gpus = 1;
  bool shared_gpus = false;
  int compute_mode = cudaComputeModeDefault;
  std::size_t memory_bytes = 0;
  unsigned delay_us = 0;
  std::uint64_t seed = 1;
  int driver_version = 13000;  // TED_EMU_DRIVER: 0 is no driver, below 13000 one too old
};
constexpr int kRuntimeVersion = 13000;
const Settings& settings();

// Prints "ted-emulated-gpu: <what>" on stderr: the emulator's own explanation of an error that
// a real GPU would report only by its code.
void explain(const std::string& what);

// The thread's last error (cudaGetLastError) and a device's sticky error: once a kernel fails,
// every later call on that device reports it, as on a GPU.
cudaError_t set_error(cudaError_t error);
void fail_device(int device, cudaError_t error, const std::string& why);
cudaError_t device_error(int device);
int current_device();

// A stream: an ordered queue of work, run in order by a thread of its own or by a thread that
// waits for it, one piece at a time.
class Stream {
 public:
  Stream(int device, unsigned flags);
  ~Stream();  // waits for the queued work
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  int device() const { return device_; }
  // Queues `work`; it runs after everything queued before it. `held_back`: wait
  // TED_EMU_DELAY_US before it runs (the copies a host may read or write too early).
  void enqueue(std::function<void()> work, bool held_back = false);
  // Waits until everything queued before the call has run (running it on the caller's thread
  // while the stream's own thread is not).
  void synchronize();
  bool idle();

 private:
  void run();
  // Runs the oldest piece of work; `lock` (held) is released while it runs.
  void run_one(std::unique_lock<std::mutex>& lock);

  int device_;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Work {
    std::function<void()> run;
    bool held_back;
  };
  std::deque<Work> queue_;
  std::uint64_t queued_ = 0, finished_ = 0;
  bool executing_ = false;  // one piece at a time, whichever thread runs it
  bool stopping_ = false;
  std::thread thread_;
};

// The stream a handle names: nullptr is the current device's default stream. Null for a handle
// that is not a live stream.
Stream* stream_of(cudaStream_t stream);

// Device memory known to the runtime. `bytes` bytes from `pointer` lie inside one live
// allocation of a GPU (its index in *device), or the answer is false.
bool device_range(const void* pointer, std::size_t bytes, int* device = nullptr);
bool is_device_pointer(const void* pointer);
// Trims a device's pool to its release threshold (what a synchronisation does).
void settle_pool(int device);

// Runs a checked launch's grid (on the stream's thread). Returns false, with the device failed,
// when a kernel deadlocked or trapped.
struct Grid {
  dim3 grid, block;
  std::size_t shared_bytes;
  const void* kernel;
  std::shared_ptr<const detail::KernelCall> call;
  std::uint64_t order_seed;
};
void run_grid(const Grid& grid, int device);
constexpr std::size_t kMaxDynamicShared = 232448;  // an H100's opt-in maximum per block
constexpr std::size_t kSharedCanary = 4096;        // checked bytes past a launch's dynamic memory

}  // namespace ted_emu
