#include "ted/core/units.hpp"

#include <cctype>
#include <cstdio>
#include <limits>

#include "ted/core/error.hpp"

namespace ted {

std::size_t parse_bytes(std::string_view text, std::string_view what) {
  auto fail = [&]() -> std::size_t {
    throw ConfigError(std::string(what) + ": '" + std::string(text) +
                      "' is not a byte size (expected digits with an optional K, M or G suffix)");
  };
  if (text.empty()) return fail();
  std::size_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    std::size_t digit = static_cast<std::size_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::size_t>::max() - digit) / 10) return fail();
    value = value * 10 + digit;
  }
  if (i == 0) return fail();
  std::size_t scale = 1;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K':
        scale = std::size_t{1} << 10;
        break;
      case 'M':
        scale = std::size_t{1} << 20;
        break;
      case 'G':
        scale = std::size_t{1} << 30;
        break;
      default:
        return fail();
    }
    ++i;
    if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;
    if (i != text.size()) return fail();
  }
  if (value > std::numeric_limits<std::size_t>::max() / scale) return fail();
  return value * scale;
}

std::string format_bytes(std::size_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof text, value < 10 ? "%.1f %s" : "%.0f %s", value, units[unit]);
  }
  return text;
}

}  // namespace ted
