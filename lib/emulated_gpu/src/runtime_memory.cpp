// The emulated GPU's runtime, its memory: device memory of its own, with redzones checked when
// an allocation is freed and fresh memory that reads as NaN; pinned host memory; a pool per
// device (cudaMallocAsync) that keeps freed memory up to its release threshold; and the CUDA
// calls that allocate, free and ask about them. The file comment of runtime_state.hpp says what
// of a GPU is kept, and why.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "runtime_state.hpp"
#include "ted_emu/control.hpp"

namespace ted_emu {
namespace {

constexpr std::size_t kRedzone = 256;  // before and after each device allocation
constexpr unsigned char kRedzoneByte = 0xa5;

std::size_t round_up(std::size_t bytes) {
  return (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
}

struct Allocation {
  std::size_t bytes;     // as asked
  std::size_t capacity;  // usable bytes between the redzones
  int device;            // -1: pinned host memory
  bool pooled;
};

std::mutex g_memory_mutex;
std::map<std::uintptr_t, Allocation> g_allocations;  // by user pointer: live ones only

std::atomic<std::uint64_t> g_device_allocations{0}, g_pinned_allocations{0}, g_pinned_frees{0};

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

}  // namespace

// Which side of the bus `pointer` is on, checking that `bytes` bytes from it fit.
Side side_of(const void* pointer, std::size_t bytes, int* device) {
  std::lock_guard lock(g_memory_mutex);
  std::uintptr_t start = 0;
  const Allocation* a = find_allocation(pointer, &start);
  if (!a) return Side::host;
  if (reinterpret_cast<std::uintptr_t>(pointer) + bytes > start + a->bytes) return Side::bad;
  if (device) *device = a->device;
  return a->device < 0 ? Side::pinned : Side::device;
}

// ---- shared with the other sources ------------------------------------------------------------
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

}  // namespace ted_emu

using namespace ted_emu;

// ---- memory -----------------------------------------------------------------------------------
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
