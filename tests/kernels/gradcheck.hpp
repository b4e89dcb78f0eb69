// Central-difference gradient checks in double precision. A check perturbs chosen inputs by
// +/- eps, recomputes the scalar loss, and compares (g_numeric) with the analytic gradient by
// the relative error ||g_a - g_n|| / max(||g_a||, ||g_n||), which it prints and returns.
#pragma once

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace ted::test {

inline double relative_error(const std::vector<double>& analytic,
                             const std::vector<double>& numeric) {
  double diff = 0, a = 0, n = 0;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    diff += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
    a += analytic[i] * analytic[i];
    n += numeric[i] * numeric[i];
  }
  return std::sqrt(diff) / std::max({std::sqrt(a), std::sqrt(n), 1e-300});
}

// Checks d loss / d values[i] for the given indices (all when empty) against `analytic`.
inline double check_gradient(const std::string& name, const std::function<double()>& loss,
                             double* values, std::size_t count, const double* analytic,
                             std::vector<std::size_t> indices = {}, double eps = 1e-5) {
  if (indices.empty())
    for (std::size_t i = 0; i < count; ++i) indices.push_back(i);
  std::vector<double> a, n;
  for (std::size_t i : indices) {
    double saved = values[i];
    values[i] = saved + eps;
    double plus = loss();
    values[i] = saved - eps;
    double minus = loss();
    values[i] = saved;
    n.push_back((plus - minus) / (2 * eps));
    a.push_back(analytic[i]);
  }
  double error = relative_error(a, n);
  std::printf("gradcheck %-44s %5zu elements  relative error %.2e\n", name.c_str(), indices.size(),
              error);
  return error;
}

}  // namespace ted::test
