// Catch2, version 2 (Debian 12: one header) or 3 (Debian 13, Ubuntu 24.04: a library), whichever
// the build found (TED_CATCH2_MAJOR, set by cmake/TedDependencies.cmake). The tests are written
// with Catch2 3's names; on Catch2 2 this header supplies them. Every test source includes this
// header, never Catch2's own; a test main defines CATCH_CONFIG_RUNNER before it (Catch2 2
// compiles its runner into that one source).
#pragma once

#include <string>

#if TED_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>
using Catch::Approx;  // Catch2 2 declared it outside its namespace; the tests use it so
#else
#include <catch2/catch.hpp>
namespace Catch {
#ifdef CATCH_IMPL  // the runner's source: there Catch2 2 declares its Session and parser
namespace Clara = clara;  // the command-line parser, renamed in Catch2 3
#endif
namespace Matchers {
// Catch2 3's name for the substring matcher (its Contains matches elements of a range).
inline auto ContainsSubstring(const std::string& text,
                              CaseSensitive::Choice cases = CaseSensitive::Yes) {
  return Contains(text, cases);
}
}  // namespace Matchers
}  // namespace Catch
#endif

#if TED_CATCH2_MAJOR >= 3 || defined(CATCH_IMPL)
namespace ted::test {
// Sends a session's report to a file (the MPI tests' ranks other than 0 write there).
inline void set_report_file(Catch::Session& session, const std::string& path) {
#if TED_CATCH2_MAJOR >= 3
  session.configData().defaultOutputFilename = path;
#else
  session.configData().outputFilename = path;
#endif
}
}  // namespace ted::test
#endif
