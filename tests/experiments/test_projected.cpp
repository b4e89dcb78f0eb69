// The layout search's ranking: a layout that does not fit is never ranked above one that does,
// and among those that fit (and those that do not) the faster comes first.
#include "catch.hpp"

#include "ted/experiments/projected.hpp"

TEST_CASE("ranking: fitting layouts first, then by time") {
  std::vector<ted::experiments::Candidate> candidates(6);
  const double times[] = {3.0, 1.0, 2.0, 0.5, 4.0, 2.5};
  const bool fits[] = {true, false, true, false, true, true};
  for (int i = 0; i < 6; ++i) {
    candidates[i].time.compute = times[i];
    candidates[i].fits = fits[i];
  }
  ted::experiments::rank(candidates);
  std::vector<double> order;
  for (const auto& c : candidates) order.push_back(c.time.total());
  CHECK(order == std::vector<double>{2.0, 2.5, 3.0, 4.0, 0.5, 1.0});
  bool seen_unfit = false;
  for (const auto& c : candidates) {
    if (!c.fits) seen_unfit = true;
    CHECK(!(seen_unfit && c.fits));
  }
}
