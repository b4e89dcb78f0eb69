// What the multi-rank tests run on: the backend chosen on the command line (--backend), its
// device (where buffers live) and the world communicator. Set up by mpi_catch_main.cpp.
#pragma once

#include "ted/backend/device.hpp"
#include "ted/comm/communicator.hpp"

namespace ted::test {
CommBackend backend();
Device& device();
Communicator& world();
}  // namespace ted::test
