#include <cstdlib>
#include <cstring>

#include "ted/backend/device.hpp"
#include "ted/core/error.hpp"

namespace ted {
namespace {

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }

  void* allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    // 64-byte alignment: whole cache lines, and what vectorised kernels want.
    std::size_t rounded = (bytes + 63) / 64 * 64;
    void* pointer = std::aligned_alloc(64, rounded);
    if (!pointer) throw Error("host allocation of " + std::to_string(bytes) + " bytes failed");
    return pointer;
  }
  void deallocate(void* pointer) override { std::free(pointer); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void fill(void* dst, std::size_t count, DataType dtype, double value) override {
    for (std::size_t i = 0; i < count; ++i) store_from_double(dst, dtype, i, value);
  }
  void synchronize() override {}
};

}  // namespace

std::unique_ptr<Device> make_cpu_device() {
  return std::make_unique<CpuDevice>();
}

}  // namespace ted
