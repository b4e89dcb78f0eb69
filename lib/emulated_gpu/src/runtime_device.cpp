// The emulated GPU's runtime, its devices: the settings (TED_EMU_*), errors (the thread's last
// error, a device's sticky one), the devices and the contexts a process makes on them (with
// exclusive-process mode as the driver has it), and the CUDA calls about them: errors and
// versions, the device count, selection, properties and attributes, device synchronisation.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime_state.hpp"

// ---- settings ----------------------------------------------------------------------------------
namespace ted_emu {
namespace {

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

}  // namespace

const Settings& settings() {
  static const Settings s = load_settings();
  return s;
}

void explain(const std::string& what) {
  std::fprintf(stderr, "ted-emulated-gpu: %s\n", what.c_str());
  std::fflush(stderr);
}

// ---- errors and versions
// -------------------------------------------------------------------------
namespace {
thread_local cudaError_t tls_last_error = cudaSuccess;
}  // namespace

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

}  // namespace ted_emu

using namespace ted_emu;

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

// ---- devices -----------------------------------------------------------------------------------
namespace ted_emu {
namespace {

std::string uuid_text(int device) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string key = std::string(host) + "/" + std::to_string(device);
  if (!settings().shared_gpus) key += "/" + std::to_string(getpid());
  return key;
}

}  // namespace

constinit thread_local int tls_device = 0;

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
static thread_local int tls_context = -1;  // the device of this thread's current context
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

int current_device() {
  return tls_device;
}

}  // namespace ted_emu

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
