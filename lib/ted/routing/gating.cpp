#include "ted/routing/gating.hpp"

#include <algorithm>
#include <cmath>

namespace ted::routing {

int expert_capacity(const GateConfig& config, int tokens) {
  double exact = config.top_k * config.capacity_factor * tokens / config.experts;
  // Round like ceil() but without turning 4.000000000001 (float noise in cf) into 5.
  int capacity = static_cast<int>(std::ceil(exact - 1e-9));
  return std::max(capacity, config.min_capacity);
}

}  // namespace ted::routing
