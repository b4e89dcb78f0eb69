#include "ted/core/dtype.hpp"

#include <string>

#include "ted/core/error.hpp"

namespace ted {

std::size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return 4;
    case DataType::f64:
      return 8;
    case DataType::f16:
      return 2;
    case DataType::bf16:
      return 2;
    case DataType::i32:
      return 4;
    case DataType::i64:
      return 8;
    case DataType::u8:
      return 1;
  }
  throw Error("dtype_size: unknown DataType");
}

std::string_view to_string(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return "float";
    case DataType::f64:
      return "double";
    case DataType::f16:
      return "half";
    case DataType::bf16:
      return "bfloat16";
    case DataType::i32:
      return "int32";
    case DataType::i64:
      return "int64";
    case DataType::u8:
      return "uint8";
  }
  return "unknown";
}

std::string_view precision_name(DataType dtype) {
  switch (dtype) {
    case DataType::f32:
      return "fp32";
    case DataType::f64:
      return "fp64";
    case DataType::f16:
      return "fp16";
    case DataType::bf16:
      return "bf16";
    default:
      return to_string(dtype);
  }
}

DataType parse_dtype(std::string_view name) {
  if (name == "float" || name == "f32" || name == "fp32" || name == "float32") return DataType::f32;
  if (name == "double" || name == "f64" || name == "fp64" || name == "float64")
    return DataType::f64;
  if (name == "half" || name == "f16" || name == "fp16" || name == "float16") return DataType::f16;
  if (name == "bfloat16" || name == "bf16") return DataType::bf16;
  if (name == "int32" || name == "i32" || name == "int") return DataType::i32;
  if (name == "int64" || name == "i64") return DataType::i64;
  if (name == "uint8" || name == "u8") return DataType::u8;
  throw ConfigError("unknown data type '" + std::string(name) +
                    "' (expected float, double, half, bfloat16, int32, int64 or uint8)");
}

double load_as_double(const void* data, DataType dtype, std::size_t i) {
  switch (dtype) {
    case DataType::f32:
      return static_cast<const float*>(data)[i];
    case DataType::f64:
      return static_cast<const double*>(data)[i];
    case DataType::f16:
      return f16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::bf16:
      return bf16_bits_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::i32:
      return static_cast<const std::int32_t*>(data)[i];
    case DataType::i64:
      return static_cast<double>(static_cast<const std::int64_t*>(data)[i]);
    case DataType::u8:
      return static_cast<const std::uint8_t*>(data)[i];
  }
  return 0.0;
}

void store_from_double(void* data, DataType dtype, std::size_t i, double value) {
  switch (dtype) {
    case DataType::f32:
      static_cast<float*>(data)[i] = static_cast<float>(value);
      return;
    case DataType::f64:
      static_cast<double*>(data)[i] = value;
      return;
    case DataType::f16:
      static_cast<std::uint16_t*>(data)[i] = float_to_f16_bits(static_cast<float>(value));
      return;
    case DataType::bf16:
      static_cast<std::uint16_t*>(data)[i] = float_to_bf16_bits(static_cast<float>(value));
      return;
    case DataType::i32:
      static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(value);
      return;
    case DataType::i64:
      static_cast<std::int64_t*>(data)[i] = static_cast<std::int64_t>(value);
      return;
    case DataType::u8:
      static_cast<std::uint8_t*>(data)[i] = static_cast<std::uint8_t>(value);
      return;
  }
}

}  // namespace ted
