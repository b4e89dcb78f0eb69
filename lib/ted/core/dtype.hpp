// Element types that buffers and collectives carry, and the 16-bit float conversions.
// The conversions are TED_HOST_DEVICE so CPU reductions and CUDA kernels round the same way
// (round to nearest even, NaN kept NaN, fp16 subnormals handled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "ted/core/host_device.hpp"

namespace ted {

enum class DataType : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

std::size_t dtype_size(DataType dtype);
std::string_view to_string(DataType dtype);
// Accepts the names to_string gives plus the usual aliases (float, double, half, bfloat16,
// int32, int64, uint8). Throws ConfigError naming the accepted values.
DataType parse_dtype(std::string_view name);
// The names runs use for their precisions (run.dtype, training.grad_dtype, the CSVs): fp32,
// fp64, bf16, fp16; the other types by to_string's name.
std::string_view precision_name(DataType dtype);

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DataType value = DataType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DataType value = DataType::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DataType value = DataType::i32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DataType value = DataType::i64;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DataType value = DataType::u8;
};

// Bit patterns of 16-bit floats on the host. Distinct types so a template cannot mix them up.
struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};
template <>
struct dtype_of<Half> {
  static constexpr DataType value = DataType::f16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DataType value = DataType::bf16;
};

TED_HOST_DEVICE inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

TED_HOST_DEVICE inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

TED_HOST_DEVICE inline std::uint16_t float_to_bf16_bits(float value) {
  std::uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  std::uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

TED_HOST_DEVICE inline float bf16_bits_to_float(std::uint16_t bits) {
  return bits_float(static_cast<std::uint32_t>(bits) << 16);
}

TED_HOST_DEVICE inline std::uint16_t float_to_f16_bits(float value) {
  std::uint32_t bits = float_bits(value);
  std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {  // below the smallest normal half, 2^-14: subnormal or zero
    if (magnitude < 0x33000000u) return static_cast<std::uint16_t>(sign);  // < 2^-25 rounds to 0
    std::uint32_t exponent = magnitude >> 23;
    std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    std::uint32_t shift =
        126u - exponent;  // value = mantissa * 2^(exponent - 126) half units (2^-24)
    std::uint32_t half_mantissa = mantissa >> shift;
    std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) ++half_mantissa;
    return static_cast<std::uint16_t>(sign | half_mantissa);
  }
  std::uint32_t rebased = magnitude - 0x38000000u;  // exponent bias 127 -> 15
  std::uint32_t rounding = 0xfffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

TED_HOST_DEVICE inline float f16_bits_to_float(std::uint16_t bits) {
  std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
  std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;  // 2^-24
    return sign ? -value : value;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// The master type of a storage type: what mixed precision keeps weights, gradients and Adam
// state in, and what every kernel computes in. fp32 for fp32, bf16 and fp16; fp64 for fp64
// (the gradient checks).
template <typename T>
struct master_of {
  using type = float;
};
template <>
struct master_of<double> {
  using type = double;
};
template <typename T>
using master_t = typename master_of<T>::type;

// The master-type value of a stored element, and a master-type value rounded into storage
// (round to nearest even): the one place both backends load and store 16-bit elements.
TED_HOST_DEVICE inline float widen(float value) {
  return value;
}
TED_HOST_DEVICE inline double widen(double value) {
  return value;
}
TED_HOST_DEVICE inline float widen(Half value) {
  return f16_bits_to_float(value.bits);
}
TED_HOST_DEVICE inline float widen(BFloat16 value) {
  return bf16_bits_to_float(value.bits);
}
template <typename T>
struct Narrow {
  TED_HOST_DEVICE static T from(master_t<T> value) { return value; }  // float, double
};
template <>
struct Narrow<Half> {
  TED_HOST_DEVICE static Half from(float value) { return Half{float_to_f16_bits(value)}; }
};
template <>
struct Narrow<BFloat16> {
  TED_HOST_DEVICE static BFloat16 from(float value) { return BFloat16{float_to_bf16_bits(value)}; }
};
template <typename T>
TED_HOST_DEVICE inline T narrow(master_t<T> value) {
  return Narrow<T>::from(value);
}

// Value of element i of a buffer as a double, whatever its type (host memory).
double load_as_double(const void* data, DataType dtype, std::size_t i);
// Writes a double into element i, rounding to the type (host memory).
void store_from_double(void* data, DataType dtype, std::size_t i, double value);

}  // namespace ted
