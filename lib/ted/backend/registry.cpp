#include "ted/backend/registry.hpp"

#include <mpi.h>

#include <string>

#include "ted/comm/mpi_communicator.hpp"
#include "ted/core/error.hpp"

#if TED_HAVE_CUDA
#include "ted/backend/cuda/cuda_device.hpp"
#endif
#if TED_HAVE_NCCL
#include "ted/comm/nccl/nccl_communicator.hpp"
#endif

namespace ted {

bool cuda_compiled() {
  return TED_HAVE_CUDA != 0;
}
bool nccl_compiled() {
  return TED_HAVE_NCCL != 0;
}

int gpu_count() {
#if TED_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Device> make_gpu_device(int ordinal) {
  if (!cuda_compiled())
    throw ConfigError("this build has no CUDA backend (configure found no nvcc; see the summary)");
  if (ordinal < 0 || ordinal >= gpu_count())
    throw ConfigError("GPU " + std::to_string(ordinal) + " is not visible (" +
                      std::to_string(gpu_count()) + " GPUs)");
#if TED_HAVE_CUDA
  return cuda::make_cuda_device(ordinal);
#else
  throw Error("unreachable: a GPU without CUDA");
#endif
}

void require_backend(CommBackend backend) {
  if (backend == CommBackend::mpi) return;
  if (!nccl_compiled())
    throw ConfigError(
        "backend nccl: this build has no NCCL backend (configure found no nvcc or no NCCL; "
        "see the feature summary)");
  if (gpu_count() == 0) throw ConfigError("backend nccl: no GPU is visible to this process");
}

namespace {
[[maybe_unused]] int local_rank() {
  MPI_Comm node;
  TED_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rank = 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
}
}  // namespace

std::unique_ptr<Device> make_device(CommBackend backend) {
  require_backend(backend);
  if (backend == CommBackend::mpi) return make_cpu_device();
#if TED_HAVE_CUDA
  return cuda::make_cuda_device(local_rank() % gpu_count());
#else
  throw Error("unreachable: nccl backend without CUDA");
#endif
}

std::unique_ptr<Communicator> make_world_communicator(CommBackend backend, Device& device,
                                                      Ledger* ledger) {
  require_backend(backend);
  if (backend == CommBackend::mpi) return MpiCommunicator::world(ledger);
#if TED_HAVE_NCCL
  MPI_Comm comm;
  TED_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<cuda::NcclCommunicator>(comm, GroupKind::world, ledger, device);
#else
  (void)device;
  throw Error("unreachable: nccl backend without NCCL");
#endif
}

}  // namespace ted
