// Prints the samples our C++ feeds the trainer, for tests/apps/megatron_data_check.py, which
// holds them to Megatron-Core's own reader of the same dataset:
//   print_samples <config.yaml> <count> [key=value ...]
// The config with the overrides, validated; then "# train: <describe()>" and "# validation:
// <describe()>" (or "# validation: none"), then the first <count> training samples (global
// indices 0, 1, ...: make_source) and as many validation samples (make_validation_source), one
// a line: "train <index> <seq_len input ids> : <seq_len target ids>", "valid <index> ...".
// Bad input: one line on stderr, exit 2.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ted/core/error.hpp"
#include "ted/train/train_config.hpp"
#include "ted/train/trainer.hpp"

namespace {

void print(const char* split, const ted::train::TokenSource& source, long long count, int seq_len) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(seq_len)), targets(tokens.size());
  for (long long i = 0; i < count; ++i) {
    source.sample(i, seq_len, tokens.data(), targets.data());
    std::string line = std::string(split) + " " + std::to_string(i);
    for (auto id : tokens) line += " " + std::to_string(id);
    line += " :";
    for (auto id : targets) line += " " + std::to_string(id);
    std::printf("%s\n", line.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 3) {
      std::fprintf(stderr, "usage: print_samples <config.yaml> <count> [key=value ...]\n");
      return 2;
    }
    ted::train::TrainConfig config;
    ted::ConfigSchema schema = config.schema();
    schema.load_yaml(argv[1]);
    for (int i = 3; i < argc; ++i) schema.set(argv[i]);
    config.validate();
    const long long count = std::atoll(argv[2]);
    const auto training = ted::train::make_source(config);
    const auto validation = ted::train::make_validation_source(config);
    std::printf("# train: %s\n", training->describe().c_str());
    std::printf("# validation: %s\n", validation ? validation->describe().c_str() : "none");
    print("train", *training, count, config.model.seq_len);
    if (validation) print("valid", *validation, count, config.model.seq_len);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "print_samples: %s\n", error.what());
    return 2;
  }
}
