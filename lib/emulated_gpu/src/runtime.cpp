// The emulated GPU's runtime: devices, errors, streams and events, memory and copies, launches.
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
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.hpp"
#include "ted_emu/control.hpp"
#include "ted_emu/work.hpp"

struct CUstream_st {
  std::unique_ptr<ted_emu::Stream> stream;
};

struct CUevent_st {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0, completed = 0;
  std::chrono::steady_clock::time_point when{};
  unsigned flags = 0;
};

struct CUmemPoolHandle_st {
  int device;
};

namespace ted_emu {
namespace {

constexpr std::size_t kDefaultShared = 48 * 1024;
constexpr std::size_t kRedzone = 256;  // before and after each device allocation
constexpr unsigned char kRedzoneByte = 0xa5;

std::size_t parse_bytes(const char* text) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      value *= 1024.0;
      break;
    case 'M':
    case 'm':
      value *= 1024.0 * 1024.0;
      break;
    case 'G':
    case 'g':
      value *= 1024.0 * 1024.0 * 1024.0;
      break;
    default:
      break;
  }
  return static_cast<std::size_t>(value);
}

std::size_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page)
                               : std::size_t{16} << 30;
}

Settings load_settings() {
  Settings s;
  if (const char* v = std::getenv("TED_EMU_GPUS")) s.gpus = std::atoi(v);
  if (const char* v = std::getenv("TED_EMU_SHARED_GPUS")) s.shared_gpus = std::atoi(v) != 0;
  if (const char* v = std::getenv("TED_EMU_COMPUTE_MODE"))
    s.compute_mode = std::string(v) == "exclusive_process" ? cudaComputeModeExclusiveProcess
                                                           : cudaComputeModeDefault;
  s.memory_bytes = std::min<std::size_t>(std::size_t{80} << 30, physical_memory() / 4);
  if (const char* v = std::getenv("TED_EMU_MEMORY")) s.memory_bytes = parse_bytes(v);
  if (const char* v = std::getenv("TED_EMU_DELAY_US"))
    s.delay_us = static_cast<unsigned>(std::atoi(v));
  if (const char* v = std::getenv("TED_EMU_SEED")) s.seed = std::strtoull(v, nullptr, 10);
  if (const char* v = std::getenv("TED_EMU_DRIVER")) s.driver_version = std::atoi(v);
  return s;
}

std::size_t round_up(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
}

// ---- devices ----------------------------------------------------------------------------------
struct Allocation {
  std::size_t bytes;     // as asked
  std::size_t capacity;  // usable bytes between the redzones
  int device;            // -1: pinned host memory
  bool pooled;
};

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

std::vector<std::unique_ptr<DeviceState>>& devices() {
  static std::vector<std::unique_ptr<DeviceState>> list = [] {
    std::vector<std::unique_ptr<DeviceState>> made;
    // A runtime that cannot use the driver (none, or one older than the runtime) sees no GPU.
    const int gpus = settings().driver_version < kRuntimeVersion ? 0 : settings().gpus;
    for (int i = 0; i < std::max(gpus, 0); ++i) {
      made.push_back(std::make_unique<DeviceState>());
      made.back()->pool_handle.device = i;
    }
    return made;
  }();
  return list;
}

bool valid_device(int device) {
  return device >= 0 && device < static_cast<int>(devices().size());
}

thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local int tls_device = 0;

std::mutex g_memory_mutex;
std::map<std::uintptr_t, Allocation> g_allocations;  // by user pointer: live ones only

std::mutex g_handles_mutex;
std::set<CUstream_st*> g_streams;
std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>> g_events;
std::unordered_map<const void*, int> g_max_dynamic_shared;

std::atomic<std::uint64_t> g_launches{0}, g_device_allocations{0}, g_pinned_allocations{0},
    g_pinned_frees{0};

std::string uuid_text(int device) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string key = std::string(host) + "/" + std::to_string(device);
  if (!settings().shared_gpus) key += "/" + std::to_string(getpid());
  return key;
}

// Called when a process first uses a GPU (makes its context there): in exclusive-process mode a
// second process of the machine that uses the same GPU is refused, as the driver does.
cudaError_t open_device(int device) {
  DeviceState& d = *devices()[device];
  if (d.opened.load(std::memory_order_acquire)) return cudaSuccess;
  std::lock_guard lock(d.mutex);
  if (d.opened) return cudaSuccess;
  if (settings().compute_mode == cudaComputeModeExclusiveProcess) {
    std::string path = "/tmp/ted-emulated-gpu-";
    for (char c : uuid_text(device)) path += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR, 0666);
    if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (fd >= 0) ::close(fd);
      explain("GPU " + std::to_string(device) +
              " is in exclusive-process mode and another process uses it");
      return cudaErrorDevicesUnavailable;
    }
    d.exclusive_lock = fd;
  }
  d.default_stream = std::make_unique<Stream>(device, cudaStreamDefault);
  d.opened.store(true, std::memory_order_release);
  return cudaSuccess;
}

// What the runtime does at a thread's first call that needs a context: it makes the primary
// context of the thread's current device (device 0 unless the thread set another) current,
// creating it if this process has none there. So a thread that never called cudaSetDevice
// touches GPU 0, as on a GPU, where that costs memory on GPU 0 and, on an exclusive-process GPU
// that another process holds, fails.
thread_local int tls_context = -1;  // the device of this thread's current context
cudaError_t context() {
  if (tls_context == tls_device) return cudaSuccess;
  if (!valid_device(tls_device))
    return settings().driver_version < kRuntimeVersion ? cudaErrorInsufficientDriver
                                                       : cudaErrorNoDevice;
  const cudaError_t rc = open_device(tls_device);
  if (rc == cudaSuccess) tls_context = tls_device;
  return rc;
}

DeviceState& device_state(int device) {
  return *devices()[device];
}

// ---- device memory ------------------------------------------------------------------------------
char* user_of(char* base) {
  return base + kRedzone;
}
char* base_of(void* user) {
  return static_cast<char*>(user) - kRedzone;
}

// A fresh block: redzones around `capacity` usable bytes, the first `bytes` of them poisoned.
char* new_block(std::size_t capacity) {
  void* base = std::aligned_alloc(256, capacity + 2 * kRedzone);
  return static_cast<char*>(base);
}

void arm(char* base, std::size_t bytes, std::size_t capacity) {
  std::memset(base, kRedzoneByte, kRedzone);
  std::memset(user_of(base), 0xff, bytes);
  std::memset(user_of(base) + bytes, kRedzoneByte, capacity - bytes + kRedzone);
}

// The redzones of an allocation are intact (else the device is failed with the reason).
bool redzones_intact(char* base, const Allocation& a) {
  auto intact = [](const char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      if (static_cast<unsigned char>(p[i]) != kRedzoneByte) return false;
    return true;
  };
  if (intact(base, kRedzone) && intact(user_of(base) + a.bytes, a.capacity - a.bytes + kRedzone))
    return true;
  fail_device(a.device, cudaErrorIllegalAddress,
              "a kernel or copy wrote outside a " + std::to_string(a.bytes) +
                  "-byte allocation (found when it was freed)");
  return false;
}

void register_allocation(char* base, std::size_t bytes, std::size_t capacity, int device,
                         bool pooled) {
  std::lock_guard lock(g_memory_mutex);
  g_allocations[reinterpret_cast<std::uintptr_t>(user_of(base))] = {bytes, capacity, device,
                                                                    pooled};
}

// The live allocation holding `pointer`, or nullptr (under g_memory_mutex).
const Allocation* find_allocation(const void* pointer, std::uintptr_t* start) {
  const auto p = reinterpret_cast<std::uintptr_t>(pointer);
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  if (p >= it->first + std::max<std::size_t>(it->second.bytes, 1)) return nullptr;
  *start = it->first;
  return &it->second;
}

cudaError_t allocate(void** pointer, std::size_t bytes, int device, bool pooled) {
  if (!pointer) return cudaErrorInvalidValue;
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  if (cudaError_t rc = open_device(device)) return rc;
  DeviceState& d = device_state(device);
  const std::size_t capacity = round_up(bytes);
  char* base = nullptr;
  std::size_t got = capacity;
  {
    std::lock_guard lock(d.mutex);
    if (pooled) {
      auto it = d.pool.lower_bound(capacity);
      if (it != d.pool.end() && it->first <= 2 * capacity) {
        got = it->first;
        base = it->second;
        d.pool.erase(it);
        d.cached -= got;
      } else if (d.used + d.cached + capacity > settings().memory_bytes) {
        for (auto& [size, block] : d.pool) std::free(block);  // a pool gives back what it keeps
        d.pool.clear();
        d.cached = 0;
      }
    }
    if (!base) {
      if (d.used + d.cached + capacity > settings().memory_bytes) {
        *pointer = nullptr;
        return cudaErrorMemoryAllocation;
      }
      base = new_block(capacity);
      if (!base) return cudaErrorMemoryAllocation;
      g_device_allocations.fetch_add(1);
    }
    d.used += got;
  }
  arm(base, bytes, got);
  register_allocation(base, bytes, got, device, pooled);
  *pointer = user_of(base);
  return cudaSuccess;
}

// Frees a device allocation now (the stream has reached the free): into the pool or away.
void release(void* pointer) {
  Allocation a{};
  {
    std::lock_guard lock(g_memory_mutex);
    auto it = g_allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == g_allocations.end()) return;
    a = it->second;
    g_allocations.erase(it);
  }
  char* base = base_of(pointer);
  redzones_intact(base, a);
  DeviceState& d = device_state(a.device);
  std::lock_guard lock(d.mutex);
  d.used -= a.capacity;
  if (a.pooled) {
    d.pool.emplace(a.capacity, base);
    d.cached += a.capacity;
  } else {
    std::free(base);
  }
}

// Gives kept blocks back until the pool reserves (holds live or kept) at most `keep` bytes, or
// keeps nothing: what cudaMemPoolTrimTo and the release threshold mean.
void trim_pool(int device, std::size_t keep) {
  DeviceState& d = device_state(device);
  std::lock_guard lock(d.mutex);
  while (d.used + d.cached > keep && !d.pool.empty()) {
    auto it = std::prev(d.pool.end());
    d.cached -= it->first;
    std::free(it->second);
    d.pool.erase(it);
  }
}

// Which side of the bus `pointer` is on, checking that `bytes` bytes from it fit.
enum class Side { host, pinned, device, bad };
Side side_of(const void* pointer, std::size_t bytes, int* device) {
  std::lock_guard lock(g_memory_mutex);
  std::uintptr_t start = 0;
  const Allocation* a = find_allocation(pointer, &start);
  if (!a) return Side::host;
  if (reinterpret_cast<std::uintptr_t>(pointer) + bytes > start + a->bytes) return Side::bad;
  if (device) *device = a->device;
  return a->device < 0 ? Side::pinned : Side::device;
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "host to host";
    case cudaMemcpyHostToDevice:
      return "host to device";
    case cudaMemcpyDeviceToHost:
      return "device to host";
    case cudaMemcpyDeviceToDevice:
      return "device to device";
    default:
      return "default";
  }
}

// Checks a copy's pointers against its kind; the sides of dst and src on success.
cudaError_t check_copy(void* dst, std::size_t dst_extent, const void* src, std::size_t src_extent,
                       cudaMemcpyKind kind, Side* dst_side, Side* src_side) {
  *dst_side = side_of(dst, dst_extent, nullptr);
  *src_side = side_of(src, src_extent, nullptr);
  if (*dst_side == Side::bad || *src_side == Side::bad) {
    explain(std::string("a ") + kind_name(kind) + " copy runs past the end of its " +
            (*dst_side == Side::bad ? "destination" : "source") + " allocation");
    return cudaErrorInvalidValue;
  }
  const bool dst_dev = *dst_side == Side::device, src_dev = *src_side == Side::device;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = src_dev && !dst_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (!ok) {
    explain(std::string("a copy marked ") + kind_name(kind) + " goes from " +
            (src_dev ? "device" : "host") + " to " + (dst_dev ? "device" : "host") + " memory");
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

// ---- shared with the other sources ------------------------------------------------------------
const Settings& settings() {
  static const Settings s = load_settings();
  return s;
}

void explain(const std::string& what) {
  std::fprintf(stderr, "ted-emulated-gpu: %s\n", what.c_str());
  std::fflush(stderr);
}

cudaError_t set_error(cudaError_t error) {
  if (error != cudaSuccess) tls_last_error = error;
  return error;
}

void fail_device(int device, cudaError_t error, const std::string& why) {
  if (!valid_device(device)) return;
  int expected = cudaSuccess;
  if (device_state(device).error.compare_exchange_strong(expected, error))
    explain("GPU " + std::to_string(device) + " failed (" + cudaGetErrorName(error) + "): " + why);
}

cudaError_t device_error(int device) {
  return valid_device(device) ? static_cast<cudaError_t>(device_state(device).error.load())
                              : cudaErrorInvalidDevice;
}

int current_device() {
  return tls_device;
}

bool device_range(const void* pointer, std::size_t bytes, int* device) {
  return side_of(pointer, bytes, device) == Side::device;
}

bool is_device_pointer(const void* pointer) {
  return side_of(pointer, 1, nullptr) == Side::device;
}

void settle_pool(int device) {
  if (valid_device(device)) trim_pool(device, device_state(device).release_threshold);
}

Counters counters() {
  Counters c;
  c.kernel_launches = g_launches.load();
  c.device_allocations = g_device_allocations.load();
  c.pinned_allocations = g_pinned_allocations.load();
  c.pinned_frees = g_pinned_frees.load();
  return c;
}

// ---- streams ------------------------------------------------------------------------------------
Stream::Stream(int device, unsigned) : device_(device), thread_([this] { run(); }) {}

Stream::~Stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Stream::enqueue(std::function<void()> work, bool held_back) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(work), held_back});
    ++queued_;
  }
  changed_.notify_all();
}

void Stream::run_one(std::unique_lock<std::mutex>& lock) {
  Work work = std::move(queue_.front());
  queue_.pop_front();
  executing_ = true;
  lock.unlock();
  if (work.held_back && settings().delay_us)
    std::this_thread::sleep_for(std::chrono::microseconds(settings().delay_us));
  work.run();
  lock.lock();
  executing_ = false;
  ++finished_;
  changed_.notify_all();
}

// A thread that waits for the stream runs its work itself, in order, rather than sleeping
// until the stream's thread has (the same order, fewer hand-offs between threads).
void Stream::synchronize() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = queued_;
  while (finished_ < target) {
    if (!queue_.empty() && !executing_) {
      run_one(lock);
    } else {
      changed_.wait(lock);
    }
  }
}

bool Stream::idle() {
  std::lock_guard lock(mutex_);
  return finished_ == queued_;
}

void Stream::run() {
  tls_device = device_;
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !executing_); });
    if (queue_.empty()) return;  // stopping, and nothing left
    run_one(lock);
  }
}

Stream* stream_of(cudaStream_t handle) {
  if (!handle) {
    const int device = tls_device;
    if (!valid_device(device) || open_device(device) != cudaSuccess) return nullptr;
    return device_state(device).default_stream.get();
  }
  std::lock_guard lock(g_handles_mutex);
  return g_streams.count(handle) ? handle->stream.get() : nullptr;
}

namespace detail {

cudaError_t launch(const cudaLaunchConfig_t* config, const void* kernel,
                   std::shared_ptr<const KernelCall> call) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!config || !kernel) return set_error(cudaErrorInvalidValue);
  Stream* stream = stream_of(config->stream);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  const int device = stream->device();
  if (cudaError_t rc = device_error(device)) return set_error(rc);
  const dim3 g = config->gridDim, b = config->blockDim;
  const std::uint64_t threads = static_cast<std::uint64_t>(b.x) * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535 ||
      b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024)
    return set_error(cudaErrorInvalidConfiguration);
  const std::size_t shared = config->dynamicSmemBytes;
  if (shared > kDefaultShared) {
    std::lock_guard lock(g_handles_mutex);
    auto it = g_max_dynamic_shared.find(kernel);
    if (it == g_max_dynamic_shared.end() || shared > static_cast<std::size_t>(it->second))
      return set_error(cudaErrorInvalidValue);
  }
  const std::uint64_t index = g_launches.fetch_add(1);
  Grid grid{g,
            b,
            shared,
            kernel,
            std::move(call),
            settings().seed * 0x9e3779b97f4a7c15ull + index * 0xbf58476d1ce4e5b9ull};
  stream->enqueue([grid, device] {
    if (device_error(device) == cudaSuccess) run_grid(grid, device);
  });
  return cudaSuccess;
}

cudaError_t enqueue(cudaStream_t handle, std::function<void()> work) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  const int device = stream->device();
  if (cudaError_t rc = device_error(device)) return set_error(rc);
  stream->enqueue([work = std::move(work), device] {
    if (device_error(device) == cudaSuccess) work();
  });
  return cudaSuccess;
}

bool is_device_range(const void* pointer, std::size_t bytes) {
  return device_range(pointer, bytes);
}

cudaError_t reject(cudaError_t error, const char* why) {
  explain(why);
  return set_error(error);
}

}  // namespace detail
}  // namespace ted_emu

using namespace ted_emu;

// ---- errors and versions -----------------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorAssert:
      return "cudaErrorAssert";
    case cudaErrorIllegalInstruction:
      return "cudaErrorIllegalInstruction";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorDevicesUnavailable:
      return "cudaErrorDevicesUnavailable";
    case cudaErrorUnknown:
      return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorDevicesUnavailable:
      return "CUDA-capable device(s) is/are busy or unavailable";
    default:
      return cudaGetErrorName(error);
  }
}

cudaError_t cudaGetLastError() {
  cudaError_t error = tls_last_error;
  tls_last_error = cudaSuccess;
  if (error == cudaSuccess && valid_device(tls_device)) error = device_error(tls_device);
  return error;
}

cudaError_t cudaPeekAtLastError() {
  if (tls_last_error != cudaSuccess) return tls_last_error;
  return valid_device(tls_device) ? device_error(tls_device) : cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return set_error(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

// 0 without a driver, as CUDA's (TED_EMU_DRIVER sets it).
cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return set_error(cudaErrorInvalidValue);
  *version = settings().driver_version;
  return cudaSuccess;
}

// ---- devices ----------------------------------------------------------------------------------
// Without a driver, or with one older than the runtime, the runtime answers
// cudaErrorInsufficientDriver (it cannot tell the two apart; cudaDriverGetVersion can).
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_error(cudaErrorInvalidValue);
  if (settings().driver_version < kRuntimeVersion) {
    *count = 0;
    return set_error(cudaErrorInsufficientDriver);
  }
  *count = static_cast<int>(devices().size());
  return *count ? cudaSuccess : set_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (settings().driver_version < kRuntimeVersion) return set_error(cudaErrorInsufficientDriver);
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  if (cudaError_t rc = open_device(device)) return set_error(rc);
  tls_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_error(cudaErrorInvalidValue);
  if (devices().empty()) return set_error(cudaErrorNoDevice);
  *device = tls_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!p) return set_error(cudaErrorInvalidValue);
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "emulated GPU (H100 limits, runs on the CPU)");
  const std::string key = uuid_text(device);
  const std::size_t h1 = std::hash<std::string>{}(key), h2 = std::hash<std::string>{}(key + "#");
  std::memcpy(p->uuid.bytes, &h1, 8);
  std::memcpy(p->uuid.bytes + 8, &h2, 8);
  p->totalGlobalMem = settings().memory_bytes;
  p->sharedMemPerBlock = kDefaultShared;
  p->sharedMemPerBlockOptin = kMaxDynamicShared;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->multiProcessorCount = 132;
  p->major = 9;
  p->minor = 0;
  p->pciBusID = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  cudaDeviceProp p;
  if (!value) return set_error(cudaErrorInvalidValue);
  if (cudaError_t rc = cudaGetDeviceProperties(&p, device)) return rc;
  switch (attribute) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxGridDimY:
      *value = p.maxGridSize[1];
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = p.maxGridSize[2];
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeMode:
      *value = settings().compute_mode;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(p.sharedMemPerBlockOptin);
      break;
    default:
      return set_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (cudaError_t rc = context()) return set_error(rc);
  const int device = tls_device;
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  std::vector<Stream*> streams;
  {
    std::lock_guard lock(g_handles_mutex);
    for (CUstream_st* s : g_streams)
      if (s->stream->device() == device) streams.push_back(s->stream.get());
  }
  if (Stream* s = stream_of(nullptr)) streams.push_back(s);
  for (Stream* s : streams) s->synchronize();
  settle_pool(device);
  return set_error(device_error(device));
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!free || !total) return set_error(cudaErrorInvalidValue);
  if (!valid_device(tls_device)) return set_error(cudaErrorNoDevice);
  DeviceState& d = device_state(tls_device);
  std::lock_guard lock(d.mutex);
  *total = settings().memory_bytes;
  *free = *total - std::min(*total, d.used + d.cached);
  return cudaSuccess;
}

// ---- streams and events -------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream) return set_error(cudaErrorInvalidValue);
  if (!valid_device(tls_device)) return set_error(cudaErrorNoDevice);
  if (cudaError_t rc = open_device(tls_device)) return set_error(rc);
  auto* handle = new CUstream_st{std::make_unique<Stream>(tls_device, flags)};
  std::lock_guard lock(g_handles_mutex);
  g_streams.insert(handle);
  *stream = handle;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (cudaError_t rc = context()) return set_error(rc);
  {
    std::lock_guard lock(g_handles_mutex);
    if (!stream || !g_streams.erase(stream)) return set_error(cudaErrorInvalidResourceHandle);
  }
  delete stream;  // its thread finishes the queued work first
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  stream->synchronize();
  settle_pool(stream->device());
  return set_error(device_error(stream->device()));
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t rc = device_error(stream->device())) return set_error(rc);
  return stream->idle() ? cudaSuccess : cudaErrorNotReady;
}

namespace {
std::shared_ptr<CUevent_st> find_event(cudaEvent_t event) {
  std::lock_guard lock(g_handles_mutex);
  auto it = g_events.find(event);
  return it == g_events.end() ? nullptr : it->second;
}
}  // namespace

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned int) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  auto e = find_event(event);
  if (!stream || !e) return set_error(cudaErrorInvalidResourceHandle);
  std::uint64_t target;
  {
    std::lock_guard lock(e->mutex);
    target = e->recorded;
  }
  if (target == 0) return cudaSuccess;  // never recorded: nothing to wait for
  stream->enqueue([e, target] {
    std::unique_lock lock(e->mutex);
    e->changed.wait(lock, [&] { return e->completed >= target; });
  });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t fn, void* user_data) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (!fn) return set_error(cudaErrorInvalidValue);
  stream->enqueue([fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!event) return set_error(cudaErrorInvalidValue);
  auto e = std::make_shared<CUevent_st>();
  e->flags = flags;
  std::lock_guard lock(g_handles_mutex);
  g_events[e.get()] = e;
  *event = e.get();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (cudaError_t rc = context()) return set_error(rc);
  std::lock_guard lock(g_handles_mutex);
  // Work that still refers to it keeps it alive until it has run (CUDA releases it then).
  return g_events.erase(event) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  auto e = find_event(event);
  if (!stream || !e) return set_error(cudaErrorInvalidResourceHandle);
  std::uint64_t generation;
  {
    std::lock_guard lock(e->mutex);
    generation = ++e->recorded;
  }
  stream->enqueue([e, generation] {
    {
      std::lock_guard lock(e->mutex);
      e->completed = std::max(e->completed, generation);
      e->when = std::chrono::steady_clock::now();
    }
    e->changed.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cudaError_t rc = context()) return set_error(rc);
  auto e = find_event(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  std::unique_lock lock(e->mutex);
  const std::uint64_t target = e->recorded;
  e->changed.wait(lock, [&] { return e->completed >= target; });
  lock.unlock();
  settle_pool(tls_device);
  return set_error(valid_device(tls_device) ? device_error(tls_device) : cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (cudaError_t rc = context()) return set_error(rc);
  auto e = find_event(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(e->mutex);
  return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (cudaError_t rc = context()) return set_error(rc);
  auto a = find_event(start), b = find_event(end);
  if (!ms || !a || !b) return set_error(cudaErrorInvalidValue);
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return set_error(cudaErrorInvalidResourceHandle);
  std::scoped_lock lock(a->mutex, b->mutex);
  if (!a->recorded || !b->recorded) return set_error(cudaErrorInvalidResourceHandle);
  if (a->completed < a->recorded || b->completed < b->recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}

// ---- memory -----------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  if (cudaError_t rc = context()) return set_error(rc);
  return set_error(allocate(pointer, bytes, tls_device, false));
}

cudaError_t cudaFree(void* pointer) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!pointer) return cudaSuccess;
  int device = -1;
  if (!device_range(pointer, 1, &device)) return set_error(cudaErrorInvalidValue);
  cudaDeviceSynchronize();  // cudaFree waits for the device, as the real one does
  release(pointer);
  return set_error(device_error(device));
}

cudaError_t cudaMallocAsync(void** pointer, std::size_t bytes, cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  return set_error(allocate(pointer, bytes, stream->device(), true));
}

cudaError_t cudaFreeAsync(void* pointer, cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (!pointer) return cudaSuccess;
  if (!device_range(pointer, 1)) {
    explain("cudaFreeAsync of a pointer that is not a live device allocation");
    return set_error(cudaErrorInvalidValue);
  }
  stream->enqueue([pointer] { release(pointer); });
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, std::size_t bytes) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!pointer) return set_error(cudaErrorInvalidValue);
  char* base = new_block(round_up(bytes));
  if (!base) return set_error(cudaErrorMemoryAllocation);
  arm(base, bytes, round_up(bytes));
  register_allocation(base, bytes, round_up(bytes), -1, false);
  g_pinned_allocations.fetch_add(1);
  *pointer = user_of(base);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, std::size_t bytes, unsigned int) {
  return cudaMallocHost(pointer, bytes);
}

cudaError_t cudaFreeHost(void* pointer) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!pointer) return cudaSuccess;
  {
    std::lock_guard lock(g_memory_mutex);
    auto it = g_allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
    if (it == g_allocations.end() || it->second.device != -1)
      return set_error(cudaErrorInvalidValue);
    g_allocations.erase(it);
  }
  std::free(base_of(pointer));
  g_pinned_frees.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (!pool) return set_error(cudaErrorInvalidValue);
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  *pool = &device_state(device).pool_handle;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  if (!pool || !value || !valid_device(pool->device)) return set_error(cudaErrorInvalidValue);
  DeviceState& d = device_state(pool->device);
  std::lock_guard lock(d.mutex);
  if (attribute == cudaMemPoolAttrReleaseThreshold) {
    d.release_threshold = *static_cast<std::uint64_t*>(value);
    return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attribute, void* value) {
  if (!pool || !value || !valid_device(pool->device)) return set_error(cudaErrorInvalidValue);
  DeviceState& d = device_state(pool->device);
  std::lock_guard lock(d.mutex);
  auto* out = static_cast<std::uint64_t*>(value);
  switch (attribute) {
    case cudaMemPoolAttrReleaseThreshold:
      *out = d.release_threshold;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent:
      *out = d.used + d.cached;
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemCurrent:
      *out = d.used;
      return cudaSuccess;
    default:
      return set_error(cudaErrorInvalidValue);
  }
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, std::size_t keep_bytes) {
  if (!pool || !valid_device(pool->device)) return set_error(cudaErrorInvalidValue);
  trim_pool(pool->device, keep_bytes);
  return cudaSuccess;
}

// ---- copies and fills -------------------------------------------------------------------------
namespace {

// Queues a copy of `rows` rows; the host side's rules as in the file's comment.
cudaError_t queue_copy(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                       std::size_t width, std::size_t rows, cudaMemcpyKind kind,
                       cudaStream_t handle) {
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t rc = device_error(stream->device())) return set_error(rc);
  if (!width || !rows) return cudaSuccess;
  if (!dst || !src || dst_pitch < width || src_pitch < width)
    return set_error(cudaErrorInvalidValue);
  Side dst_side, src_side;
  const std::size_t dst_extent = (rows - 1) * dst_pitch + width;
  const std::size_t src_extent = (rows - 1) * src_pitch + width;
  if (cudaError_t rc = check_copy(dst, dst_extent, src, src_extent, kind, &dst_side, &src_side))
    return set_error(rc);
  auto copy_rows = [=](const void* from) {
    for (std::size_t r = 0; r < rows; ++r)
      std::memmove(static_cast<char*>(dst) + r * dst_pitch,
                   static_cast<const char*>(from) + r * src_pitch, width);
  };
  // A copy the host could touch too early (to or from pinned memory) is held back.
  const bool host_visible = dst_side == Side::pinned || src_side == Side::pinned;
  if (src_side == Side::host) {
    // Pageable source: read now, so the caller may reuse it at once.
    auto snapshot = std::make_shared<std::vector<char>>(src_extent);
    std::memcpy(snapshot->data(), src, src_extent);
    stream->enqueue([copy_rows, snapshot] { copy_rows(snapshot->data()); }, host_visible);
  } else {
    if (dst_side == Side::pinned) std::memset(dst, 0xff, dst_extent);  // not there yet
    stream->enqueue([copy_rows, src] { copy_rows(src); }, host_visible);
  }
  // A download to pageable memory returns once it has arrived.
  if (dst_side == Side::host && src_side != Side::host) {
    stream->synchronize();
    return set_error(device_error(stream->device()));
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (cudaError_t rc = queue_copy(dst, bytes, src, bytes, bytes, 1, kind, nullptr)) return rc;
  return cudaDeviceSynchronize();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (cudaError_t rc = context()) return set_error(rc);
  return queue_copy(dst, bytes, src, bytes, bytes, 1, kind, stream);
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src,
                              std::size_t src_pitch, std::size_t width, std::size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (cudaError_t rc = context()) return set_error(rc);
  return queue_copy(dst, dst_pitch, src, src_pitch, width, height, kind, stream);
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (!bytes) return cudaSuccess;
  if (!device_range(pointer, bytes)) {
    explain("cudaMemsetAsync of " + std::to_string(bytes) +
            " bytes outside a live device allocation");
    return set_error(cudaErrorInvalidValue);
  }
  stream->enqueue([pointer, value, bytes] { std::memset(pointer, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  if (cudaError_t rc = cudaMemsetAsync(pointer, value, bytes, nullptr)) return rc;
  return cudaDeviceSynchronize();
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!kernel) return set_error(cudaErrorInvalidValue);
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<std::size_t>(value) > kMaxDynamicShared)
      return set_error(cudaErrorInvalidValue);
    std::lock_guard lock(g_handles_mutex);
    g_max_dynamic_shared[kernel] = value;
    return cudaSuccess;
  }
  if (attribute == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return set_error(cudaErrorInvalidValue);
}
