// The CPU backend's kernel table (backend/ops.hpp) over host memory: the reference kernels of
// kernels/cpu (CBLAS GEMMs, the thread pool) for every storage type. fp32 and fp64 call them
// directly; bf16 and fp16 are stored as such and computed in fp32: inputs are widened, the fp32
// kernel runs, outputs are rounded on store, so the whole 16-bit path runs on this machine.
#pragma once

#include <memory>

#include "ted/backend/ops.hpp"

namespace ted::cpu {

template <typename T>
std::unique_ptr<Ops<T>> make_cpu_ops(Device& device);

// TED_FULL_CAPACITY=1 (read at each routing): the experts run on every capacity slot, empty or
// not, as DeepSpeed-MoE and the CUDA backend do; by default they leave the empty ones out.
bool experts_run_every_slot();

}  // namespace ted::cpu
