// The config loader's rules for what a user types: finite numbers only, no key twice, files
// that are files, required keys, paths found from the YAML's folder; and the model's bounds.
#include "catch.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "ted/core/config_schema.hpp"
#include "ted/core/error.hpp"
#include "ted/train/train_config.hpp"

namespace fs = std::filesystem;

namespace {

fs::path scratch() {
  fs::path dir = fs::temp_directory_path() / ("ted_test_schema_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

fs::path write(const std::string& name, const std::string& text) {
  fs::path path = scratch() / name;
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
  return path;
}

// The message of the ConfigError `body` throws ("" when it does not throw).
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const ted::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("no number key takes inf or nan, from YAML or --set") {
  double value = 1;
  ted::ConfigSchema schema;
  schema.add("rate", &value);
  for (const char* text : {"inf", "-inf", "nan", "NaN", "1e999", ".inf"})
    CHECK_THAT(error_of([&] { schema.set(std::string("rate=") + text); }),
               Catch::Matchers::ContainsSubstring("'rate' must be a finite number"));
  schema.set("rate=2.5e-3");
  CHECK(value == 2.5e-3);
  const auto path = write("nan.yaml", "rate: .nan\n");
  CHECK_THAT(error_of([&] { schema.load_yaml(path.string()); }),
             Catch::Matchers::ContainsSubstring("must be a finite number, got '.nan'"));
}

TEST_CASE("a key given twice in one map is refused, not silently taken once") {
  int hidden = 0, layers = 0;
  ted::ConfigSchema schema;
  schema.add("model.hidden", &hidden);
  schema.add("model.layers", &layers);
  auto twice = write("twice.yaml", "model:\n  hidden: 32\n  hidden: 64\n");
  CHECK_THAT(error_of([&] { schema.load_yaml(twice.string()); }),
             Catch::Matchers::ContainsSubstring("key 'model.hidden' appears twice (line 3)"));
  auto section = write("section.yaml", "model:\n  hidden: 32\nmodel:\n  layers: 2\n");
  CHECK_THAT(error_of([&] { schema.load_yaml(section.string()); }),
             Catch::Matchers::ContainsSubstring("key 'model' appears twice"));
}

TEST_CASE("a config path that is a directory or missing names the path") {
  ted::ConfigSchema schema;
  const auto folder = scratch();
  CHECK_THAT(
      error_of([&] { schema.load_yaml(folder.string()); }),
      Catch::Matchers::ContainsSubstring("'" + folder.string() + "' is a directory, not a file"));
  CHECK_THAT(error_of([&] { schema.load_yaml((folder / "none.yaml").string()); }),
             Catch::Matchers::ContainsSubstring("does not exist"));
}

TEST_CASE("required keys are required, and given() says which were set") {
  double rate = 1;
  ted::ConfigSchema schema;
  schema.add("rate", &rate);
  schema.add("latency", &rate);
  schema.set("rate=3");
  CHECK(schema.given("rate"));
  CHECK_FALSE(schema.given("latency"));
  CHECK_THAT(error_of([&] {
               schema.require({"rate", "latency"}, "x.yaml", "no default");
             }),
             Catch::Matchers::ContainsSubstring("x.yaml: key 'latency' is missing (no default)"));
}

TEST_CASE("a key read elsewhere is passed over whatever its shape; given() says it was there") {
  double rate = 0;
  ted::ConfigSchema s;
  s.add("rate", &rate);
  s.add_read_elsewhere("curves");
  const auto path = write("elsewhere.yaml",
                          "rate: 2\ncurves:\n  - {op: x, bytes: [1, 2]}\n  - {nested: {a: 1}}\n");
  CHECK(error_of([&] { s.load_yaml(path.string()); }).empty());
  CHECK(rate == 2);
  CHECK(s.given("curves"));
  ted::ConfigSchema without;
  without.add("rate", &rate);
  without.add_read_elsewhere("curves");
  without.load_yaml(write("without.yaml", "rate: 3\n").string());
  CHECK_FALSE(without.given("curves"));
  // Only that key: an unknown one beside it is still refused.
  ted::ConfigSchema other;
  other.add("rate", &rate);
  other.add_read_elsewhere("curves");
  CHECK(error_of([&] {
          other.load_yaml(write("other.yaml", "rate: 1\ncurve: 2\n").string());
        }).find("unknown key 'curve'") != std::string::npos);
}

TEST_CASE("a relative path in a YAML is found from the YAML's folder and its parents") {
  const auto cluster = write("repo/experiments/clusters/c.yaml", "name: c\n");
  const auto yaml = write("repo/experiments/ablation/paper.yaml",
                          "run:\n  cluster: experiments/clusters/c.yaml\n");
  std::string found;
  ted::ConfigSchema schema;
  schema.add_path("run.cluster", &found);
  schema.load_yaml(yaml.string());
  CHECK(fs::equivalent(found, cluster));
}

TEST_CASE("model and run bounds keep sizes from overflowing") {
  ted::train::TrainConfig config;
  config.validate();
  auto with = [&](auto change) {
    ted::train::TrainConfig c;
    change(c);
    return error_of([&] { c.validate(); });
  };
  CHECK_THAT(with([](auto& c) { c.model.hidden = 600000000; }),
             Catch::Matchers::ContainsSubstring("model.hidden must be at most"));
  CHECK_THAT(with([](auto& c) { c.model.hidden = 65536, c.model.heads = 64; }),
             Catch::Matchers::ContainsSubstring("one tensor of"));
  CHECK_THAT(with([](auto& c) { c.data.micro_batch = 4096, c.model.seq_len = 4096; }),
             Catch::Matchers::ContainsSubstring("one tensor of"));
  CHECK_THAT(with([](auto& c) { c.model.gate.capacity_factor = 1e300; }),
             Catch::Matchers::ContainsSubstring("gating.capacity_factor"));
  CHECK_THAT(with([](auto& c) { c.optimizer.lr = 1e300; }),
             Catch::Matchers::ContainsSubstring("optimizer.lr"));
  CHECK_THAT(with([](auto& c) { c.parallel.tp = -1; }),
             Catch::Matchers::ContainsSubstring("parallel.tp"));
  CHECK_THAT(with([](auto& c) { c.steps = -3; }),
             Catch::Matchers::ContainsSubstring("training.steps"));
  fs::remove_all(scratch());
}
