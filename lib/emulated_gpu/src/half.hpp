// 16-bit float bits to and from fp32, as a GPU converts: round to nearest even, NaN kept NaN,
// fp16 overflow to infinity, fp16 subnormals. (The suite has its own copy in core/dtype.hpp;
// the emulator stands apart from the code it runs.)
#pragma once

#include <cstdint>
#include <cstring>

namespace ted_emu {

inline float f16_to_float(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu, mantissa = bits & 0x3ffu;
  std::uint32_t word;
  if (exponent == 0x1f) {
    word = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  } else {
    word = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  }
  float v;
  std::memcpy(&v, &word, 4);
  return v;
}

inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
  float v;
  std::memcpy(&v, &word, 4);
  return v;
}

inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

inline std::uint16_t float_to_f16(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const std::uint32_t sign = (bits >> 16) & 0x8000u, magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    if (magnitude < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t exponent = magnitude >> 23;
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exponent;
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  const std::uint32_t rebased = magnitude - 0x38000000u;
  return static_cast<std::uint16_t>(sign | ((rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13));
}

}  // namespace ted_emu
