// 16-bit float conversions (shared by the MPI reductions and the CUDA kernels) and dtype names.
#include "catch.hpp"

#include <cmath>
#include <cstdint>

#include "ted/core/dtype.hpp"
#include "ted/core/error.hpp"

TEST_CASE("fp16: every finite half survives half -> float -> half") {
  int checked = 0;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    auto half = static_cast<std::uint16_t>(bits);
    float value = ted::f16_bits_to_float(half);
    if (std::isnan(value)) {
      REQUIRE(std::isnan(ted::f16_bits_to_float(ted::float_to_f16_bits(value))));
      continue;
    }
    REQUIRE(ted::float_to_f16_bits(value) == half);
    ++checked;
  }
  CHECK(checked == 65536 - 2 * 1023);  // all but the NaNs
}

TEST_CASE("fp16: known values, rounding to nearest even, overflow and subnormals") {
  CHECK(ted::float_to_f16_bits(1.0f) == 0x3c00);
  CHECK(ted::float_to_f16_bits(-2.0f) == 0xc000);
  CHECK(ted::float_to_f16_bits(65504.0f) == 0x7bff);
  CHECK(ted::float_to_f16_bits(65519.0f) == 0x7bff);  // below the halfway point to 65536
  CHECK(ted::float_to_f16_bits(65520.0f) == 0x7c00);  // halfway, ties to even -> infinity
  CHECK(ted::float_to_f16_bits(1e6f) == 0x7c00);
  CHECK(ted::float_to_f16_bits(5.9604644775390625e-8f) == 0x0001);   // smallest subnormal 2^-24
  CHECK(ted::float_to_f16_bits(2.98023223876953125e-8f) == 0x0000);  // 2^-25 ties to even: 0
  CHECK(ted::float_to_f16_bits(3.0e-8f) == 0x0001);
  CHECK(ted::float_to_f16_bits(6.103515625e-5f) == 0x0400);  // smallest normal 2^-14
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even keeps 1.
  CHECK(ted::float_to_f16_bits(1.0f + 0.00048828125f) == 0x3c00);
  CHECK(ted::float_to_f16_bits(1.0f + 3 * 0.00048828125f) == 0x3c02);
  CHECK(ted::f16_bits_to_float(0x3555) == Approx(0.333251953125f));
}

TEST_CASE("bf16: rounding to nearest even and round trips") {
  CHECK(ted::float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(ted::bf16_bits_to_float(0x3f80) == 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even keeps 1.
  CHECK(ted::float_to_bf16_bits(1.00390625f) == 0x3f80);
  CHECK(ted::float_to_bf16_bits(1.01171875f) == 0x3f82);  // 1 + 3 * 2^-8 rounds up to even
  CHECK(std::isnan(ted::bf16_bits_to_float(ted::float_to_bf16_bits(std::nanf("")))));
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float value = ted::bf16_bits_to_float(static_cast<std::uint16_t>(bits));
    if (!std::isnan(value)) REQUIRE(ted::float_to_bf16_bits(value) == bits);
  }
}

TEST_CASE("dtype sizes, names and parsing") {
  using ted::DataType;
  for (DataType t : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16, DataType::i32,
                     DataType::i64, DataType::u8}) {
    CHECK(ted::parse_dtype(ted::to_string(t)) == t);
    double buffer[1];
    ted::store_from_double(buffer, t, 0, 7.0);
    CHECK(ted::load_as_double(buffer, t, 0) == 7.0);
  }
  CHECK(ted::dtype_size(DataType::bf16) == 2);
  CHECK(ted::dtype_size(DataType::i64) == 8);
  CHECK(ted::parse_dtype("fp16") == DataType::f16);
  CHECK_THROWS_AS(ted::parse_dtype("float8"), ted::ConfigError);
}
