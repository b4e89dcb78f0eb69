#include "ted/core/csv.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>

#include "ted/core/error.hpp"

namespace ted {

CsvTable::CsvTable(std::vector<std::string> header) : header_(std::move(header)) {}

CsvTable& CsvTable::row() {
  rows_.emplace_back();
  rows_.back().reserve(header_.size());
  return *this;
}

CsvTable& CsvTable::add(std::string_view text) {
  TED_CHECK(!rows_.empty(), "CsvTable::add before row()");
  TED_CHECK(rows_.back().size() < header_.size(), "more fields than header columns");
  rows_.back().push_back(csv_escape(text));
  return *this;
}

void CsvTable::set_last(std::size_t column, std::string_view text) {
  TED_CHECK(!rows_.empty() && column < rows_.back().size(), "CsvTable::set_last out of range");
  rows_.back()[column] = csv_escape(text);
}

CsvTable& CsvTable::add(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return add(std::string_view(text));
}

CsvTable& CsvTable::add(long long value) {
  return add(std::string_view(std::to_string(value)));
}

CsvTable& CsvTable::add(unsigned long long value) {
  return add(std::string_view(std::to_string(value)));
}

std::string CsvTable::to_string() const {
  std::string text;
  auto append_line = [&text](const std::vector<std::string>& fields) {
    for (std::size_t i = 0; i < fields.size(); ++i) {
      if (i) text += ',';
      text += fields[i];
    }
    text += '\n';
  };
  std::vector<std::string> header;
  for (const auto& name : header_) header.push_back(csv_escape(name));
  append_line(header);
  for (const auto& fields : rows_) {
    TED_CHECK(fields.size() == header_.size(), "CSV row has " + std::to_string(fields.size()) +
                                                   " fields, header has " +
                                                   std::to_string(header_.size()));
    append_line(fields);
  }
  return text;
}

void CsvTable::write_atomic(const std::filesystem::path& path) const {
  write_file_atomic(path, to_string());
}

std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path.string());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::vector<std::string>> lines(1);
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"')
        field += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      lines.back().push_back(std::move(field));
      field.clear();
    } else if (c == '\n') {
      lines.back().push_back(std::move(field));
      field.clear();
      lines.emplace_back();
    } else if (c != '\r') {
      field += c;
    }
  }
  if (!field.empty() || !lines.back().empty()) lines.back().push_back(field);
  if (lines.back().empty()) lines.pop_back();
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const auto& header = lines.front();
  for (std::size_t r = 1; r < lines.size(); ++r) {
    if (lines[r].size() != header.size())
      throw Error(path.string() + ": row " + std::to_string(r) + " has " +
                  std::to_string(lines[r].size()) + " fields, the header " +
                  std::to_string(header.size()));
    std::map<std::string, std::string> row;
    for (std::size_t c = 0; c < header.size(); ++c) row[header[c]] = lines[r][c];
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string csv_escape(std::string_view field) {
  if (field.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(field);
  std::string quoted = "\"";
  for (char c : field) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  quoted += '"';
  return quoted;
}

namespace {

std::string header_line(const CsvTable& table) {
  std::string text = table.to_string();
  return text.substr(0, text.find('\n') + 1);
}

// The first line of `path` with its newline ("" for a missing or empty file).
std::string first_line(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (in && std::getline(in, line)) return line + "\n";
  return "";
}

void write_all(int fd, std::string_view text, const std::filesystem::path& path) {
  while (!text.empty()) {
    ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0)
      throw Error("cannot append to " + path.string() + ": " + std::strerror(errno));
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

// Whether a file's header line `existing` names the first columns of `header` (both with their
// newline): the table gained columns at its end since the file was written.
bool widens(const std::string& existing, const std::string& header) {
  const std::size_t n = existing.size() - 1;  // without the newline
  return !existing.empty() && n < header.size() && header.compare(0, n, existing, 0, n) == 0 &&
         header[n] == ',';
}

// `text` (a CSV whose header is `existing`) with `header` and every row given empty fields for
// the columns `header` adds.
std::string widened(const std::string& text, const std::string& existing,
                    const std::string& header) {
  const auto columns = [](const std::string& line) {
    return std::count(line.begin(), line.end(), ',');
  };
  const std::string pad(static_cast<std::size_t>(columns(header) - columns(existing)), ',');
  std::string out = header;
  bool quoted = false;  // inside a quoted field, where a line break belongs to the field
  std::size_t row = existing.size();
  for (std::size_t i = existing.size(); i <= text.size(); ++i) {
    if (i < text.size() && text[i] == '"') quoted = !quoted;  // "" inside a field: twice
    if (i == text.size() || (text[i] == '\n' && !quoted)) {
      if (i > row) out.append(text, row, i - row).append(pad).push_back('\n');
      row = i + 1;
    }
  }
  return out;
}

// The copy a widening keeps of the file until the widened one is written.
std::filesystem::path widening_copy(const std::filesystem::path& path) {
  std::filesystem::path copy = path;
  copy += ".before-widening";
  return copy;
}

// ConfigError when a widening of `path` was cut short: its rows are in the copy.
void check_no_widening_left(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::exists(widening_copy(path), ec))
    throw ConfigError("CSV '" + path.string() +
                      "': a widening of it was cut short; its rows are in '" +
                      widening_copy(path).string() + "': restore that file or remove it");
}

// Closes the file (and so drops its lock) on every path out.
struct FileLock {
  int fd;
  ~FileLock() { ::close(fd); }
};

}  // namespace

void check_output_path(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec))
    throw ConfigError("output '" + path.string() + "' is a directory, not a file");
  if (fs::exists(path, ec)) {
    if (::access(path.c_str(), W_OK) != 0)
      throw ConfigError("output '" + path.string() +
                        "' cannot be written: " + std::strerror(errno));
    return;
  }
  // The nearest folder that exists must let us create what is missing below it.
  fs::path folder = fs::absolute(path, ec).parent_path();
  while (!folder.empty() && !fs::exists(folder, ec) && folder != folder.parent_path())
    folder = folder.parent_path();
  if (!fs::is_directory(folder, ec))
    throw ConfigError("output '" + path.string() + "': '" + folder.string() + "' is not a folder");
  if (::access(folder.c_str(), W_OK) != 0)
    throw ConfigError("output '" + path.string() + "': folder '" + folder.string() +
                      "' cannot be written: " + std::strerror(errno));
}

void check_csv_appendable(const CsvTable& table, const std::filesystem::path& path) {
  check_output_path(path);
  check_no_widening_left(path);
  const std::string existing = first_line(path);
  if (!existing.empty() && existing != header_line(table) && !widens(existing, header_line(table)))
    throw ConfigError("CSV '" + path.string() +
                      "' exists with other columns; choose another CSV path or move it");
}

void append_csv(const CsvTable& table, const std::filesystem::path& path) {
  check_csv_appendable(table, path);
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot open " + path.string() + ": " + std::strerror(errno));
  FileLock lock{fd};
  while (::flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) throw Error("cannot lock " + path.string() + ": " + std::strerror(errno));
  // Under the lock: the header as another job may just have written it.
  const std::string text = table.to_string();
  const std::string header = header_line(table);
  check_no_widening_left(path);  // under the lock: an empty file may be a widening cut short
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw Error("cannot stat " + path.string());
  std::string out;
  if (status.st_size == 0) {
    out = text;
  } else {
    const std::string existing = first_line(path);
    if (existing != header && !widens(existing, header))
      throw ConfigError("CSV '" + path.string() +
                        "' exists with other columns; choose another CSV path or move it");
    if (existing != header) {  // widened in place, under the lock, a copy kept until it is
      std::ifstream in(path, std::ios::binary);
      const std::string old((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::filesystem::path copy = widening_copy(path);
      write_file_atomic(copy, old);
      const std::string wide = widened(old, existing, header);
      if (::ftruncate(fd, 0) != 0)
        throw Error("cannot widen " + path.string() + ": " + std::strerror(errno));
      write_all(fd, wide, path);
      std::error_code ignored;
      std::filesystem::remove(copy, ignored);
      out.append(text, header.size(), std::string::npos);
      write_all(fd, out, path);
      return;
    }
    char last = '\n';
    std::ifstream in(path, std::ios::binary);
    in.seekg(status.st_size - 1);
    in.get(last);
    if (last != '\n') out.push_back('\n');  // a row cut short by a crash ends before ours
    out.append(text, header.size(), std::string::npos);
  }
  write_all(fd, out, path);
}

void write_file_atomic(const std::filesystem::path& path, std::string_view text) {
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) throw Error("cannot create folder " + path.parent_path().string() + ": " + ec.message());
  std::filesystem::path temporary = path;
  temporary += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write " + temporary.string());
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(temporary, ec);
      throw Error("write failed for " + temporary.string());
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw Error("cannot rename " + temporary.string() + " to " + path.string() + ": " +
                ec.message());
  }
}

}  // namespace ted
