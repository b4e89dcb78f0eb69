// The emulated GPU's cuda_fp16.h: the type exists; the suite converts 16-bit values with its
// own TED_HOST_DEVICE functions (core/dtype.hpp), so no arithmetic is defined here.
#pragma once

#include <cstdint>

struct __half {
  std::uint16_t __x;
};
