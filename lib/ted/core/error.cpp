#include "ted/core/error.hpp"

#include <mpi.h>

namespace ted {

std::string rank_tag() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return "rank ?";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string tag = "rank ";  // appended: GCC 12 warns (-Wrestrict) on "literal" + a temporary
  tag += std::to_string(rank);
  return tag;
}

void throw_check_failure(const char* what, const char* statement, const char* file, int line,
                         const std::string& detail) {
  std::string message = std::string(what) + " failure: " + statement + " at " + file + ":" +
                        std::to_string(line) + " (" + rank_tag() + ")";
  if (!detail.empty()) message += ": " + detail;
  throw Error(message);
}

namespace detail {
std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return std::string("MPI error ").append(std::to_string(code));
  return std::string(text, static_cast<std::size_t>(length));
}
}  // namespace detail

}  // namespace ted
