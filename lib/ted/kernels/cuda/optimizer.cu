// The fused AdamW step on fp32 master weights (one pass: unscale and clip the gradient,
// update m, v and the master, write the 16-bit copy the GEMMs read), the gradient norm and
// the fp16 overflow check that dynamic loss scaling needs.
#include "ted/kernels/adamw.hpp"
#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {
namespace {

template <typename T>
__global__ void adamw_kernel(float* master, const float* grad, float* m, float* v, T* copy,
                             std::size_t count, AdamHyper<float> hyper, float grad_scale) {
  TED_GRID_STRIDE(i, count) {
    float value = master[i], mi = m[i], vi = v[i];
    adamw_update(value, mi, vi, grad[i] * grad_scale, hyper);
    master[i] = value;
    m[i] = mi;
    v[i] = vi;
    if (copy) copy[i] = store<T>(value);
  }
}

__global__ void squared_norm_kernel(const float* values, std::size_t count, double* total) {
  __shared__ float shared[32];
  float part = 0;
  TED_GRID_STRIDE(i, count) part += values[i] * values[i];
  part = block_sum(part, shared);
  if (threadIdx.x == 0) atomicAdd(total, static_cast<double>(part));
}

__global__ void non_finite_kernel(const float* values, std::size_t count, int* found) {
  TED_GRID_STRIDE(i, count) {
    if (!isfinite(values[i])) {
      *found = 1;
      return;
    }
  }
}

}  // namespace

template <typename T>
void adamw(Context& ctx, float* master, const float* grad, float* m, float* v, T* copy,
           std::size_t count, const AdamStep& s, bool decay) {
  if (!count) return;
  AdamHyper<float> hyper{s.lr,          s.beta1,      s.beta2, s.eps, decay ? s.weight_decay : 0.0f,
                         s.correction1, s.correction2};
  adamw_kernel<T><<<blocks_for(count), kThreads, 0, stream(ctx)>>>(master, grad, m, v, copy, count,
                                                                   hyper, s.grad_scale);
  check_launch();
}

double squared_norm(Context& ctx, const float* values, std::size_t count) {
  Tensor<double> total = zeros<double>(ctx.device(), 1);
  if (count) {
    squared_norm_kernel<<<blocks_for(count), kThreads, 0, stream(ctx)>>>(values, count,
                                                                         total.data());
    check_launch();
  }
  double host = 0;
  ctx.device().copy_to_host(&host, total.data(), sizeof host);
  return host;
}

bool has_non_finite(Context& ctx, const float* values, std::size_t count) {
  Tensor<std::int32_t> found = zeros<std::int32_t>(ctx.device(), 1);
  if (count) {
    non_finite_kernel<<<blocks_for(count), kThreads, 0, stream(ctx)>>>(values, count, found.data());
    check_launch();
  }
  std::int32_t host = 0;
  ctx.device().copy_to_host(&host, found.data(), sizeof host);
  return host != 0;
}

template void adamw<float>(Context&, float*, const float*, float*, float*, float*, std::size_t,
                           const AdamStep&, bool);
template void adamw<Half>(Context&, float*, const float*, float*, float*, Half*, std::size_t,
                          const AdamStep&, bool);
template void adamw<BFloat16>(Context&, float*, const float*, float*, float*, BFloat16*,
                              std::size_t, const AdamStep&, bool);

}  // namespace ted::kernels::cuda
