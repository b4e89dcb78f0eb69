// Catch2 main for tests that run on several MPI ranks (launched by mpirun from CTest).
// Every rank runs the same test cases; rank 0 reports on stdout, the other ranks write to a
// file that is printed only when that rank failed. The exit code is the same on every rank:
// failed if any rank failed, 77 (CTest's skip code) when the backend cannot run here (no GPU),
// 2 with one line when the CUDA runtime cannot use the GPUs there are (an old driver).
//   mpirun -np 4 test_ted [--device cpu|cuda] [--backend mpi|nccl] [--staged]
//                         [--dtype fp32|bf16|fp16] [catch2 options]
// --device cuda puts the buffers on a GPU (ranks share GPUs round-robin); --backend nccl needs
// one GPU per rank. --staged runs MPI through host staging buffers even on the CPU device, so
// the staged communicator is tested where there is no GPU (on a GPU, mpi is always staged).
#define CATCH_CONFIG_RUNNER
#include "catch.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>

#include "comm/test_env.hpp"
#include "ted/backend/registry.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/comm/staged_mpi_communicator.hpp"
#include "ted/core/error.hpp"

namespace ted::test {
namespace {
CommBackend g_backend = CommBackend::mpi;
Device* g_device = nullptr;
Communicator* g_world = nullptr;
Communicator* g_control = nullptr;
std::string g_dtype = "fp32";
}  // namespace
std::string dtype() {
  return g_dtype;
}
CommBackend backend() {
  return g_backend;
}
Device& device() {
  return *g_device;
}
Communicator& world() {
  return *g_world;
}
Communicator& control() {
  return *g_control;
}
}  // namespace ted::test

int main(int argc, char** argv) {
  ted::MpiSession mpi(&argc, &argv, ted::mpi_thread_level());
  Catch::Session session;
  std::string backend_name = "mpi", device_name = "cpu", wait_name = "blocking";
  bool staged = false;
  using Catch::Clara::Opt;
  session.cli(session.cli() |
              Opt(backend_name, "mpi|nccl")["--backend"]("what carries device buffers") |
              Opt(device_name, "cpu|cuda")["--device"]("where buffers live") |
              Opt(staged)["--staged"]("MPI through host staging buffers, also on the CPU") |
              Opt(ted::test::g_dtype, "fp32|bf16|fp16")["--dtype"]("the models' storage type") |
              Opt(wait_name, "blocking|sleep")["--wait"]("how ranks wait in MPI collectives"));
  if (int rc = session.applyCommandLine(argc, argv)) return rc;

  ted::test::g_backend = ted::parse_comm_backend(backend_name);
  const ted::DeviceKind kind = ted::parse_device_kind(device_name);
  // Every rank sees the same machine, so every rank skips alike.
  try {
    ted::require_backend(kind, ted::test::g_backend, MPI_COMM_WORLD);
  } catch (const ted::UnusableGpu& e) {  // a GPU that is there but cannot be used: not a skip
    if (mpi.world_rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const ted::ConfigError& e) {
    if (mpi.world_rank() == 0) std::printf("SKIPPED: %s\n", e.what());
    return 77;
  }

  if (wait_name == "sleep") ted::set_mpi_wait(ted::MpiWait::sleep);  // as run.wait

  std::string log_path;
  if (mpi.world_rank() != 0) {
    log_path = "test_comm.rank" + std::to_string(mpi.world_rank()) + ".log";
    ted::test::set_report_file(session, log_path);
  }
  int failed = 0;
  {
    auto device = ted::make_device(kind);
    auto control = ted::MpiCommunicator::world(nullptr);
    std::unique_ptr<ted::Communicator> world;
    if (staged) {
      MPI_Comm comm;
      MPI_Comm_dup(MPI_COMM_WORLD, &comm);
      world = std::make_unique<ted::StagedMpiCommunicator>(comm, ted::GroupKind::world, nullptr,
                                                           *device);
    } else {
      world = ted::make_device_communicator(ted::test::g_backend, *device, MPI_COMM_WORLD, nullptr);
    }
    if (mpi.world_rank() == 0)
      std::printf("# %d ranks, device %s, device buffers over %s, models in %s\n", mpi.world_size(),
                  device->name().c_str(), world->name().c_str(), ted::test::g_dtype.c_str());
    ted::test::g_device = device.get();
    ted::test::g_world = world.get();
    ted::test::g_control = control.get();
    failed = session.run();
    ted::test::g_world = nullptr;
    ted::test::g_control = nullptr;
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
