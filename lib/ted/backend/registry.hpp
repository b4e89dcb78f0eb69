// The one place that knows which backends this build has (docs/backends.md): the kernel table
// of a device, this rank's device, and the communicators that carry a device's buffers.
//   device cpu  + comm mpi   host memory over MPI (the default)
//   device cuda + comm nccl  GPU memory over NCCL (clusters: one GPU per rank)
//   device cuda + comm mpi   GPU memory staged through pinned host memory over MPI, so that
//                            several ranks can share one GPU
// Scalars that steer a run (losses, norms, flags, timings) never go through these: they travel
// on host MPI communicators (grid/ted_groups.hpp, "control").
#pragma once

#include <mpi.h>

#include <memory>
#include <string_view>

#include "ted/backend/ops.hpp"
#include "ted/comm/communicator.hpp"
#include "ted/device/device.hpp"

namespace ted {

bool cuda_compiled();  // the CUDA backend was built (nvcc found at configure time)
bool nccl_compiled();  // the NCCL backend was built
int gpu_count();       // GPUs visible to this process; 0 without CUDA, driver or GPU; UnusableGpu
                       // when the runtime cannot use them (cuda::device_count)
// For a program that needs a GPU: 0 when one is visible. Otherwise the exit code to end with,
// after one line saying why: 77 (skipped; "SKIPPED: no GPU visible ... (<needs>)" on stdout)
// without a GPU, 2 ("<program>: error: ..." on stderr) when the runtime cannot use one.
int gpu_exit_code(const char* program, const char* needs);

DeviceKind parse_device_kind(std::string_view name);  // "cpu" or "cuda"; ConfigError otherwise

// The kernel table of `device`'s backend for storage type T (float, double, Half, BFloat16).
// Throws ConfigError when that backend has no kernels for T (the CUDA backend has no fp64).
template <typename T>
std::unique_ptr<Ops<T>> make_ops(Device& device);

// GPU `ordinal` as a device. Throws ConfigError when CUDA was not compiled or the GPU is not
// visible.
std::unique_ptr<Device> make_gpu_device(int ordinal = 0);

// Throws ConfigError, one line naming the option, unless this build has `device` with `comm`
// (CUDA, NCCL compiled in; nccl only with cuda). Judges the build, not this machine's GPUs: what
// --check can tell on a login node.
void require_built(DeviceKind device, CommBackend comm);

// Throws ConfigError, one line naming the option, unless `device` with `comm` can run here:
// cuda needs the CUDA backend compiled and a GPU visible; nccl needs NCCL and the cuda device.
// Given the ranks that will use it (collective over them), it also looks at the GPU each rank of
// a node would drive, by UUID: nccl refuses two ranks on one GPU, and ranks sharing a GPU
// through comm mpi are refused where that GPU is in exclusive-process mode.
void require_backend(DeviceKind device, CommBackend comm, MPI_Comm ranks = MPI_COMM_NULL);

// The thread support MpiSession asks of MPI: MPI_THREAD_MULTIPLE in a build on the emulated
// GPU (its NCCL's transfers run on the streams' threads), else MPI_THREAD_FUNNELED.
int mpi_thread_level();

// This rank's device: the CPU, or GPU (local rank mod the visible GPUs), where the local rank
// is this rank's index among the ranks of `ranks` on its node. Collective over `ranks` for cuda.
std::unique_ptr<Device> make_device(DeviceKind kind, MPI_Comm ranks = MPI_COMM_WORLD);

// A communicator over the ranks of `ranks` (which it duplicates) carrying `device`'s buffers
// with `comm` (the table above). NCCL needs one GPU per rank of a node: sharing is a
// ConfigError that points to --comm mpi. `device` must outlive the communicator.
std::unique_ptr<Communicator> make_device_communicator(CommBackend comm, Device& device,
                                                       MPI_Comm ranks, Ledger* ledger);

}  // namespace ted
