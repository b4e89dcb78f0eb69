#include "ted/backend/registry.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ted/backend/cpu/cpu_ops.hpp"
#include "ted/comm/mpi_communicator.hpp"
#include "ted/comm/staged_mpi_communicator.hpp"
#include "ted/core/error.hpp"

#if TED_HAVE_CUDA
#include "ted/backend/cuda/cuda_ops.hpp"
#include "ted/device/cuda_device.hpp"
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

int gpu_exit_code(const char* program, const char* needs) {
  try {
    if (gpu_count() > 0) return 0;
    std::printf("SKIPPED: no GPU visible to this process (%s)\n", needs);
    return 77;
  } catch (const UnusableGpu& e) {  // a GPU that is there but cannot be used: not a skip
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    return 2;
  }
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

int mpi_thread_level() {
#if TED_EMULATED_GPU
  return MPI_THREAD_MULTIPLE;  // the emulated NCCL's transfers run on the streams' threads
#else
  return MPI_THREAD_FUNNELED;
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

#if TED_HAVE_CUDA
// The GPU each rank of this node will drive (make_device: local rank mod the GPUs it sees),
// by UUID, in local rank order; and this rank's own. Collective over `comm`. By identity, not
// ordinal: where a site binds one GPU per task, every rank sees its own GPU as GPU 0.
struct NodeGpus {
  std::vector<std::string> uuids;
  int local_rank = 0;
  cuda::GpuIdentity mine;
};
NodeGpus node_gpus(MPI_Comm comm) {
  MPI_Comm node;
  TED_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  NodeGpus gpus;
  int size = 1;
  MPI_Comm_rank(node, &gpus.local_rank);
  MPI_Comm_size(node, &size);
  gpus.mine = cuda::gpu_identity(gpus.local_rank % gpu_count());
  constexpr int kWidth = 64;
  char mine[kWidth] = {0};
  gpus.mine.uuid.copy(mine, kWidth - 1);
  std::vector<char> all(static_cast<std::size_t>(size) * kWidth);
  TED_CHECK_MPI(MPI_Allgather(mine, kWidth, MPI_CHAR, all.data(), kWidth, MPI_CHAR, node));
  MPI_Comm_free(&node);
  for (int r = 0; r < size; ++r) gpus.uuids.emplace_back(all.data() + r * kWidth);
  return gpus;
}

// How many ranks of this node drive this rank's GPU (1 when it is its own).
int sharing_my_gpu(const NodeGpus& gpus) {
  return static_cast<int>(std::count(gpus.uuids.begin(), gpus.uuids.end(),
                                     gpus.uuids[static_cast<std::size_t>(gpus.local_rank)]));
}
#endif
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
#if TED_HAVE_CUDA
  if (device != DeviceKind::cuda || ranks == MPI_COMM_NULL) return;
  const NodeGpus gpus = node_gpus(ranks);
  int sharing = sharing_my_gpu(gpus), most = 0;
  TED_CHECK_MPI(MPI_Allreduce(&sharing, &most, 1, MPI_INT, MPI_MAX, ranks));
  if (most <= 1) return;
  if (comm == CommBackend::nccl)
    throw ConfigError("comm nccl needs one GPU per rank: " + std::to_string(most) +
                      " ranks of a node would share one GPU (" + std::to_string(gpu_count()) +
                      " visible per rank); use comm mpi (host-staged) to share GPUs");
  int exclusive = gpus.mine.exclusive_process ? 1 : 0, any_exclusive = 0;
  TED_CHECK_MPI(MPI_Allreduce(&exclusive, &any_exclusive, 1, MPI_INT, MPI_MAX, ranks));
  if (any_exclusive)
    throw ConfigError("backend cuda: " + std::to_string(most) +
                      " ranks of a node would share a GPU that is in exclusive-process compute "
                      "mode (nvidia-smi -c): give each rank its own GPU, or change the mode");
#else
  (void)ranks;
#endif
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
