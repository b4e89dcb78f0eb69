// Order statistics of timed iterations: medians with p10/p90, as the suite reports every time.
#pragma once

#include <vector>

namespace ted {

struct Summary {
  double median = 0;
  double p10 = 0;
  double p90 = 0;
};

// Percentile q in [0, 100] with linear interpolation between order statistics; 0 when empty.
double percentile(std::vector<double> values, double q);
Summary summarize(const std::vector<double>& values);

}  // namespace ted
