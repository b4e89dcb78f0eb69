#include "ted/core/units.hpp"
#include "ted/device/cuda_check.hpp"
#include "ted/device/cuda_device.hpp"
#include "ted/kernels/cuda/launch.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ted::cuda {
namespace {

using kernels::cuda::launch;

template <typename T>
__global__ void fill_kernel(T* data, std::size_t count, T value) {
  std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride)
    data[i] = value;
}

template <typename T>
void launch_fill(void* data, std::size_t count, T value, cudaStream_t stream) {
  constexpr int threads = 256;
  std::size_t blocks = (count + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  launch<fill_kernel<T>>(static_cast<unsigned>(blocks), threads, 0, stream, static_cast<T*>(data),
                         count, value);
}

// Gives the memory the device's pool keeps (freed, not returned) back to the GPU: what
// cudaMalloc-based allocations (cuBLAS's workspace, NCCL's buffers) and the free-memory check
// of the next run need. Live allocations are untouched.
void trim_pool(int ordinal) {
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
}

// The memory a device's pool leaves to the libraries: what they allocate later with cudaMalloc,
// outside the pool (NCCL's connections to its peers at a communicator's first collective, the
// memory cuBLAS, cuBLASLt and cuDNN take when they start). TED_POOL_HEADROOM sets it (bytes,
// "512M", "2G"); by default 1 GiB, at most an eighth of the GPU's memory.
std::uint64_t pool_headroom(std::size_t total) {
  if (const char* text = std::getenv("TED_POOL_HEADROOM"))
    return parse_bytes(text, "TED_POOL_HEADROOM");
  const std::uint64_t gib = std::uint64_t{1} << 30;
  return std::min<std::uint64_t>(gib, total / 8);
}

// Memory is stream-ordered (cudaMallocAsync / cudaFreeAsync on the device's stream) from the
// device's pool, which keeps freed blocks instead of returning them to the driver: a training
// step frees and allocates the same sizes again, and neither call synchronises. The pool keeps
// (its release threshold) all of the GPU's memory but the headroom above: past that, a
// synchronisation gives freed memory back, so a library's later cudaMalloc finds it. Before the
// libraries allocate, the pool is also trimmed outright (release_cached_memory).
class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal) : ordinal_(ordinal) {
    TED_CHECK_CUDA(cudaSetDevice(ordinal_));
    TED_CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cudaMemPool_t pool = nullptr;
    TED_CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, ordinal_));
    std::size_t free = 0, total = 0;
    TED_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    const std::uint64_t headroom = pool_headroom(total);
    std::uint64_t keep = total > headroom ? total - headroom : 0;
    TED_CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  }
  ~CudaDevice() override {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    trim_pool(ordinal_);  // a sweep's next point starts with the memory this one freed
  }

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, ordinal_) != cudaSuccess) return "cuda";
    return std::string("cuda:") + std::to_string(ordinal_) + " " + properties.name;
  }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* pointer = nullptr;
    cudaError_t rc = cudaMallocAsync(&pointer, bytes, stream_);
    if (rc != cudaSuccess) {
      cudaGetLastError();
      const std::string text = "cannot allocate " + std::to_string(bytes) + " bytes on " + name() +
                               ": " + cudaGetErrorString(rc);
      if (rc == cudaErrorMemoryAllocation) throw OutOfMemory(text);
      throw Error(text);
    }
    return pointer;
  }
  void deallocate(void* pointer) override {
    if (pointer) cudaFreeAsync(pointer, stream_);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes || dst == src) return;
    TED_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t row_bytes, std::size_t rows) override {
    if (!row_bytes || !rows) return;
    TED_CHECK_CUDA(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                     cudaMemcpyDeviceToDevice, stream_));
  }
  std::uint64_t free_bytes() override {
    std::size_t free = 0, total = 0;
    TED_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    return free;
  }
  void* allocate_host(std::size_t bytes) override {
    if (!bytes) return nullptr;
    void* pointer = nullptr;
    TED_CHECK_CUDA(cudaMallocHost(&pointer, bytes));
    return pointer;
  }
  void deallocate_host(void* pointer) override {
    if (pointer) cudaFreeHost(pointer);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    TED_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    TED_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (!bytes) return;
    TED_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    TED_CHECK_CUDA(cudaStreamSynchronize(stream_));
  }
  void fill(void* dst, std::size_t count, DataType dtype, double value) override {
    if (!count) return;
    if (value == 0.0) {  // zero is all-zero bits in every type: the copy engine's memset
      TED_CHECK_CUDA(cudaMemsetAsync(dst, 0, count * dtype_size(dtype), stream_));
      return;
    }
    float as_float = static_cast<float>(value);
    switch (dtype) {
      case DataType::f32:
        launch_fill<float>(dst, count, as_float, stream_);
        break;
      case DataType::f64:
        launch_fill<double>(dst, count, value, stream_);
        break;
      case DataType::f16:
        launch_fill<std::uint16_t>(dst, count, float_to_f16_bits(as_float), stream_);
        break;
      case DataType::bf16:
        launch_fill<std::uint16_t>(dst, count, float_to_bf16_bits(as_float), stream_);
        break;
      case DataType::i32:
        launch_fill<std::int32_t>(dst, count, static_cast<std::int32_t>(value), stream_);
        break;
      case DataType::i64:
        launch_fill<std::int64_t>(dst, count, static_cast<std::int64_t>(value), stream_);
        break;
      case DataType::u8:
        launch_fill<std::uint8_t>(dst, count, static_cast<std::uint8_t>(value), stream_);
        break;
    }
  }
  void synchronize() override { TED_CHECK_CUDA(cudaStreamSynchronize(stream_)); }

  cudaStream_t stream() const { return stream_; }
  int ordinal() const { return ordinal_; }

 private:
  int ordinal_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

// "13.0" for CUDA's 13000.
std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

int device_count() {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaSuccess) return count;
  cudaGetLastError();  // clear the sticky error
  if (rc == cudaErrorNoDevice) return 0;
  // The runtime answers cudaErrorInsufficientDriver both where no driver is installed (a build
  // machine: no GPU, a skip) and where the driver is older than the runtime (a GPU this build
  // cannot use: an error). The driver's version tells them apart: 0 means none.
  int driver = 0, runtime = 0;
  if (rc == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
      driver == 0)
    return 0;
  std::string detail = std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")";
  if (rc == cudaErrorInsufficientDriver && cudaRuntimeGetVersion(&runtime) == cudaSuccess)
    detail += ": the driver supports CUDA " + cuda_version_text(driver) + ", this build needs " +
              cuda_version_text(runtime);
  throw UnusableGpu("the CUDA runtime cannot use this machine's GPUs: cudaGetDeviceCount: " +
                    detail);
}

std::unique_ptr<Device> make_cuda_device(int ordinal) {
  return std::make_unique<CudaDevice>(ordinal);
}

GpuIdentity gpu_identity(int ordinal) {
  cudaDeviceProp properties{};
  TED_CHECK_CUDA(cudaGetDeviceProperties(&properties, ordinal));
  static const char* digits = "0123456789abcdef";
  GpuIdentity identity;
  for (unsigned char byte : properties.uuid.bytes) {
    identity.uuid += digits[byte >> 4];
    identity.uuid += digits[byte & 15];
  }
  identity.name = properties.name;
  int mode = cudaComputeModeDefault;  // an attribute: CUDA 13's cudaDeviceProp has no computeMode
  TED_CHECK_CUDA(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, ordinal));
  identity.exclusive_process = mode == cudaComputeModeExclusiveProcess;
  return identity;
}

void release_cached_memory(Device& device) {
  auto* cuda_device = dynamic_cast<CudaDevice*>(&device.base());
  TED_CHECK(cuda_device != nullptr,
            "release_cached_memory needs a CUDA device, got " + device.name());
  device.synchronize();  // frees queued on the stream have happened
  trim_pool(cuda_device->ordinal());
}

cudaStream_t stream_of(Device& device) {
  auto* cuda_device = dynamic_cast<CudaDevice*>(&device.base());
  TED_CHECK(cuda_device != nullptr, "stream_of needs a CUDA device, got " + device.name());
  return cuda_device->stream();
}

}  // namespace ted::cuda
