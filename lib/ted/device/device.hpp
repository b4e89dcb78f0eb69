// The narrow device line: where buffers live and how bytes move between them and the host.
// The CPU device is plain host memory; the CUDA device is one GPU with its own stream.
// Model and communication code sees only this interface (docs/backends.md); the devices
// themselves are the backends' (backend/cpu_device.cpp, backend/cuda/cuda_device.cu).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ted/core/dtype.hpp"

namespace ted {

enum class DeviceKind { cpu, cuda };
inline std::string_view to_string(DeviceKind kind) {
  return kind == DeviceKind::cpu ? "cpu" : "cuda";
}

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;

  // nullptr for 0 bytes; ted::OutOfMemory naming the bytes when the memory is not there.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer) = 0;
  // Host <-> device copies return when the data has arrived (they wait for queued work).
  virtual void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) = 0;
  // Device -> device copies, queued in order with the device's other work. copy_2d moves `rows`
  // rows of `row_bytes` bytes, row i from src + i * src_pitch to dst + i * dst_pitch (bytes):
  // the capacity slices of DTD and the tensor-rank blocks of its gathers.
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                       std::size_t row_bytes, std::size_t rows) = 0;
  // Sets `count` elements of `dtype` to `value` (rounded to the type).
  virtual void fill(void* device_dst, std::size_t count, DataType dtype, double value) = 0;
  // Waits until all work queued on this device has finished.
  virtual void synchronize() = 0;
  // Host memory this device copies to and from fastest (pinned on a GPU): the staging buffers
  // of a host-staged communicator.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* pointer) = 0;
  // Bytes this device could still allocate (host: MemAvailable; GPU: free memory), for the
  // check before a run that its projected peak fits.
  virtual std::uint64_t free_bytes() = 0;
  // The device under any wrapper (a TrackingDevice): what a backend asks for its stream.
  virtual Device& base() { return *this; }
};

// Owns `bytes` bytes on a device; moves, never copies.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& device, std::size_t bytes)
      : device_(&device), data_(device.allocate(bytes)), bytes_(bytes) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (device_ && data_) device_->deallocate(data_);
  }

  void* data() { return data_; }
  const void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& other) noexcept {
    std::swap(device_, other.device_);
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
  }
  Device* device_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

std::unique_ptr<Device> make_cpu_device();

}  // namespace ted
