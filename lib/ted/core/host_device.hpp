// TED_HOST_DEVICE marks per-element math that the CPU and CUDA backends share, so that the
// CPU tests cover the code the GPU runs.
#pragma once

#if defined(__CUDACC__)
#define TED_HOST_DEVICE __host__ __device__
#else
#define TED_HOST_DEVICE
#endif
