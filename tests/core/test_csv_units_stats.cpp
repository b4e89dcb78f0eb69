// CSV writing (escaping, atomic replacement), byte sizes and order statistics.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/core/stats.hpp"
#include "ted/core/units.hpp"

namespace fs = std::filesystem;

namespace {
std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ted_test_csv_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}
}  // namespace

TEST_CASE("CSV fields are quoted when they need it") {
  CHECK(ted::csv_escape("plain") == "plain");
  CHECK(ted::csv_escape("a,b") == "\"a,b\"");
  CHECK(ted::csv_escape("say \"hi\"") == "\"say \"\"hi\"\"\"");
  ted::CsvTable table({"name", "value", "count"});
  table.row().add("mpirun -np 4 x --csv a,b").add(0.5).add(3);
  CHECK(table.to_string() == "name,value,count\n\"mpirun -np 4 x --csv a,b\",0.5,3\n");
}

TEST_CASE("CSV writes are atomic: complete file or the old one untouched") {
  fs::path path = scratch("sub/out.csv");
  ted::CsvTable table({"a", "b"});
  table.row().add(1).add(2);
  table.write_atomic(path);
  CHECK(read(path) == "a,b\n1,2\n");
  for (const auto& entry : fs::directory_iterator(path.parent_path()))
    CHECK(entry.path().filename() == "out.csv");  // no temporary left behind

  ted::CsvTable short_row({"a", "b"});
  short_row.row().add(9);
  CHECK_THROWS_AS(short_row.write_atomic(path), ted::Error);
  CHECK(read(path) == "a,b\n1,2\n");  // a failed write leaves the old results

  fs::remove_all(path.parent_path().parent_path());
}

TEST_CASE("byte sizes parse like nccl-tests and reject garbage") {
  CHECK(ted::parse_bytes("1K", "-b") == 1024);
  CHECK(ted::parse_bytes("16M", "-e") == 16u << 20);
  CHECK(ted::parse_bytes("2GB", "-e") == std::size_t{2} << 30);
  CHECK(ted::parse_bytes("4096", "-b") == 4096);
  CHECK(ted::parse_bytes("8k", "-b") == 8192);
  CHECK_THROWS_AS(ted::parse_bytes("", "-b"), ted::ConfigError);
  CHECK_THROWS_AS(ted::parse_bytes("1X", "-b"), ted::ConfigError);
  CHECK_THROWS_AS(ted::parse_bytes("K", "-b"), ted::ConfigError);
  CHECK_THROWS_AS(ted::parse_bytes("-5", "-b"), ted::ConfigError);
  CHECK_THROWS_WITH(ted::parse_bytes("1Mx", "-e"), Catch::Matchers::Contains("-e: '1Mx'"));
  CHECK(ted::format_bytes(512) == "512 B");
  CHECK(ted::format_bytes(16u << 20) == "16 MiB");
}

TEST_CASE("percentiles interpolate between order statistics") {
  std::vector<double> values = {5, 1, 4, 2, 3};
  CHECK(ted::percentile(values, 50) == 3);
  CHECK(ted::percentile(values, 0) == 1);
  CHECK(ted::percentile(values, 100) == 5);
  CHECK(ted::percentile(values, 10) == Approx(1.4));
  CHECK(ted::percentile({}, 50) == 0);
  auto s = ted::summarize({10, 20});
  CHECK(s.median == 15);
  CHECK(s.p90 == Approx(19));
}
