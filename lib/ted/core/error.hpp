// Error types and the check macros. The library throws; only main() in apps/ prints and exits.
//   ted::Error        - a failure at run time (an MPI call failed, a buffer is too small, ...)
//   ted::ConfigError  - bad input from the user (options, YAML, layout); apps exit with code 2
//   ted::OutOfMemory  - an allocation failed; apps exit with code 2
//   ted::UnusableGpu  - the CUDA runtime cannot use the machine's GPUs (a driver older than the
//                       runtime, say); apps and tests exit with code 2: an error, not a skip
// Every message carries its place: the failing statement, file:line and the MPI rank.
#pragma once

#include <stdexcept>
#include <string>

namespace ted {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input. The message is one line that names the problem and the rule it breaks.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// An allocation that failed: the message names what was being allocated and how many bytes.
// Exit code 2 like bad input (the run asked for more than the machine has), but it may happen
// on one rank only.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// The CUDA runtime reports an error other than "no device" when asked for the GPUs: the run
// cannot use them, and a test that needs a GPU must fail rather than skip. The message is one
// line naming the CUDA error.
class UnusableGpu : public Error {
 public:
  using Error::Error;
};

// "rank 3" when MPI is initialised, "rank ?" before; used in every check message.
std::string rank_tag();

[[noreturn]] void throw_check_failure(const char* what, const char* statement, const char* file,
                                      int line, const std::string& detail);

}  // namespace ted

// Checks a condition that the library relies on; throws ted::Error with the place.
#define TED_CHECK(cond, detail)                                                            \
  do {                                                                                     \
    if (!(cond)) ::ted::throw_check_failure("check", #cond, __FILE__, __LINE__, (detail)); \
  } while (0)

// Checks an MPI call; throws ted::Error with MPI's own error string.
#define TED_CHECK_MPI(stmt)                                                     \
  do {                                                                          \
    int ted_mpi_rc_ = (stmt);                                                   \
    if (ted_mpi_rc_ != 0)                                                       \
      ::ted::throw_check_failure("MPI", #stmt, __FILE__, __LINE__,              \
                                 ::ted::detail::mpi_error_string(ted_mpi_rc_)); \
  } while (0)

namespace ted::detail {
std::string mpi_error_string(int code);
}  // namespace ted::detail
