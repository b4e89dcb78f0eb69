// Where the elements of a parameter shard sit in the whole tensor: a plain struct and one
// TED_HOST_DEVICE function, so the CPU and a GPU kernel initialise a shard with the same keys
// (an element's initial value is keyed by its index in the whole tensor, docs/algorithm.md section
// 2). Up to kMaxDims dimensions, each whole or cut into up to kMaxSegments segments (start, length)
// of the full dimension; elements are row-major, the last dimension fastest. A model type
// (namespace ted::model) kept in core because the kernel table (backend/ops.hpp) takes it.
#pragma once

#include <cstdint>

#include "ted/core/host_device.hpp"

namespace ted::model {

struct SliceMap {
  static constexpr int kMaxDims = 4;
  static constexpr int kMaxSegments = 4;
  int dims = 0;
  bool sliced = false;          // false: local index = global index
  int shape[kMaxDims] = {};     // the whole tensor
  int local[kMaxDims] = {};     // the shard held here
  int segments[kMaxDims] = {};  // 0: the whole dimension
  int start[kMaxDims][kMaxSegments] = {};
  int length[kMaxDims][kMaxSegments] = {};
};

// Index in the whole tensor of local element i.
TED_HOST_DEVICE inline std::uint64_t global_index(const SliceMap& map, std::uint64_t i) {
  if (!map.sliced) return i;
  int coordinate[SliceMap::kMaxDims] = {};
  std::uint64_t rest = i;
  for (int d = map.dims - 1; d >= 0; --d) {
    const auto extent = static_cast<std::uint64_t>(map.local[d]);
    coordinate[d] = static_cast<int>(rest % extent);
    rest /= extent;
  }
  std::uint64_t global = 0;
  for (int d = 0; d < map.dims; ++d) {
    int c = coordinate[d];
    for (int s = 0; s < map.segments[d]; ++s) {
      if (c < map.length[d][s]) {
        c += map.start[d][s];
        break;
      }
      c -= map.length[d][s];
    }
    global = global * static_cast<std::uint64_t>(map.shape[d]) + static_cast<std::uint64_t>(c);
  }
  return global;
}

}  // namespace ted::model
