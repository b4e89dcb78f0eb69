// Typed configuration keys bound to variables, filled from a YAML file and from command-line
// overrides (--set section.key=value). Nested YAML maps make dotted keys ("model.hidden").
// Every problem is a ConfigError of one line naming where (file or --set), the key and the
// rule: an unknown key, a key given twice in one map, a value of the wrong type (numbers must
// be finite), a missing, unreadable or directory path.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ted/core/dtype.hpp"

namespace ted {

// Where a config's values come from, for the first words of an error message: with `key`, the
// command line's assignment of it ("the command line's sweep.ranks=1,0,4") when an override set
// it, else the file; without one, the file and the keys the command line set ("cpu.yaml with
// run.dtype from the command line"), leaving out where the CSV goes (*.csv), which changes no
// rule's verdict. `overrides` are "key=value", program options included.
std::string config_origin(const std::string& path, const std::vector<std::string>& overrides,
                          const std::string& key = "");

class ConfigSchema {
 public:
  void add(const std::string& key, int* target);
  void add(const std::string& key, std::int64_t* target);
  void add(const std::string& key, std::uint64_t* target);
  void add(const std::string& key, double* target);
  void add(const std::string& key, bool* target);
  void add(const std::string& key, std::string* target);
  // One of `names`, stored as its position in them through `set` (and read back by `get`):
  // an enumeration's key (add_enum).
  void add_choice(const std::string& key, std::vector<std::string> names,
                  std::function<void(int)> set, std::function<int()> get);
  template <typename Enum>
  void add_enum(const std::string& key, Enum* target, std::vector<std::string> names) {
    add_choice(
        key, std::move(names), [target](int i) { *target = static_cast<Enum>(i); },
        [target] { return static_cast<int>(*target); });
  }
  // A precision, by its run name (precision_name: fp32, bf16, ...), one of `accepted`.
  void add(const std::string& key, DataType* target, std::vector<DataType> accepted);
  // A file path. Relative in a YAML file: as given when that exists from the working folder,
  // else found from the YAML's folder and its parents (so a config names
  // experiments/clusters/x.yaml and works from anywhere in or outside the repository).
  void add_path(const std::string& key, std::string* target);
  // A file path or the prefix of files named <prefix><suffix> (a Megatron dataset's
  // <prefix>.idx and <prefix>.bin): found as add_path's paths, a folder matching when it holds
  // the path itself or <path><suffix>.
  void add_prefix(const std::string& key, std::string* target, const std::string& suffix);
  // Lists: a YAML sequence of scalars ("[1, 2, 4]"), or on the command line "1,2,4".
  void add(const std::string& key, std::vector<int>* target);
  void add(const std::string& key, std::vector<std::string>* target);
  // A key whose value, of any shape, another reader takes from the same file (a cluster file's
  // measured curves: a list of maps): load_yaml passes over it, given() tells whether it was there.
  void add_read_elsewhere(const std::string& key);

  void load_yaml(const std::string& path);
  // "key=value"; `origin` names where it came from in messages (e.g. "--set").
  void set(const std::string& assignment, const std::string& origin = "--set");
  // The command line's assignments in order, each named in messages as "the command line's
  // key=value" (config_origin's words), whether --set or a program option gave it.
  void set_all(const std::vector<std::string>& assignments);
  // Sets one key from text; `where` names the source in messages.
  void set_value(const std::string& key, const std::string& text, const std::string& where);

  // "key=value" for every key, in key order (for logs and CSV sidecars).
  std::vector<std::string> dump() const;
  // Every key as JSON, in key order, one a line: its type (integer, number, boolean, string,
  // path, choice with its "choices", integers, strings) and its value now as "default" (a fresh
  // config's schema is the defaults); json_values: each key's value alone. What --print-config
  // prints, and what the Python side reads (experiments/config_schema.json).
  std::string json_schema() const;
  std::string json_values() const;

  // Whether the YAML or an override gave `key`.
  bool given(const std::string& key) const;
  // ConfigError "<where>: key 'k' is missing (<why>)" for the first of `keys` not given.
  void require(const std::vector<std::string>& keys, const std::string& where,
               const std::string& why) const;

 private:
  struct Entry {
    std::string type;  // "an integer", "a number", "true or false", "a string", ...
    std::function<bool(const std::string&)> parse;
    std::function<std::string()> print;
    bool list = false;
    bool path = false;
    bool elsewhere = false;   // add_read_elsewhere
    std::string suffix = "";  // a prefix's: the path matches where <path><suffix> exists
    std::string kind = "";    // json_schema's type
    std::vector<std::string> choices = {};
  };
  static std::string json_value(const Entry& entry);
  void add_entry(const std::string& key, Entry entry);
  std::map<std::string, Entry> entries_;
  std::set<std::string> given_;
};

// ConfigError "<key> must be at least <minimum>, got <value>" (and "at most" for in_range).
void at_least(long long value, long long minimum, const std::string& key);
void in_range(long long value, long long minimum, long long maximum, const std::string& key);

// ConfigError "<what> '<path>' does not exist" (or is a directory, or cannot be read) unless
// `path` is a readable regular file.
void check_readable_file(const std::string& path, const std::string& what);

}  // namespace ted
