// Helpers of the per-backend tests: the device under test and its kernel tables (made by
// backend_main.cpp from --device), upload/download through host floats, rounding of inputs to
// the storage type (so the CPU fp32 reference sees exactly what the backend sees), and the
// score: normalised max error max|got - want| / max|want|, held to a tolerance per storage type.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "ted/backend/ops.hpp"
#include "ted/core/dtype.hpp"
#include "ted/device/tensor.hpp"

namespace ted::test {

Device& device();  // the device under test
template <typename T>
Ops<T>& ops();  // its kernel table for storage type T (float, Half, BFloat16)

// fp32 is the same arithmetic as the reference on the CPU and cuBLAS's order on a GPU; 16-bit
// outputs carry one rounding to 11 (fp16) or 8 (bf16) significant bits, and more where a
// rounded intermediate feeds the next step.
template <typename T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, Half>) return 4e-3;
  return 2e-2;
}

template <typename T>
float round_to(float value) {
  return static_cast<float>(widen(narrow<T>(value)));
}

template <typename T>
std::vector<float> rounded(std::vector<float> values) {
  for (float& v : values) v = round_to<T>(v);
  return values;
}

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Host floats, rounded to T on the host, into a new buffer on the device under test.
template <typename T>
Tensor<T> upload(const std::vector<float>& host) {
  std::vector<T> typed(host.size());
  for (std::size_t i = 0; i < host.size(); ++i) typed[i] = narrow<T>(host[i]);
  Tensor<T> t(device(), host.size());
  device().copy_from_host(t.data(), typed.data(), typed.size() * sizeof(T));
  return t;
}

template <typename T>
std::vector<float> download(const T* data, std::size_t n) {
  std::vector<T> typed(n);
  device().copy_to_host(typed.data(), data, n * sizeof(T));
  std::vector<float> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(widen(typed[i]));
  return host;
}
template <typename T>
std::vector<float> download(const Tensor<T>& t) {
  return download<T>(t.data(), t.size());
}

inline Tensor<std::int32_t> upload_i32(const std::vector<std::int32_t>& host) {
  Tensor<std::int32_t> t(device(), host.size());
  device().copy_from_host(t.data(), host.data(), host.size() * sizeof(std::int32_t));
  return t;
}

inline std::vector<std::int32_t> download_i32(const Tensor<std::int32_t>& t) {
  std::vector<std::int32_t> host(t.size());
  device().copy_to_host(host.data(), t.data(), host.size() * sizeof(std::int32_t));
  return host;
}

inline double normalized_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    // A NaN where the reference has a number is as wrong as can be (std::max would drop it).
    if (std::isnan(got[i]) != std::isnan(want[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(want[i])) continue;
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
    if (got[i] != want[i])
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return worst / std::max(scale, 1e-30);
}

}  // namespace ted::test

// Scores `got` against `want` and prints the score (ctest -V shows every op's error).
#define CHECK_CLOSE_TO_REFERENCE(T, got, want)                                                 \
  do {                                                                                         \
    REQUIRE((got).size() == (want).size());                                                    \
    double ted_error_ = ::ted::test::normalized_error((got), (want));                          \
    INFO(#got << ": normalised error " << ted_error_ << " (tolerance "                         \
              << ::ted::test::tolerance<T>() << ")");                                          \
    CHECK(ted_error_ <= ::ted::test::tolerance<T>());                                          \
    WARN(#got << " [" << ::ted::to_string(::ted::dtype_of<T>::value) << "]: normalised error " \
              << ted_error_);                                                                  \
  } while (0)
