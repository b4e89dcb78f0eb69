// A rank's training state as named host byte blobs: what a checkpoint holds of it (the weights,
// Adam's m and v, the fp32 masters of 16-bit weights, the optimizer's step count, the loss
// scaler) and what restoring it takes back. Every blob is the bytes of one buffer as the device
// holds it, so a restored run continues bit for bit. Writing the blobs to disk is the run
// layer's (run/checkpoint.hpp); this is the trainer's side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ted/core/error.hpp"
#include "ted/device/device.hpp"

namespace ted::train {

struct StateBlob {
  std::string name;
  std::vector<unsigned char> bytes;
};
using TrainState = std::vector<StateBlob>;

// `count` bytes of device memory at `data`, copied into a blob.
inline StateBlob device_blob(Device& device, std::string name, const void* data,
                             std::size_t count) {
  StateBlob blob{std::move(name), std::vector<unsigned char>(count)};
  if (count) device.copy_to_host(blob.bytes.data(), data, count);
  return blob;
}

// A host value's bytes, copied into a blob.
template <typename V>
StateBlob value_blob(std::string name, const V& value) {
  StateBlob blob{std::move(name), std::vector<unsigned char>(sizeof(V))};
  std::memcpy(blob.bytes.data(), &value, sizeof(V));
  return blob;
}

// The blob called `name`, which must hold exactly `count` bytes: ConfigError otherwise (a state
// of another model, layout or precision).
inline const StateBlob& find_blob(const TrainState& state, const std::string& name,
                                  std::size_t count) {
  for (const auto& blob : state) {
    if (blob.name != name) continue;
    if (blob.bytes.size() != count)
      throw ConfigError("checkpoint: '" + name + "' holds " + std::to_string(blob.bytes.size()) +
                        " bytes where this run has " + std::to_string(count) +
                        " (another model, layout or precision)");
    return blob;
  }
  throw ConfigError("checkpoint: no '" + name + "' in this rank's state");
}

inline void restore_device(Device& device, const TrainState& state, const std::string& name,
                           void* data, std::size_t count) {
  const auto& blob = find_blob(state, name, count);
  if (count) device.copy_from_host(data, blob.bytes.data(), count);
}

template <typename V>
void restore_value(const TrainState& state, const std::string& name, V& value) {
  std::memcpy(&value, find_blob(state, name, sizeof(V)).bytes.data(), sizeof(V));
}

}  // namespace ted::train
