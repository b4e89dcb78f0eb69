// Prints the columns of the CSVs the C++ programs write, one CSV a line: "<name>: a,b,c". For
// tests/run/check_csv_columns.py, which holds the DeepSpeed runner's lists
// (baselines/deepspeed/run.py) equal to them: the C++ tables are the one place they are declared.
//   build/tests/print_csv_columns
#include <cstdio>
#include <string>
#include <vector>

#include "ted/experiments/rows.hpp"
#include "ted/run/train_csv.hpp"

namespace {
void print(const char* name, const std::vector<std::string>& columns) {
  std::printf("%s: ", name);
  for (std::size_t i = 0; i < columns.size(); ++i)
    std::printf("%s%s", i ? "," : "", columns[i].c_str());
  std::printf("\n");
}
}  // namespace

int main() {
  print("train", ted::train_csv_columns().names());
  print("experiments", ted::experiments::result_table().header());
  return 0;
}
