// Training end to end on the synthetic data (loss falls, runs repeat exactly), the data
// sources, the learning-rate schedule, and config errors.
#include "catch.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ted/core/error.hpp"
#include "ted/train/trainer.hpp"
#include "train/tiny_run.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

using ted::test::tiny_run;

std::vector<double> train(const ted::train::TrainConfig& config) {
  auto device = ted::make_cpu_device();
  ted::train::Trainer trainer(config, *device);
  std::vector<double> losses;
  for (int step = 0; step < config.steps; ++step) losses.push_back(trainer.step(step).loss);
  return losses;
}

fs::path scratch(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ted_test_train_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("a tiny MoE GPT learns the synthetic data, deterministically") {
  auto config = tiny_run();
  auto first = train(config);
  auto second = train(config);
  CHECK(first == second);  // bit for bit
  double start = first.front();
  double end = (first[195] + first[196] + first[197] + first[198] + first[199]) / 5;
  INFO("loss " << start << " -> " << end);
  CHECK(start > 3.0);  // about ln(32) = 3.47 at initialisation
  CHECK(end < 0.35 * start);
  config.model.seed = 4321;
  config.steps = 3;
  CHECK(train(config) != std::vector<double>(first.begin(), first.begin() + 3));
}

TEST_CASE("learning rate: linear warm-up, then cosine to min_lr") {
  ted::train::OptimizerConfig c;
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup_steps = 4;
  CHECK(ted::train::learning_rate(c, 0, 20) == Approx(0.25));
  CHECK(ted::train::learning_rate(c, 3, 20) == Approx(1.0));
  CHECK(ted::train::learning_rate(c, 4, 20) == Approx(1.0));
  CHECK(ted::train::learning_rate(c, 19, 20) == Approx(0.1));
  CHECK(ted::train::learning_rate(c, 11, 20) < 1.0);
}

TEST_CASE("token files: uint16 and uint32, targets shifted by one, bad files are config errors") {
  fs::path u16 = scratch("tokens.u16"), u32 = scratch("tokens.u32");
  {
    std::ofstream a(u16, std::ios::binary), b(u32, std::ios::binary);
    for (std::uint32_t t = 0; t < 50; ++t) {
      std::uint16_t small = static_cast<std::uint16_t>((t * 3) % 40);
      std::uint32_t large = 70000 + t;
      a.write(reinterpret_cast<const char*>(&small), 2);
      b.write(reinterpret_cast<const char*>(&large), 4);
    }
  }
  ted::train::TokenFileSource source(u16.string(), 2, 40, 8);
  CHECK(source.size() == 50);
  std::vector<std::int32_t> tokens(8), targets(8);
  source.sample(2, 8, tokens.data(), targets.data());  // window starting at token 16
  for (int i = 0; i < 8; ++i) {
    CHECK(tokens[i] == ((16 + i) * 3) % 40);
    CHECK(targets[i] == ((17 + i) * 3) % 40);
  }
  ted::train::TokenFileSource wide(u32.string(), 4, 80000, 8);
  wide.sample(0, 8, tokens.data(), targets.data());
  CHECK(tokens[0] == 70000);
  CHECK(targets[7] == 70008);
  CHECK_THROWS_WITH(ted::train::TokenFileSource(u32.string(), 4, 1000, 8),
                    ContainsSubstring("token id 70000"));
  CHECK_THROWS_WITH(ted::train::TokenFileSource(scratch("missing.bin").string(), 2, 40, 8),
                    ContainsSubstring("does not exist"));
  CHECK_THROWS_WITH(ted::train::TokenFileSource(u16.string(), 2, 40, 60),
                    ContainsSubstring("fewer than model.seq_len + 1"));
  CHECK_THROWS_AS(ted::train::TokenFileSource(u16.string(), 3, 40, 8), ted::ConfigError);
  fs::remove_all(u16.parent_path());
}

TEST_CASE("YAML config: keys, overrides, and one-line errors naming file and key") {
  fs::path path = scratch("run.yaml");
  {
    std::ofstream out(path);
    out << "model:\n  hidden: 48\n  heads: 6\ngating:\n  top_k: 2\ntraining:\n  steps: 7\n";
  }
  ted::train::TrainConfig config;
  auto schema = config.schema();
  schema.load_yaml(path.string());
  CHECK(config.model.hidden == 48);
  CHECK(config.model.gate.top_k == 2);
  CHECK(config.steps == 7);
  schema.set("model.hidden=96");
  schema.set("gating.random_token_selection=true");
  CHECK(config.model.hidden == 96);
  CHECK(config.model.gate.random_token_selection);

  auto write = [&](const std::string& text) {
    std::ofstream out(path);
    out << text;
  };
  auto load = [&] {
    ted::train::TrainConfig c;
    auto s = c.schema();
    s.load_yaml(path.string());
    c.validate();
  };
  write("model:\n  hiden: 4\n");
  CHECK_THROWS_WITH(load(), ContainsSubstring("run.yaml: unknown key 'model.hiden'"));
  write("model:\n  hidden: lots\n");
  CHECK_THROWS_WITH(load(), ContainsSubstring("key 'model.hidden' must be an integer, got 'lots'"));
  write("model:\n  experts: 0\n");
  CHECK_THROWS_WITH(load(), ContainsSubstring("model.experts must be at least 1, got 0"));
  write("model:\n  experts: 2\ngating:\n  top_k: 3\n");
  CHECK_THROWS_WITH(load(), ContainsSubstring("gating.top_k must be 1 or 2"));
  write("model:\n  experts: 1\ngating:\n  top_k: 2\n");
  CHECK_THROWS_WITH(load(),
                    ContainsSubstring("gating.top_k (2) must not exceed model.experts (1)"));
  write("model:\n  hidden: 30\n  heads: 4\n");
  CHECK_THROWS_WITH(load(), ContainsSubstring("model.heads (4) must divide model.hidden (30)"));
  write("model: [1, 2\n");
  CHECK_THROWS_WITH(load(), ContainsSubstring("not valid YAML"));
  CHECK_THROWS_WITH(schema.set("model.hidden"), ContainsSubstring("not of the form key=value"));
  CHECK_THROWS_WITH(schema.set("data.sauce=file"),
                    ContainsSubstring("--set: unknown key 'data.sauce'"));
  fs::remove_all(path.parent_path());
}
