// What the sources of the emulated GPU's runtime (runtime_*.cpp) share, and the other
// libraries of the emulator (cuBLAS, NCCL, the scheduler) do not see: the handle behind a
// cudaStream_t, the state of each device, the thread's current device, the registry of live
// handles and the side of the bus a pointer is on. Not a public header.
//
// The runtime, by topic: runtime_device.cpp (settings, errors, devices and their contexts),
// runtime_memory.cpp (device and pinned memory, the pools), runtime_copies.cpp (copies and
// fills), runtime_streams.cpp (streams and events), runtime_launch.cpp (kernel launches and the
// work the other libraries queue).
//
// What it keeps of a GPU, because correctness depends on it:
// - streams run their work in order on a thread each, asynchronously to the host; events order
//   streams and time them; a download to pinned memory is poisoned until it lands, and
//   TED_EMU_DELAY_US holds copies to and from pinned memory back, so that a host read or write
//   without a synchronisation sees or makes wrong data;
// - device memory is its own: copies are checked against the allocations they touch (direction,
//   bounds, use after free), fresh memory reads as NaN (0xff bytes), and bytes written past an
//   allocation's end are found when it is freed (an illegal address, as the GPU would fault);
// - copies to and from pinned host memory are asynchronous; to and from pageable memory they
//   are as the CUDA documentation says (the host buffer is read before an upload returns, and a
//   download to it returns once done);
// - a pool per device (cudaMallocAsync) keeps freed memory for reuse up to its release
//   threshold, trimmed at synchronisations; memory the pool keeps is not available to
//   cudaMalloc, as on a GPU;
// - launches are checked against an H100's limits and fail with the runtime's errors.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "internal.hpp"

struct CUstream_st {
  std::unique_ptr<ted_emu::Stream> stream;
};

struct CUmemPoolHandle_st {
  int device;
};

namespace ted_emu {

constexpr std::size_t kDefaultShared = 48 * 1024;

// ---- devices (runtime_device.cpp) --------------------------------------------------------------
struct DeviceState {
  std::mutex mutex;
  std::atomic<int> error{cudaSuccess};
  std::size_t used = 0;    // live allocations (capacity)
  std::size_t cached = 0;  // freed into the pool, kept
  std::uint64_t release_threshold = 0;
  std::multimap<std::size_t, char*> pool;  // kept blocks by capacity
  std::unique_ptr<Stream> default_stream;
  CUmemPoolHandle_st pool_handle{};
  int exclusive_lock = -1;  // lock file held while this process uses the GPU (exclusive mode)
  std::atomic<bool> opened{false};  // this process has a context on it
};

std::vector<std::unique_ptr<DeviceState>>& devices();
bool valid_device(int device);
DeviceState& device_state(int device);

// This process's context on a GPU, made at its first use (refused in exclusive-process mode when
// another process holds the GPU).
cudaError_t open_device(int device);
// The calling thread's context on its current device, made at its first call that needs one.
cudaError_t context();

// The device the calling thread works on: cudaSetDevice's, or a stream thread's own.
extern constinit thread_local int tls_device;

// ---- memory (runtime_memory.cpp) ---------------------------------------------------------------
// Which side of the bus `pointer` is on, checking that `bytes` bytes from it fit.
enum class Side { host, pinned, device, bad };
Side side_of(const void* pointer, std::size_t bytes, int* device);

// ---- streams (runtime_streams.cpp) -------------------------------------------------------------
// Guards the registries of live handles: the streams here, the events and the kernels' dynamic
// shared memory limits in their sources.
extern std::mutex g_handles_mutex;
extern std::set<CUstream_st*> g_streams;

// ---- launches (runtime_launch.cpp) -------------------------------------------------------------
extern std::atomic<std::uint64_t> g_launches;  // counted for counters()

}  // namespace ted_emu
