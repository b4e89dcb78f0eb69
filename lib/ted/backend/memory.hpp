// Memory accounting: a device that wraps another (the CPU or a GPU) and keeps current and peak
// bytes per category. Code says what it is allocating with a MemoryScope (a no-op on an untracked
// device), so the model and optimizer stay the same on every backend.
#pragma once

#include <array>
#include <cstddef>
#include <string_view>
#include <unordered_map>

#include "ted/device/device.hpp"

namespace ted {

enum class MemoryCategory {
  parameters,
  gradients,
  optimizer_state,
  activations,  // the default
  communication,
  cac_stash,
  optimizer_temporaries,
};
inline constexpr std::size_t kMemoryCategoryCount = 7;
std::string_view to_string(MemoryCategory category);

struct MemoryUsage {
  std::size_t current = 0;
  std::size_t peak = 0;
};

class TrackingDevice final : public Device {
 public:
  explicit TrackingDevice(Device& inner) : inner_(inner) {}
  ~TrackingDevice() override = default;

  DeviceKind kind() const override { return inner_.kind(); }
  std::string name() const override { return inner_.name(); }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy_to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    inner_.copy(dst, src, bytes);
  }
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t row_bytes, std::size_t rows) override {
    inner_.copy_2d(dst, dst_pitch, src, src_pitch, row_bytes, rows);
  }
  void fill(void* dst, std::size_t count, DataType dtype, double value) override {
    inner_.fill(dst, count, dtype, value);
  }
  void synchronize() override { inner_.synchronize(); }
  void* allocate_host(std::size_t bytes) override { return inner_.allocate_host(bytes); }
  void deallocate_host(void* pointer) override { inner_.deallocate_host(pointer); }
  std::uint64_t free_bytes() override { return inner_.free_bytes(); }
  Device& base() override { return inner_.base(); }

  MemoryCategory category() const { return category_; }
  void set_category(MemoryCategory category) { category_ = category; }
  const MemoryUsage& usage(MemoryCategory category) const {
    return usage_[static_cast<std::size_t>(category)];
  }
  const MemoryUsage& total() const { return total_; }
  void reset_peaks();  // peaks := current

 private:
  Device& inner_;
  MemoryCategory category_ = MemoryCategory::activations;
  std::array<MemoryUsage, kMemoryCategoryCount> usage_{};
  MemoryUsage total_;
  std::unordered_map<void*, std::pair<std::size_t, MemoryCategory>> live_;
};

// Sets the category of a tracking device's allocations for the scope's lifetime.
class MemoryScope {
 public:
  MemoryScope(Device& device, MemoryCategory category);
  ~MemoryScope();
  MemoryScope(const MemoryScope&) = delete;
  MemoryScope& operator=(const MemoryScope&) = delete;

 private:
  TrackingDevice* tracker_;
  MemoryCategory previous_ = MemoryCategory::activations;
};

}  // namespace ted
