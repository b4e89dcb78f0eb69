// CSV tables written atomically: rows are collected in memory and the file appears only when
// complete (written to a temporary name beside it, then renamed), so an interrupted or failed
// run never leaves a truncated file and never touches an existing one.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ted {

class CsvTable {
 public:
  explicit CsvTable(std::vector<std::string> header);

  // Starts a new row; then add() each column in header order.
  CsvTable& row();
  CsvTable& add(std::string_view text);
  CsvTable& add(const char* text) { return add(std::string_view(text)); }
  CsvTable& add(double value);  // %.9g
  CsvTable& add(long long value);
  CsvTable& add(unsigned long long value);
  CsvTable& add(int value) { return add(static_cast<long long>(value)); }
  CsvTable& add(long value) { return add(static_cast<long long>(value)); }
  CsvTable& add(unsigned long value) { return add(static_cast<unsigned long long>(value)); }

  // Replaces field `column` of the last row (e.g. a total known only at the end).
  void set_last(std::size_t column, std::string_view text);

  std::size_t rows() const { return rows_.size(); }
  const std::vector<std::string>& header() const { return header_; }
  std::string to_string() const;

  // Replaces `path` atomically (parent folders created). Throws ted::Error if a row is short.
  void write_atomic(const std::filesystem::path& path) const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// Reads a CSV written by CsvTable (RFC 4180 quoting): one map from column to field per row.
// Throws ted::Error when the file cannot be read.
std::vector<std::map<std::string, std::string>> read_csv(const std::filesystem::path& path);

// Quotes a field when it holds a comma, quote or line break (RFC 4180).
std::string csv_escape(std::string_view field);

// Appends `table`'s rows to the CSV at `path` (folders created), under an exclusive lock (flock)
// on the file: a new or empty file gets the header first; an existing one must have the same
// header (ConfigError otherwise), or one the table extends with columns at its end (a file
// written before columns were added): that file is widened first, its rows given empty fields
// for the new columns, a copy of it kept in <path>.before-widening until the widened file is
// written. The rows go in one write at the end of the file, so two jobs appending at once lose
// no row, and a run killed between two appends leaves whole rows.
void append_csv(const CsvTable& table, const std::filesystem::path& path);

// ConfigError naming `path` when a run could not write it: a directory, a file or folder that
// cannot be written. Creates nothing; for checks before a run.
void check_output_path(const std::filesystem::path& path);

// ConfigError naming `path` when a run could not append `table` to it: a directory, a file with
// another header (neither the table's nor its first columns), or a folder that cannot be written.
// Creates nothing; for checks before a run.
void check_csv_appendable(const CsvTable& table, const std::filesystem::path& path);

// Writes `text` to `path` through a temporary file and a rename.
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

}  // namespace ted
