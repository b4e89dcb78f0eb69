// The benchmark's per-collective plug-ins: size rounding, ragged splits, and that the check
// really finds a wrong element (a check that cannot fail proves nothing).
#include "catch.hpp"

#include <numeric>
#include <string>
#include <vector>

#include "ted/bench/collective_bench.hpp"
#include "ted/bench/collective_cases.hpp"
#include "ted/bench/collective_plugin.hpp"
#include "ted/core/error.hpp"

using ted::CollectiveOp;
using ted::DataType;
using ted::bench::plan_case;

TEST_CASE("sizes are rounded like nccl-tests and buffers sized per collective") {
  auto c = plan_case(CollectiveOp::all_to_all, DataType::f32, 1000, 3, 1);
  CHECK(c.elements == 249);  // 250 floats rounded down to a multiple of 3
  CHECK(c.bytes == 996);
  CHECK(c.chunk == 83);
  auto g = plan_case(CollectiveOp::all_gather, DataType::f64, 1024, 4, 0);
  CHECK(g.send_elements == 32);
  CHECK(g.recv_elements == 128);
  auto r = plan_case(CollectiveOp::reduce_scatter, DataType::bf16, 1024, 4, 0);
  CHECK(r.send_elements == 512);
  CHECK(r.recv_elements == 128);
  auto a = plan_case(CollectiveOp::all_reduce, DataType::f32, 6, 4, 0);
  CHECK(a.elements == 1);
}

TEST_CASE("ragged all-to-all-v splits: uneven blocks, every rank sends and receives n * unit") {
  for (int n = 1; n <= 9; ++n) {
    for (std::size_t unit : {0u, 1u, 6u, 7u}) {
      for (int r = 0; r < n; ++r) {
        std::size_t sent = 0, received = 0;
        for (int p = 0; p < n; ++p) {
          sent += ted::bench::ragged_count(r, p, n, unit);
          received += ted::bench::ragged_count(p, r, n, unit);
        }
        REQUIRE(sent == n * unit);
        REQUIRE(received == n * unit);
      }
    }
  }
  CHECK(ted::bench::ragged_count(0, 0, 4, 6) == 3);
  CHECK(ted::bench::ragged_count(0, 3, 4, 6) == 9);
}

TEST_CASE("the check counts wrong elements") {
  for (CollectiveOp op :
       {CollectiveOp::all_reduce, CollectiveOp::all_gather, CollectiveOp::reduce_scatter,
        CollectiveOp::all_to_all, CollectiveOp::all_to_all_v}) {
    for (DataType dtype : {DataType::f32, DataType::bf16, DataType::i32, DataType::u8}) {
      INFO(ted::to_string(op) << " " << ted::to_string(dtype));
      auto c = plan_case(op, dtype, 4096, 4, 2);
      std::vector<double> storage(c.recv_elements);  // 8 bytes an element covers every type
      for (std::size_t i = 0; i < c.recv_elements; ++i)
        ted::store_from_double(storage.data(), dtype, i, ted::bench::expected_value(c, i));
      REQUIRE(ted::bench::count_wrong(c, storage.data()) == 0);
      ted::store_from_double(storage.data(), dtype, 5, ted::bench::sentinel(dtype));
      ted::store_from_double(storage.data(), dtype, c.recv_elements - 1,
                             ted::bench::sentinel(dtype));
      REQUIRE(ted::bench::count_wrong(c, storage.data()) == 2);
    }
  }
}

TEST_CASE("a size sweep is b, b*f, ... up to e; bad ranges are config errors") {
  CHECK(ted::bench::size_sweep(1024, 16u << 20, 2).size() == 15);
  CHECK(ted::bench::size_sweep(1000, 9000, 3) == std::vector<std::size_t>{1000, 3000, 9000});
  CHECK(ted::bench::size_sweep(5, 5, 2) == std::vector<std::size_t>{5});
  CHECK_THROWS_AS(ted::bench::size_sweep(2048, 1024, 2), ted::ConfigError);
  CHECK_THROWS_AS(ted::bench::size_sweep(0, 1024, 2), ted::ConfigError);
  CHECK_THROWS_AS(ted::bench::size_sweep(1, 1024, 1), ted::ConfigError);
  CHECK(ted::bench::bus_factor(CollectiveOp::all_reduce, 4) == Approx(1.5));
  CHECK(ted::bench::bus_factor(CollectiveOp::all_to_all, 4) == Approx(0.75));
  CHECK(ted::bench::bus_factor(CollectiveOp::broadcast, 4) == 1.0);
}

TEST_CASE("every plug-in of the table: its own op, and a check that finds a wrong element") {
  for (std::size_t i = 0; i < ted::kCollectiveOpCount; ++i) {
    const auto op = static_cast<CollectiveOp>(i);
    const ted::bench::CollectivePlugin& plugin = ted::bench::collective_plugin(op);
    INFO(ted::to_string(op));
    REQUIRE(plugin.op == op);
    if (!plugin.moves_data) continue;
    // Its case in the suite (collbench_check_<op>, read from its file by tests/CMakeLists.txt).
    REQUIRE(plugin.check != nullptr);
    CHECK(std::string(plugin.check).find("--group ") == 0);
    for (int n : {1, 3, 4}) {
      auto c = plan_case(op, DataType::f32, 1000, n, n - 1);
      REQUIRE(c.bytes <= 1000);
      std::size_t length = plugin.in_place ? c.send_elements : c.recv_elements;
      REQUIRE(length > 0);
      std::vector<float> result(length);
      for (std::size_t k = 0; k < length; ++k)
        result[k] = static_cast<float>(ted::bench::expected_value(c, k));
      REQUIRE(ted::bench::count_wrong(c, result.data()) == 0);
      result[length / 2] = static_cast<float>(ted::bench::sentinel(DataType::f32));
      REQUIRE(ted::bench::count_wrong(c, result.data()) == 1);
      CHECK(ted::bench::bus_factor(op, n) >= 0.0);
    }
  }
}
