// The command-line options that each stand for one YAML key, in one table that ted_train and
// the experiments (experiment_main) share: every option given becomes the assignment
// "key=value" applied after --set's, so the config's rules judge it (a negative --steps is
// refused like a negative training.steps, never ignored) and an error names it as the command
// line's value. A new option is one row here.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ted {

// Which programs take an option.
enum KeyOptionUsers : unsigned { kTrainOption = 1, kExperimentOption = 2 };

struct KeyOption {
  const char* name;  // "--dtype"
  const char* key;   // "run.dtype"
  const char* help;
  unsigned users;
  const char* type = "TEXT";         // what --help shows the value as
  const char* flag_value = nullptr;  // a flag: the value it sets; null: the option takes one
};

// The table, in the order the options' assignments are applied (and --help lists them).
const std::vector<KeyOption>& key_options();

// The table's options of `users`, declared on `app`; assignments() after parsing.
class KeyOptions {
 public:
  KeyOptions(CLI::App& app, unsigned users);
  KeyOptions(const KeyOptions&) = delete;
  KeyOptions& operator=(const KeyOptions&) = delete;
  // "key=value" of every option given, in the table's order.
  std::vector<std::string> assignments() const;

 private:
  struct Bound {
    const KeyOption* option;
    std::string value;
    bool set = false;  // a flag's
    CLI::Option* cli = nullptr;
  };
  std::vector<Bound> bound_;
};

}  // namespace ted
