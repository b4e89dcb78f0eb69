#include "ted/core/config_schema.hpp"

#include <algorithm>

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "ted/core/error.hpp"

namespace ted {

namespace {

template <typename Int>
bool parse_integer(const std::string& text, Int* out) {
  Int value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return false;
  *out = value;
  return true;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  // inf and nan parse, but no key of any config means them: they would only surface later
  // as dropped tokens or a NaN loss.
  if (errno != 0 || end != text.c_str() + text.size() || !std::isfinite(value)) return false;
  *out = value;
  return true;
}

std::string number_text(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

std::vector<std::string> precision_names(const std::vector<DataType>& types) {
  std::vector<std::string> names;
  for (DataType d : types) names.emplace_back(precision_name(d));
  return names;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A list's text ("a,b,c", as print gives it) as a JSON array, its items quoted when `quote`.
std::string json_list(const std::string& text, bool quote) {
  std::string out = "[";
  for (std::size_t start = 0; !text.empty();) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    out += (start ? ", " : "") + (quote ? json_string(item) : item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out + "]";
}

}  // namespace

void ConfigSchema::add_entry(const std::string& key, Entry entry) {
  entries_[key] = std::move(entry);
}

void ConfigSchema::add(const std::string& key, int* target) {
  add_entry(key, {"an integer", [target](const std::string& t) { return parse_integer(t, target); },
                  [target] { return std::to_string(*target); }});
  entries_[key].kind = "integer";
}

void ConfigSchema::add(const std::string& key, std::int64_t* target) {
  add_entry(key, {"an integer", [target](const std::string& t) { return parse_integer(t, target); },
                  [target] { return std::to_string(*target); }});
  entries_[key].kind = "integer";
}

void ConfigSchema::add(const std::string& key, std::uint64_t* target) {
  add_entry(key, {"a non-negative integer",
                  [target](const std::string& t) { return parse_integer(t, target); },
                  [target] { return std::to_string(*target); }});
  entries_[key].kind = "integer";
}

void ConfigSchema::add(const std::string& key, double* target) {
  add_entry(key,
            {"a finite number", [target](const std::string& t) { return parse_double(t, target); },
             [target] { return number_text(*target); }});
  entries_[key].kind = "number";
}

void ConfigSchema::add(const std::string& key, bool* target) {
  add_entry(key, {"true or false",
                  [target](const std::string& t) {
                    if (t == "true" || t == "1") return *target = true, true;
                    if (t == "false" || t == "0") return *target = false, true;
                    return false;
                  },
                  [target] { return std::string(*target ? "true" : "false"); }});
  entries_[key].kind = "boolean";
}

void ConfigSchema::add_choice(const std::string& key, std::vector<std::string> names,
                              std::function<void(int)> set, std::function<int()> get) {
  std::string type;
  for (std::size_t i = 0; i < names.size(); ++i)
    type += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  add_entry(key, {type,
                  [names, set](const std::string& t) {
                    for (std::size_t i = 0; i < names.size(); ++i)
                      if (t == names[i]) return set(static_cast<int>(i)), true;
                    return false;
                  },
                  [names, get] { return names[static_cast<std::size_t>(get())]; }});
  entries_[key].kind = "choice";
  entries_[key].choices = names;
}

void ConfigSchema::add(const std::string& key, DataType* target, std::vector<DataType> accepted) {
  std::string names;
  for (std::size_t i = 0; i < accepted.size(); ++i)
    names += (i == 0                     ? ""
              : i + 1 == accepted.size() ? " or "
                                         : ", ") +
             std::string(precision_name(accepted[i]));
  add_entry(key, {names,
                  [target, accepted](const std::string& t) {
                    for (DataType d : accepted)
                      if (t == precision_name(d)) return *target = d, true;
                    return false;
                  },
                  [target] { return std::string(precision_name(*target)); }});
  entries_[key].kind = "choice";
  entries_[key].choices = precision_names(accepted);
}

void ConfigSchema::add(const std::string& key, std::string* target) {
  add_entry(key, {"a string", [target](const std::string& t) { return *target = t, true; },
                  [target] { return *target; }});
  entries_[key].kind = "string";
}

void ConfigSchema::add_read_elsewhere(const std::string& key) {
  Entry entry{"read elsewhere", [](const std::string&) { return true; },
              [] { return std::string("(read elsewhere)"); }};
  entry.elsewhere = true;
  add_entry(key, std::move(entry));
}

void ConfigSchema::add_path(const std::string& key, std::string* target) {
  add(key, target);
  entries_[key].path = true;
  entries_[key].kind = "path";
}

void ConfigSchema::add_prefix(const std::string& key, std::string* target,
                              const std::string& suffix) {
  add_path(key, target);
  entries_[key].suffix = suffix;
}

void ConfigSchema::add(const std::string& key, std::vector<int>* target) {
  Entry entry{"a list of integers",
              [target](const std::string& text) {
                std::vector<int> values;
                std::size_t start = 0;
                while (true) {
                  std::size_t comma = text.find(',', start);
                  std::string item = text.substr(
                      start, comma == std::string::npos ? std::string::npos : comma - start);
                  int value = 0;
                  if (!parse_integer(item, &value)) return false;
                  values.push_back(value);
                  if (comma == std::string::npos) break;
                  start = comma + 1;
                }
                *target = values;
                return true;
              },
              [target] {
                std::string text;
                for (std::size_t i = 0; i < target->size(); ++i) {
                  if (i) text += ',';
                  text += std::to_string((*target)[i]);
                }
                return text;
              }};
  entry.list = true;
  add_entry(key, entry);
  entries_[key].kind = "integers";
}

void ConfigSchema::add(const std::string& key, std::vector<std::string>* target) {
  Entry entry{"a list of strings",
              [target](const std::string& text) {
                std::vector<std::string> values;
                std::size_t start = 0;
                while (true) {
                  std::size_t comma = text.find(',', start);
                  values.push_back(text.substr(
                      start, comma == std::string::npos ? std::string::npos : comma - start));
                  if (values.back().empty()) return false;
                  if (comma == std::string::npos) break;
                  start = comma + 1;
                }
                *target = values;
                return true;
              },
              [target] {
                std::string text;
                for (std::size_t i = 0; i < target->size(); ++i) {
                  if (i) text += ',';
                  text += (*target)[i];
                }
                return text;
              }};
  entry.list = true;
  add_entry(key, entry);
  entries_[key].kind = "strings";
}

void ConfigSchema::set_value(const std::string& key, const std::string& text,
                             const std::string& where) {
  auto it = entries_.find(key);
  if (it == entries_.end()) throw ConfigError(where + ": unknown key '" + key + "'");
  if (!it->second.parse(text))
    throw ConfigError(where + ": key '" + key + "' must be " + it->second.type + ", got '" + text +
                      "'");
  given_.insert(key);
}

bool ConfigSchema::given(const std::string& key) const {
  return given_.count(key) != 0;
}

void ConfigSchema::require(const std::vector<std::string>& keys, const std::string& where,
                           const std::string& why) const {
  for (const auto& key : keys)
    if (!given(key)) throw ConfigError(where + ": key '" + key + "' is missing (" + why + ")");
}

void at_least(long long value, long long minimum, const std::string& key) {
  if (value < minimum)
    throw ConfigError(key + " must be at least " + std::to_string(minimum) + ", got " +
                      std::to_string(value));
}

void in_range(long long value, long long minimum, long long maximum, const std::string& key) {
  at_least(value, minimum, key);
  if (value > maximum)
    throw ConfigError(key + " must be at most " + std::to_string(maximum) + ", got " +
                      std::to_string(value));
}

void check_readable_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code error;
  const auto status = fs::status(path, error);
  if (!fs::exists(status)) throw ConfigError(what + " '" + path + "' does not exist");
  if (fs::is_directory(status))
    throw ConfigError(what + " '" + path + "' is a directory, not a file");
  if (!fs::is_regular_file(status))
    throw ConfigError(what + " '" + path + "' is not a regular file");
  std::ifstream probe(path);
  if (!probe) throw ConfigError(what + " '" + path + "' cannot be read: " + std::strerror(errno));
}

void ConfigSchema::set(const std::string& assignment, const std::string& origin) {
  auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0)
    throw ConfigError(origin + ": '" + assignment + "' is not of the form key=value");
  set_value(assignment.substr(0, equals), assignment.substr(equals + 1), origin);
}

void ConfigSchema::set_all(const std::vector<std::string>& assignments) {
  for (const auto& assignment : assignments) set(assignment, "the command line's " + assignment);
}

namespace {
// `name` as given when it exists (or is absolute or empty), else the first that exists of
// <folder of yaml>/name, <its parent>/name, ...; unchanged when none does (the check that
// follows names it). With a `suffix` (a prefix's), <name><suffix> existing matches too.
std::string locate(const std::string& name, const std::string& yaml, const std::string& suffix) {
  namespace fs = std::filesystem;
  std::error_code error;
  auto found = [&](const fs::path& path) {
    return fs::exists(path, error) ||
           (!suffix.empty() && fs::exists(fs::path(path.string() + suffix), error));
  };
  if (name.empty() || fs::path(name).is_absolute() || found(name)) return name;
  for (fs::path folder = fs::absolute(yaml, error).parent_path(); !folder.empty();
       folder = folder.parent_path()) {
    if (found(folder / name)) return (folder / name).lexically_normal().string();
    if (folder == folder.parent_path()) break;
  }
  return name;
}
}  // namespace

void ConfigSchema::load_yaml(const std::string& path) {
  check_readable_file(path, "config");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": not valid YAML: " + e.msg + " (line " +
                      std::to_string(e.mark.line + 1) + ")");
  }
  if (root.IsNull()) return;
  if (!root.IsMap()) throw ConfigError(path + ": the top level must be a map of sections");
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& node,
                                                                        const std::string& prefix) {
    std::set<std::string> seen;  // yaml-cpp keeps both of two equal keys; we refuse them
    for (const auto& item : node) {
      std::string key = prefix + item.first.as<std::string>();
      if (!seen.insert(key).second)
        throw ConfigError(path + ": key '" + key + "' appears twice (line " +
                          std::to_string(item.first.Mark().line + 1) + ")");
      const YAML::Node& value = item.second;
      auto known = entries_.find(key);
      if (known != entries_.end() && known->second.elsewhere) {
        given_.insert(key);
        continue;
      }
      if (value.IsSequence() && known != entries_.end() && known->second.list) {
        std::string joined;
        for (std::size_t i = 0; i < value.size(); ++i) {
          if (!value[i].IsScalar())
            throw ConfigError(path + ": key '" + key + "' must be " + known->second.type +
                              ", got a nested value");
          joined += (i ? "," : "") + value[i].Scalar();
        }
        set_value(key, joined, path);
      } else if (value.IsMap()) {
        walk(value, key + ".");
      } else if (value.IsScalar() && known != entries_.end() && known->second.path) {
        set_value(key, locate(value.Scalar(), path, known->second.suffix), path);
      } else if (value.IsScalar()) {
        set_value(key, value.Scalar(), path);
      } else if (entries_.count(key)) {
        throw ConfigError(path + ": key '" + key + "' must be " + entries_[key].type +
                          ", got a list or an empty value");
      } else {
        throw ConfigError(path + ": unknown key '" + key + "'");
      }
    }
  };
  walk(root, "");
}

std::string ConfigSchema::json_value(const Entry& entry) {
  const std::string text = entry.print();
  if (entry.kind == "integer" || entry.kind == "number" || entry.kind == "boolean") return text;
  if (entry.kind == "integers") return json_list(text, false);
  if (entry.kind == "strings") return json_list(text, true);
  return json_string(text);
}

std::string ConfigSchema::json_schema() const {
  std::string out = "{";
  for (const auto& [key, entry] : entries_) {
    out += (out.size() > 1 ? ",\n " : "\n ") + json_string(key) +
           ": {\"type\": " + json_string(entry.kind);
    if (!entry.choices.empty()) {
      out += ", \"choices\": [";
      for (std::size_t i = 0; i < entry.choices.size(); ++i)
        out += (i ? ", " : "") + json_string(entry.choices[i]);
      out += "]";
    }
    out += ", \"default\": " + json_value(entry) + "}";
  }
  return out + "\n}";
}

std::string ConfigSchema::json_values() const {
  std::string out = "{";
  for (const auto& [key, entry] : entries_)
    out += (out.size() > 1 ? ",\n " : "\n ") + json_string(key) + ": " + json_value(entry);
  return out + "\n}";
}

std::vector<std::string> ConfigSchema::dump() const {
  std::vector<std::string> lines;
  for (const auto& [key, entry] : entries_) lines.push_back(key + "=" + entry.print());
  return lines;
}

std::string config_origin(const std::string& path, const std::vector<std::string>& overrides,
                          const std::string& key) {
  auto key_of = [](const std::string& assignment) {
    return assignment.substr(0, assignment.find('='));
  };
  if (!key.empty()) {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it)  // the last one counts
      if (key_of(*it) == key) return "the command line's " + *it;
    return path;
  }
  std::vector<std::string> keys;  // what the command line changed, the output CSV aside
  for (const auto& assignment : overrides) {
    const std::string name = key_of(assignment);
    const bool output = name.size() > 4 && name.compare(name.size() - 4, 4, ".csv") == 0;
    if (!output && std::find(keys.begin(), keys.end(), name) == keys.end()) keys.push_back(name);
  }
  if (keys.empty()) return path;
  std::string list;
  for (std::size_t i = 0; i < keys.size(); ++i)
    list += (i == 0 ? "" : i + 1 == keys.size() ? " and " : ", ") + keys[i];
  return path + " with " + list + " from the command line";
}

}  // namespace ted
