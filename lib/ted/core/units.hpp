// Byte sizes as people type them ("1K", "16M", "512", "2G": powers of 1024, as nccl-tests) and
// as tables print them.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ted {

// Throws ConfigError naming `what` (e.g. "-b") when the text is not a size.
std::size_t parse_bytes(std::string_view text, std::string_view what);
std::string format_bytes(std::size_t bytes);  // "1.0 KiB", "16 MiB"

}  // namespace ted
