// Catch2's runner, for the single-process tests (Catch2 2 and 3 alike: tests/catch.hpp).
#define CATCH_CONFIG_RUNNER
#include "catch.hpp"

int main(int argc, char** argv) {
  return Catch::Session().run(argc, argv);
}
