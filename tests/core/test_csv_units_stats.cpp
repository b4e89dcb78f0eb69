// CSV writing (escaping, atomic replacement, locked appends), byte sizes, order statistics and
// the split of an experiment's time into compute and communication.
#include "catch.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"
#include "ted/core/stats.hpp"
#include "ted/core/units.hpp"
#include "ted/experiments/harness.hpp"

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

TEST_CASE("two jobs appending to one CSV at once lose no row") {
  // What two experiment jobs writing the same results file do: each appends its rows one point
  // at a time (experiments::append_rows), with no coordination between them.
  fs::path path = scratch("shared/rows.csv");
  fs::remove_all(path.parent_path());
  constexpr int kRows = 150;
  auto job = [&](int id) {
    for (int i = 0; i < kRows; ++i) {
      ted::CsvTable table({"job", "point", "text"});
      table.row().add(id).add(i).add(std::string(200, 'x'));
      ted::experiments::append_rows(table, path.string());
    }
  };
  std::thread first(job, 1), second(job, 2);
  first.join();
  second.join();
  std::istringstream lines(read(path));
  std::string line;
  int header = 0, rows[3] = {};
  while (std::getline(lines, line)) {
    if (line == "job,point,text") {
      ++header;
      continue;
    }
    REQUIRE(line.size() > 200);  // a whole row, not two interleaved halves
    rows[line[0] - '0']++;
  }
  CHECK(header == 1);
  CHECK(rows[1] == kRows);
  CHECK(rows[2] == kRows);
  ted::CsvTable other({"another", "header"});
  other.row().add(1).add(2);
  CHECK_THROWS_AS(ted::append_csv(other, path), ted::ConfigError);  // no mixed file
  fs::remove_all(path.parent_path());
}

TEST_CASE("a CSV written before the table gained columns at its end is widened, rows kept") {
  fs::path path = scratch("widen/rows.csv");
  fs::remove_all(path.parent_path());
  ted::CsvTable before({"a", "b"});
  before.row().add(1).add("x,y");
  before.row().add(2).add("z");
  ted::append_csv(before, path);
  ted::CsvTable after({"a", "b", "c", "d"});
  after.row().add(3).add("w").add(4).add(5);
  ted::check_csv_appendable(after, path);  // the run's check before it measures anything
  ted::append_csv(after, path);
  CHECK(read(path) == "a,b,c,d\n1,\"x,y\",,\n2,z,,\n3,w,4,5\n");
  CHECK_FALSE(fs::exists(path.string() + ".before-widening"));
  const auto rows = ted::read_csv(path);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].at("b") == "x,y");
  CHECK(rows[0].at("d").empty());
  CHECK(rows[2].at("d") == "5");
  // Not widening: columns removed, renamed, or added anywhere but at the end.
  for (const auto& header : std::vector<std::vector<std::string>>{
           {"a", "b", "c"}, {"a", "x", "c", "d", "e"}, {"z", "a", "b", "c", "d"}}) {
    ted::CsvTable other(header);
    auto& row = other.row();
    for (std::size_t i = 0; i < header.size(); ++i) row.add(static_cast<int>(i));
    CHECK_THROWS_AS(ted::check_csv_appendable(other, path), ted::ConfigError);
    CHECK_THROWS_AS(ted::append_csv(other, path), ted::ConfigError);
  }
  CHECK(read(path) == "a,b,c,d\n1,\"x,y\",,\n2,z,,\n3,w,4,5\n");
  // A field with a line break in it stays one field; a widening cut short (its copy left) stops
  // every later append until the copy is restored or removed.
  fs::path quoted = scratch("widen/quoted.csv");
  ted::CsvTable two({"a", "b"});
  two.row().add("line one\nline two").add(7);
  ted::append_csv(two, quoted);
  ted::CsvTable three({"a", "b", "c"});
  three.row().add(8).add(9).add(10);
  ted::append_csv(three, quoted);
  CHECK(read(quoted) == "a,b,c\n\"line one\nline two\",7,\n8,9,10\n");
  std::ofstream(quoted.string() + ".before-widening") << "a,b\n1,2\n";
  std::ofstream(quoted, std::ios::trunc).close();  // as a crash after the truncation leaves it
  CHECK_THROWS_AS(ted::check_csv_appendable(three, quoted), ted::ConfigError);
  CHECK_THROWS_AS(ted::append_csv(three, quoted), ted::ConfigError);
  CHECK(read(quoted).empty());
  fs::remove_all(path.parent_path());
}

TEST_CASE("an experiment's compute time is never negative") {
  ted::experiments::Result r;
  const std::vector<double> none[4] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}};
  // Inputs that break the measurement's nesting (a rank's collectives inside its step): the
  // median iteration's collectives exceed the median time, and are clamped to it.
  ted::experiments::split_time({10.0, 11.0, 12.0}, {9.0, 11.5, 12.0}, none, &r);
  CHECK(r.time_ms.median == Approx(11.0));
  CHECK(r.comm_ms == Approx(11.0));
  CHECK(r.compute_ms == Approx(0.0));
  ted::experiments::split_time({10.0, 11.0, 12.0}, {1.0, 2.0, 3.0}, none, &r);
  CHECK(r.comm_ms == Approx(2.0));
  CHECK(r.compute_ms == Approx(9.0));
}

TEST_CASE("an experiment's time columns add up: compute + comm, kinds + other") {
  ted::experiments::Result r;
  // Four iterations (an even count: the median time is interpolated, 11.5): the kinds and the
  // collective time come from the lower middle iteration by time (11 ms, the second here), so
  // they are one rank's parts of one step (medians taken kind by kind would mix iterations).
  const std::vector<double> times = {12.0, 11.0, 10.0, 13.0};
  const std::vector<double> comms = {9.0, 7.0, 1.0, 9.0};
  const std::vector<double> kinds[4] = {{5.0, 1.0, 1.0, 5.0},  // all-reduce
                                        {4.0, 5.0, 0.0, 4.0},  // all-to-all
                                        {0.0, 0.5, 0.0, 0.0},  // all-gather
                                        {0.0, 0.0, 0.0, 0.0}};
  ted::experiments::split_time(times, comms, kinds, &r);
  CHECK(r.time_ms.median == Approx(11.5));
  CHECK(r.comm_ms == Approx(7.0));
  CHECK(r.compute_ms == Approx(4.5));
  CHECK(r.op_ms[0] == Approx(1.0));
  CHECK(r.op_ms[1] == Approx(5.0));
  CHECK(r.op_ms[2] == Approx(0.5));
  const double kinds_sum = r.op_ms[0] + r.op_ms[1] + r.op_ms[2] + r.op_ms[3];
  CHECK(kinds_sum <= r.comm_ms);
  CHECK(r.compute_ms + r.comm_ms == Approx(r.time_ms.median));
  CHECK(kinds_sum + r.other_ms == Approx(r.time_ms.median));
  // other_ms is the compute plus collectives of no reported kind (here 0.5 ms of them).
  CHECK(r.other_ms - r.compute_ms == Approx(r.comm_ms - kinds_sum));
  CHECK(r.other_ms == Approx(5.0));
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
  CHECK_THROWS_WITH(ted::parse_bytes("1Mx", "-e"), Catch::Matchers::ContainsSubstring("-e: '1Mx'"));
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
