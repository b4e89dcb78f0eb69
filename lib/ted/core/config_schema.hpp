// Typed configuration keys bound to variables, filled from a YAML file and from command-line
// overrides (--set section.key=value). Nested YAML maps make dotted keys ("model.hidden").
// Every problem is a ConfigError of one line naming where (file or --set), the key and the
// rule: an unknown key, a value of the wrong type, a missing or unreadable file.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ted {

class ConfigSchema {
 public:
  void add(const std::string& key, int* target);
  void add(const std::string& key, std::int64_t* target);
  void add(const std::string& key, std::uint64_t* target);
  void add(const std::string& key, double* target);
  void add(const std::string& key, bool* target);
  void add(const std::string& key, std::string* target);
  // Lists: a YAML sequence of scalars ("[1, 2, 4]"), or on the command line "1,2,4".
  void add(const std::string& key, std::vector<int>* target);
  void add(const std::string& key, std::vector<std::string>* target);

  void load_yaml(const std::string& path);
  // "key=value"; `origin` names where it came from in messages (e.g. "--set").
  void set(const std::string& assignment, const std::string& origin = "--set");
  // Sets one key from text; `where` names the source in messages.
  void set_value(const std::string& key, const std::string& text, const std::string& where);

  // "key=value" for every key, in key order (for logs and CSV sidecars).
  std::vector<std::string> dump() const;

 private:
  struct Entry {
    std::string type;  // "an integer", "a number", "true or false", "a string", ...
    std::function<bool(const std::string&)> parse;
    std::function<std::string()> print;
    bool list = false;
  };
  void add_entry(const std::string& key, Entry entry);
  std::map<std::string, Entry> entries_;
};

}  // namespace ted
