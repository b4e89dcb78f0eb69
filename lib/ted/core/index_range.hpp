// Elements [begin, end) of a buffer: what reductions over parts of the flat parameter buffers
// take (plain C++17, so the CUDA sources include it too).
#pragma once

#include <cstddef>

namespace ted {

struct IndexRange {
  std::size_t begin = 0;
  std::size_t end = 0;
};

}  // namespace ted
