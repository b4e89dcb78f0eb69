// For the emulated libraries' headers (CUB's templates): queue host code on a stream, and ask
// whether a range is device memory. Not for the suite's sources.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>

namespace ted_emu::detail {

// Queues `work` on `stream` (nullptr: the current device's default stream); it runs in stream
// order unless the device has failed. cudaErrorInvalidResourceHandle for a dead stream.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> work);
// `bytes` bytes from `pointer` lie inside one live device allocation.
bool is_device_range(const void* pointer, std::size_t bytes);
// Records the error as the runtime does and explains it on stderr.
cudaError_t reject(cudaError_t error, const char* why);

}  // namespace ted_emu::detail
