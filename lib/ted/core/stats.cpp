#include "ted/core/stats.hpp"

#include <algorithm>
#include <cmath>

namespace ted {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  double position = q / 100.0 * static_cast<double>(values.size() - 1);
  auto below = static_cast<std::size_t>(std::floor(position));
  auto above = std::min(below + 1, values.size() - 1);
  double fraction = position - static_cast<double>(below);
  return values[below] + fraction * (values[above] - values[below]);
}

Summary summarize(const std::vector<double>& values) {
  return {percentile(values, 50), percentile(values, 10), percentile(values, 90)};
}

}  // namespace ted
