#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "ted/core/error.hpp"
#include "ted/core/system.hpp"
#include "ted/device/device.hpp"

namespace ted {
namespace {

// Host memory with a cache of freed blocks by size: a training step frees and allocates the
// same sizes again, and handing them back to the OS (large blocks are mmap'ed) would make the
// kernel zero fresh pages every step.
class CpuDevice final : public Device {
 public:
  ~CpuDevice() override {
    for (auto& [bytes, blocks] : cache_)
      for (void* block : blocks) std::free(block);
  }

  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    std::size_t rounded = (bytes + 63) / 64 * 64;  // whole cache lines, for vector kernels
    void* pointer = nullptr;
    auto cached = cache_.find(rounded);
    if (cached != cache_.end() && !cached->second.empty()) {
      pointer = cached->second.back();
      cached->second.pop_back();
    } else {
      pointer = std::aligned_alloc(64, rounded);
      if (!pointer)
        throw OutOfMemory("cannot allocate " + std::to_string(bytes) + " bytes of host memory");
    }
    sizes_[pointer] = rounded;
    return pointer;
  }
  void deallocate(void* pointer) override {
    if (!pointer) return;
    auto it = sizes_.find(pointer);
    TED_CHECK(it != sizes_.end(), "deallocate of memory this device did not allocate");
    cache_[it->second].push_back(pointer);
    sizes_.erase(it);
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
  }
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t row_bytes, std::size_t rows) override {
    if (!row_bytes) return;
    auto* out = static_cast<char*>(dst);
    const auto* in = static_cast<const char*>(src);
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(out + r * dst_pitch, in + r * src_pitch, row_bytes);
  }
  std::uint64_t free_bytes() override { return host_available_bytes(); }
  void* allocate_host(std::size_t bytes) override { return bytes ? std::malloc(bytes) : nullptr; }
  void deallocate_host(void* pointer) override { std::free(pointer); }
  void fill(void* dst, std::size_t count, DataType dtype, double value) override {
    if (count == 0) return;
    if (value == 0.0) {  // +0 is all-zero bits in every type
      std::memset(dst, 0, count * dtype_size(dtype));
      return;
    }
    switch (dtype) {
      case DataType::f32:
        fill_typed(static_cast<float*>(dst), count, float(value));
        return;
      case DataType::f64:
        fill_typed(static_cast<double*>(dst), count, value);
        return;
      default:
        for (std::size_t i = 0; i < count; ++i) store_from_double(dst, dtype, i, value);
    }
  }
  void synchronize() override {}

 private:
  template <typename T>
  static void fill_typed(T* dst, std::size_t count, T value) {
    for (std::size_t i = 0; i < count; ++i) dst[i] = value;
  }
  std::unordered_map<std::size_t, std::vector<void*>> cache_;
  std::unordered_map<void*, std::size_t> sizes_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() {
  return std::make_unique<CpuDevice>();
}

}  // namespace ted
