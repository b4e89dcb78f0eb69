// The emulated GPU's runtime, its launches: a kernel launch is checked against an H100's limits
// (block and grid sizes, dynamic shared memory beyond 48 KiB only where the kernel opted in with
// cudaFuncSetAttribute) and fails with the runtime's errors, else its grid is queued on the
// stream (scheduler.cpp runs it). Also the work the emulator's other libraries queue
// (ted_emu/work.hpp).
#include <memory>
#include <unordered_map>

#include "runtime_state.hpp"
#include "ted_emu/work.hpp"

namespace ted_emu {

std::atomic<std::uint64_t> g_launches{0};

namespace {
std::unordered_map<const void*, int> g_max_dynamic_shared;  // under g_handles_mutex
}  // namespace

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
