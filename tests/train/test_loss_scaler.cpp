// Dynamic loss scaling: overflow skips the step and backs off; clean steps grow the scale.
#include "catch.hpp"

#include "ted/train/loss_scaler.hpp"

using ted::train::LossScaler;
using ted::train::LossScalerConfig;

TEST_CASE("loss scaler backs off on overflow and grows after clean steps", "[train][scaler]") {
  LossScalerConfig config;
  config.initial = 1024;
  config.growth_interval = 3;
  config.min_scale = 256;
  LossScaler scaler(config);
  CHECK(scaler.scale() == 1024);
  CHECK_FALSE(scaler.update(true));  // overflow: skip, halve
  CHECK(scaler.scale() == 512);
  CHECK(scaler.skipped() == 1);
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 512);  // two clean steps: not yet
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 1024);  // the third: doubled
  CHECK(scaler.update(false));
  CHECK_FALSE(scaler.update(true));  // an overflow resets the clean-step count
  CHECK(scaler.update(false));
  CHECK(scaler.update(false));
  CHECK(scaler.scale() == 512);
  CHECK_FALSE(scaler.update(true));
  CHECK_FALSE(scaler.update(true));
  CHECK(scaler.scale() == 256);  // never below min_scale
  CHECK(scaler.skipped() == 4);
}
