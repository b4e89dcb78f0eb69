#include "ted/app/app_main.hpp"

#include <mpi.h>

#include <cstdio>
#include <exception>

#include "ted/core/error.hpp"

namespace ted {

std::string command_line(int argc, char** argv) {
  std::string text;
  for (int i = 0; i < argc; ++i) {
    if (i) text += ' ';
    text += argv[i];
  }
  return text;
}

int run_app(int argc, char** argv, CLI::App& app, const std::function<int(MpiSession&)>& body) {
  MpiSession mpi(&argc, &argv);
  const std::string name = app.get_name();
  bool rank0 = mpi.world_rank() == 0;
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      if (rank0) std::fputs(app.help().c_str(), stdout);
      return 0;
    } catch (const CLI::ParseError& e) {
      throw ConfigError(e.what());
    }
    return body(mpi);
  } catch (const ConfigError& e) {
    if (rank0) std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s: %s\n", name.c_str(), rank_tag().c_str(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
}

}  // namespace ted
