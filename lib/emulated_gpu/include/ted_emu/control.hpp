// The emulated GPU's own controls, for tests that check what a real GPU would only show by
// failing: counters of what the runtime was asked to do, and faults on demand. Settings come
// from the environment (docs/emulated_gpu.md):
//   TED_EMU_GPUS=N           GPUs this process sees (default 1)
//   TED_EMU_SHARED_GPUS=1    the processes of a machine see the same GPUs (same UUIDs), as ranks
//                            sharing one GPU do; default: each process has GPUs of its own
//   TED_EMU_COMPUTE_MODE=exclusive_process   the GPUs refuse a second process
//   TED_EMU_MEMORY=BYTES     memory of each GPU (suffixes K, M, G; default min(80G, RAM / 4))
//   TED_EMU_DELAY_US=N       a copy to or from pinned host memory waits N microseconds before
//                            it runs, so a host read or write without a synchronisation sees
//                            or makes wrong data (a pending download also reads as 0xff bytes)
//   TED_EMU_SEED=N           seed of the block order (shuffled per launch)
#pragma once

#include <cstdint>

namespace ted_emu {

struct Counters {
  std::uint64_t kernel_launches = 0;
  std::uint64_t device_allocations = 0;  // cudaMalloc and pool misses (cudaMallocAsync)
  std::uint64_t pinned_allocations = 0;  // cudaMallocHost / cudaHostAlloc
  std::uint64_t pinned_frees = 0;
};
Counters counters();

// The `after`-th NCCL call from now (1 = the next one) that queues work returns
// ncclInvalidArgument, as a real failure inside a group would.
void fail_nccl_call(int after);

}  // namespace ted_emu
