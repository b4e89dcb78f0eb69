#include "ted/backend/memory.hpp"

#include <algorithm>

#include "ted/core/error.hpp"

namespace ted {

std::string_view to_string(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::parameters:
      return "parameters";
    case MemoryCategory::gradients:
      return "gradients";
    case MemoryCategory::optimizer_state:
      return "optimizer_state";
    case MemoryCategory::activations:
      return "activations";
    case MemoryCategory::communication:
      return "communication";
    case MemoryCategory::cac_stash:
      return "cac_stash";
    case MemoryCategory::optimizer_temporaries:
      return "optimizer_temporaries";
  }
  return "unknown";
}

void* TrackingDevice::allocate(std::size_t bytes) {
  void* pointer = nullptr;
  try {
    pointer = inner_.allocate(bytes);
  } catch (const OutOfMemory& e) {  // say what the bytes were for
    throw OutOfMemory(std::string(e.what()) + " (" + std::string(to_string(category_)) + ", " +
                      std::to_string(total_.current) + " bytes already held)");
  }
  if (!pointer) return pointer;
  live_[pointer] = {bytes, category_};
  MemoryUsage& usage = usage_[static_cast<std::size_t>(category_)];
  usage.current += bytes;
  usage.peak = std::max(usage.peak, usage.current);
  total_.current += bytes;
  total_.peak = std::max(total_.peak, total_.current);
  return pointer;
}

void TrackingDevice::deallocate(void* pointer) {
  if (!pointer) return;
  auto it = live_.find(pointer);
  TED_CHECK(it != live_.end(), "TrackingDevice: deallocate of an unknown pointer");
  auto [bytes, category] = it->second;
  usage_[static_cast<std::size_t>(category)].current -= bytes;
  total_.current -= bytes;
  live_.erase(it);
  inner_.deallocate(pointer);
}

void TrackingDevice::reset_peaks() {
  for (auto& usage : usage_) usage.peak = usage.current;
  total_.peak = total_.current;
}

MemoryScope::MemoryScope(Device& device, MemoryCategory category)
    : tracker_(dynamic_cast<TrackingDevice*>(&device)) {
  if (!tracker_) return;
  previous_ = tracker_->category();
  tracker_->set_category(category);
}

MemoryScope::~MemoryScope() {
  if (tracker_) tracker_->set_category(previous_);
}

}  // namespace ted
