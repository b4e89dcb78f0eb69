// Helpers of the GPU tests: the one device and kernel context (made by cuda_catch_main.cpp),
// upload/download through fp32, host rounding of inputs to the storage type (so the CPU
// reference sees exactly what the GPU sees), and the score: normalised max error
// max|got - want| / max|want|, held to a tolerance per storage type.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <type_traits>
#include <vector>

#include "ted/backend/tensor.hpp"
#include "ted/core/dtype.hpp"
#include "ted/kernels/cuda/ops.hpp"

namespace ted::test {

namespace kc = ted::kernels::cuda;

kc::Context& gpu();  // defined in cuda_catch_main.cpp

template <typename T>
double tolerance() {  // the dtype-appropriate tolerances
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, Half>) return 4e-3;
  return 2e-2;  // bf16: 8 bits of mantissa, several roundings on the way
}

template <typename T>
float round_to(float value) {
  if constexpr (std::is_same_v<T, Half>) return f16_bits_to_float(float_to_f16_bits(value));
  if constexpr (std::is_same_v<T, BFloat16>) return bf16_bits_to_float(float_to_bf16_bits(value));
  return value;
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

inline Tensor<float> upload_f32(const std::vector<float>& host) {
  Tensor<float> t(gpu().device(), host.size());
  gpu().device().copy_from_host(t.data(), host.data(), host.size() * sizeof(float));
  return t;
}

template <typename T>
Tensor<T> upload(const std::vector<float>& host) {
  Tensor<float> f = upload_f32(host);
  Tensor<T> t(gpu().device(), host.size());
  kc::from_float<T>(gpu(), f.data(), t.data(), host.size());
  gpu().synchronize();
  return t;
}

inline std::vector<float> download_f32(const float* data, std::size_t n) {
  std::vector<float> host(n);
  gpu().device().copy_to_host(host.data(), data, n * sizeof(float));
  return host;
}

template <typename T>
std::vector<float> download(const T* data, std::size_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return download_f32(data, n);
  } else {
    Tensor<float> f(gpu().device(), n);
    kc::to_float<T>(gpu(), data, f.data(), n);
    return download_f32(f.data(), n);
  }
}
template <typename T>
std::vector<float> download(const Tensor<T>& t) {
  return download<T>(t.data(), t.size());
}

inline std::vector<std::int32_t> download_i32(const Tensor<std::int32_t>& t) {
  std::vector<std::int32_t> host(t.size());
  gpu().device().copy_to_host(host.data(), t.data(), host.size() * sizeof(std::int32_t));
  return host;
}

inline double normalized_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
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
