// The optimizer's kernels: AdamW on fp32 masters (the per-element update of kernels/adamw.hpp,
// which the CPU backend runs too), the unscaled and clipped gradient tile, sums of squares over
// ranges of a buffer (the gradient norm, the fingerprint) and the fp16 overflow check.
#include "ted/kernels/adamw.hpp"
#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {
namespace {

__global__ void adamw_kernel(float* value, float* m, float* v, const float* g, std::size_t count,
                             AdamHyper<float> hyper) {
  TED_GRID_STRIDE(i, count) {
    float x = value[i], mi = m[i], vi = v[i];
    adamw_update(x, mi, vi, g[i], hyper);
    value[i] = x;
    m[i] = mi;
    v[i] = vi;
  }
}

template <typename T>
__global__ void scale_copy_kernel(const T* g, float* out, std::size_t count, float scale) {
  TED_GRID_STRIDE(i, count) out[i] = load(g[i]) * scale;
}

// A double summed over the block in a fixed order; thread 0 gets the result.
__device__ __forceinline__ double block_sum_f64(double part, double* shared) {
  for (int offset = 16; offset > 0; offset >>= 1)
    part += __shfl_xor_sync(0xffffffffu, part, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = part;
  __syncthreads();
  double block = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) block += shared[w];
  return block;
}

// Squares accumulated in fp64 (as the CPU does), per thread, then per warp and per block; each
// block writes its sum to its own slot (add_partials adds them in order).
template <typename T>
__global__ void sum_squares_kernel(const T* values, std::size_t count, double* partials) {
  __shared__ double shared[32];
  double part = 0;
  TED_GRID_STRIDE(i, count) {
    const double x = load(values[i]);
    part += x * x;
  }
  const double block = block_sum_f64(part, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = block;
}

__global__ void add_partials_kernel(const double* partials, unsigned n, double* total) {
  __shared__ double shared[32];
  double part = 0;
  for (unsigned i = threadIdx.x; i < n; i += blockDim.x) part += partials[i];
  const double block = block_sum_f64(part, shared);
  if (threadIdx.x == 0) *total += block;
}

template <typename T>
__global__ void non_finite_kernel(const T* values, std::size_t count, int* found) {
  TED_GRID_STRIDE(i, count) {
    if (!isfinite(load(values[i]))) {
      *found = 1;
      return;
    }
  }
}

}  // namespace

void add_partials(Context& ctx, const double* partials, unsigned n, double* total) {
  if (n) launch<add_partials_kernel>(1, kThreads, 0, stream(ctx), partials, n, total);
}

template <typename T>
void scale_copy(Context& ctx, const T* g, float* out, std::size_t count, float scale) {
  if (!count) return;
  launch<scale_copy_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), g, out, count, scale);
}

void adamw(Context& ctx, float* value, float* m, float* v, const float* g, std::size_t count,
           const AdamHyper<float>& hyper) {
  if (!count) return;
  launch<adamw_kernel>(blocks_for(count), kThreads, 0, stream(ctx), value, m, v, g, count, hyper);
}

template <typename T>
double sum_squares(Context& ctx, const T* data, const IndexRange* ranges, std::size_t range_count,
                   double initial) {
  if (range_count == 0) return initial;
  Tensor<double> total = zeros<double>(ctx.device(), 1);
  Tensor<double> partials(ctx.device(), kPartialBlocks);
  for (std::size_t r = 0; r < range_count; ++r) {  // the ranges in order, each in a fixed order
    const std::size_t count = ranges[r].end - ranges[r].begin;
    if (!count) continue;
    const unsigned blocks = partial_blocks(count);
    launch<sum_squares_kernel<T>>(blocks, kThreads, 0, stream(ctx), data + ranges[r].begin, count,
                                  partials.data());
    add_partials(ctx, partials.data(), blocks, total.data());
  }
  double host = 0;
  ctx.device().copy_to_host(&host, total.data(), sizeof host);
  return initial + host;
}

template <typename T>
bool has_non_finite(Context& ctx, const T* data, std::size_t count) {
  if (!count) return false;
  Tensor<std::int32_t> found = zeros<std::int32_t>(ctx.device(), 1);
  launch<non_finite_kernel<T>>(blocks_for(count), kThreads, 0, stream(ctx), data, count,
                               found.data());
  std::int32_t host = 0;
  ctx.device().copy_to_host(&host, found.data(), sizeof host);
  return host != 0;
}

#define TED_INSTANTIATE_REDUCTIONS(T)                                                         \
  template void scale_copy<T>(Context&, const T*, float*, std::size_t, float);                \
  template double sum_squares<T>(Context&, const T*, const IndexRange*, std::size_t, double); \
  template bool has_non_finite<T>(Context&, const T*, std::size_t);
TED_INSTANTIATE_REDUCTIONS(float)
TED_INSTANTIATE_REDUCTIONS(Half)
TED_INSTANTIATE_REDUCTIONS(BFloat16)

}  // namespace ted::kernels::cuda
