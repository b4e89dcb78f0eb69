// The emulated GPU's cuda_bf16.h: the type exists; see cuda_fp16.h.
#pragma once

#include <cstdint>

struct __nv_bfloat16 {
  std::uint16_t __x;
};
