// The git revision the binaries were built from ("-dirty" appended when the tree had
// uncommitted changes), regenerated at every build by cmake/WriteGitRevision.cmake.
#pragma once

#include <string_view>

namespace ted {
std::string_view git_revision();
}  // namespace ted
