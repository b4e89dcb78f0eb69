#include "ted/backend/registry.hpp"

#include <string>
#include <type_traits>
#include <utility>

#include "ted/backend/cpu/cpu_ops.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/comm/staged_mpi_communicator.hpp"
#include "ted/core/error.hpp"

#if TED_HAVE_CUDA
#include "ted/backend/cuda/cuda_device.hpp"
#include "ted/backend/cuda/cuda_ops.hpp"
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

DeviceKind parse_device_kind(std::string_view name) {
  if (name == "cpu") return DeviceKind::cpu;
  if (name == "cuda") return DeviceKind::cuda;
  throw ConfigError("unknown backend '" + std::string(name) + "' (expected cpu or cuda)");
}

template <typename T>
std::unique_ptr<Ops<T>> make_ops(Device& device) {
  if (device.kind() == DeviceKind::cpu) return cpu::make_cpu_ops<T>(device);
#if TED_HAVE_CUDA
  if constexpr (std::is_same_v<T, double>) {
    throw ConfigError("the CUDA backend has no fp64 kernels (fp64 is the CPU's gradient checks)");
  } else {
    return cuda::make_cuda_ops<T>(device);
  }
#else
  throw ConfigError("this build has no CUDA backend (configure found no nvcc; see the summary)");
#endif
}

template std::unique_ptr<Ops<float>> make_ops<float>(Device&);
template std::unique_ptr<Ops<double>> make_ops<double>(Device&);
template std::unique_ptr<Ops<Half>> make_ops<Half>(Device&);
template std::unique_ptr<Ops<BFloat16>> make_ops<BFloat16>(Device&);

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

namespace {
// This rank's index among the ranks of `comm` on its node, and how many there are.
std::pair<int, int> node_rank_and_size(MPI_Comm comm) {
  MPI_Comm node;
  TED_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int rank = 0, size = 1;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_size(node, &size);
  MPI_Comm_free(&node);
  return {rank, size};
}
}  // namespace

void require_built(DeviceKind device, CommBackend comm) {
  if (device == DeviceKind::cuda && !cuda_compiled())
    throw ConfigError(
        "backend cuda: this build has no CUDA backend (configure found no nvcc; see the "
        "feature summary)");
  if (comm != CommBackend::nccl) return;
  if (device != DeviceKind::cuda)
    throw ConfigError("comm nccl carries GPU memory: use it with backend cuda (comm mpi on cpu)");
  if (!nccl_compiled())
    throw ConfigError(
        "comm nccl: this build has no NCCL backend (configure found no NCCL; see the feature "
        "summary)");
}

void require_backend(DeviceKind device, CommBackend comm, MPI_Comm ranks) {
  require_built(device, comm);
  if (device == DeviceKind::cuda && gpu_count() == 0)
    throw ConfigError("backend cuda: no GPU is visible to this process");
  if (comm != CommBackend::nccl || ranks == MPI_COMM_NULL) return;
  const int local_ranks = node_rank_and_size(ranks).second;
  if (local_ranks > gpu_count())
    throw ConfigError("comm nccl needs one GPU per rank: " + std::to_string(local_ranks) +
                      " ranks share " + std::to_string(gpu_count()) +
                      " GPU(s) on this node; use comm mpi (host-staged) to share GPUs");
}

std::unique_ptr<Device> make_device(DeviceKind kind, MPI_Comm ranks) {
  require_backend(kind, CommBackend::mpi);
  if (kind == DeviceKind::cpu) return make_cpu_device();
  return make_gpu_device(node_rank_and_size(ranks).first % gpu_count());
}

std::unique_ptr<Communicator> make_device_communicator(CommBackend comm, Device& device,
                                                       MPI_Comm ranks, Ledger* ledger) {
  require_backend(device.kind(), comm, ranks);
  MPI_Comm dup;
  if (comm == CommBackend::mpi) {
    TED_CHECK_MPI(MPI_Comm_dup(ranks, &dup));
    if (device.kind() == DeviceKind::cpu)
      return std::make_unique<MpiCommunicator>(dup, GroupKind::world, ledger);
    return std::make_unique<StagedMpiCommunicator>(dup, GroupKind::world, ledger, device);
  }
#if TED_HAVE_NCCL
  TED_CHECK_MPI(MPI_Comm_dup(ranks, &dup));
  return std::make_unique<cuda::NcclCommunicator>(dup, GroupKind::world, ledger, device);
#else
  (void)dup;
  throw Error("unreachable: nccl without NCCL");
#endif
}

}  // namespace ted
