// Catch2 main for tests that run on several MPI ranks (launched by mpirun from CTest).
// Every rank runs the same test cases; rank 0 reports on stdout, the other ranks write to a
// file that is printed only when that rank failed. The exit code is the same on every rank:
// failed if any rank failed, 77 (CTest's skip code) when the backend cannot run here.
//   mpirun -np 4 test_comm [--backend mpi|nccl] [catch2 options]
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>

#include "comm/test_env.hpp"
#include "ted/backend/registry.hpp"
#include "ted/comm/mpi_communicator.hpp"

namespace ted::test {
namespace {
CommBackend g_backend = CommBackend::mpi;
Device* g_device = nullptr;
Communicator* g_world = nullptr;
}  // namespace
CommBackend backend() {
  return g_backend;
}
Device& device() {
  return *g_device;
}
Communicator& world() {
  return *g_world;
}
}  // namespace ted::test

int main(int argc, char** argv) {
  ted::MpiSession mpi(&argc, &argv);
  Catch::Session session;
  std::string backend_name = "mpi";
  using Catch::clara::Opt;
  session.cli(session.cli() | Opt(backend_name, "mpi|nccl")["--backend"]("backend under test"));
  if (int rc = session.applyCommandLine(argc, argv)) return rc;

  ted::test::g_backend = ted::parse_comm_backend(backend_name);
  if (ted::test::g_backend == ted::CommBackend::nccl) {
    // One GPU per rank: NCCL does not put two ranks of a communicator on one GPU. Every rank
    // sees the same count, so every rank skips.
    if (!ted::nccl_compiled() || ted::gpu_count() < mpi.world_size()) {
      if (mpi.world_rank() == 0)
        std::printf("SKIPPED: %s\n",
                    ted::nccl_compiled()
                        ? ("needs " + std::to_string(mpi.world_size()) + " GPUs, " +
                           std::to_string(ted::gpu_count()) + " visible")
                              .c_str()
                        : "built without NCCL");
      return 77;
    }
  }

  std::string log_path;
  if (mpi.world_rank() != 0) {
    log_path = "test_comm.rank" + std::to_string(mpi.world_rank()) + ".log";
    session.configData().outputFilename = log_path;
  }
  int failed = 0;
  {
    auto device = ted::make_device(ted::test::g_backend);
    auto world = ted::make_world_communicator(ted::test::g_backend, *device, nullptr);
    ted::test::g_device = device.get();
    ted::test::g_world = world.get();
    failed = session.run();
    ted::test::g_world = nullptr;
  }

  // Print the other ranks' reports in rank order, only where they failed.
  for (int rank = 1; rank < mpi.world_size(); ++rank) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == mpi.world_rank() && failed) {
      std::ifstream log(log_path);
      std::cerr << "---- rank " << rank << " ----\n" << log.rdbuf() << std::flush;
    }
  }
  if (!log_path.empty()) std::remove(log_path.c_str());
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any_failed ? 1 : 0;
}
