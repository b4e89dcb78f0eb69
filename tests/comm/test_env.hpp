// What the multi-rank tests run on (set up by mpi_catch_main.cpp from its options): the device
// where buffers live, the world communicator that carries them (MPI, host-staged MPI or NCCL),
// and the host MPI world that carries control scalars.
#pragma once

#include <string>

#include "ted/comm/communicator.hpp"
#include "ted/device/device.hpp"

namespace ted::test {
CommBackend backend();  // what carries device buffers: mpi or nccl
Device& device();
Communicator& world();    // device buffers
Communicator& control();  // host scalars (MPI)
std::string dtype();      // the storage type the model tests run in: fp32, bf16 or fp16
}  // namespace ted::test
