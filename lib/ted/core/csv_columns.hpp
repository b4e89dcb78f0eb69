// A CSV declared once: a list of columns, each a name and the function that gives a row's field,
// used for both the header and every row, so the two cannot drift apart (a column added to
// the header and forgotten in the row, or the other way round, is impossible by construction).
//
//   CsvColumns<Step> columns;
//   columns.add("loss", [](const Step& s) { return s.loss; });
//   CsvTable table = columns.table();
//   columns.add_row(table, step);
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ted/core/csv.hpp"
#include "ted/core/error.hpp"

namespace ted {

// One field, written as CsvTable::add writes its type (doubles %.9g); "" is an empty field
// (not measured, not applicable). An int converts to long long.
using CsvField = std::variant<std::string, double, long long, unsigned long long>;

template <class Row>
class CsvColumns {
 public:
  using Value = std::function<CsvField(const Row&)>;

  CsvColumns& add(std::string name, Value value) {
    names_.push_back(std::move(name));
    values_.push_back(std::move(value));
    return *this;
  }

  const std::vector<std::string>& names() const { return names_; }
  CsvTable table() const { return CsvTable(names_); }  // the header, no rows

  // A new row of `table` (which has this header), one field per column.
  void add_row(CsvTable& table, const Row& row) const {
    table.row();
    for (const auto& value : values_)
      std::visit([&](const auto& field) { table.add(field); }, value(row));
  }

  // The position of column `name` (for CsvTable::set_last); ted::Error when there is none.
  std::size_t index(std::string_view name) const {
    for (std::size_t i = 0; i < names_.size(); ++i)
      if (names_[i] == name) return i;
    throw Error("no CSV column '" + std::string(name) + "'");
  }

 private:
  std::vector<std::string> names_;
  std::vector<Value> values_;
};

}  // namespace ted
