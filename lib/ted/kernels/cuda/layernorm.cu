// LayerNorm on the GPU, forward and backward, fp32 statistics. The same shapes and conventions
// as kernels/cpu/layernorm.cpp (backend/ops.hpp).
#include "ted/kernels/cuda/common.cuh"

namespace ted::kernels::cuda {
namespace {

// One block per row; two passes over the row in fp32.
template <typename T>
__global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                         float* mean, float* rstd, int h) {
  __shared__ float shared[32];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  float s = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) s += load(x[base + j]);
  const float mu = block_sum(s, shared) / h;
  float var = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    float d = load(x[base + j]) - mu;
    var += d * d;
  }
  const float r = rsqrtf(block_sum(var, shared) / h + 1e-5f);
  for (int j = threadIdx.x; j < h; j += blockDim.x)
    y[base + j] = store<T>((load(x[base + j]) - mu) * r * load(gamma[j]) + load(beta[j]));
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
}

// One block per row, read once a Pack at a time into the block's shared row (fp32), then the
// mean, the variance about it and the output from there.
template <typename T>
__global__ void layernorm_forward_packs_kernel(const T* x, const T* gamma, const T* beta, T* y,
                                               float* mean, float* rstd, int h) {
  constexpr int P = Pack<T>::kSize;
  __shared__ float shared[32];
  float* row = dynamic_shared<float>();
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  float s = 0;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    const Pack<T> p = load_pack(x + base + j);
    for (int q = 0; q < P; ++q) s += (row[j + q] = load(p.v[q]));
  }
  const float mu = block_sum(s, shared) / h;  // each thread reads back only what it wrote
  float var = 0;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P)
    for (int q = 0; q < P; ++q) {
      const float d = row[j + q] - mu;
      var += d * d;
    }
  const float r = rsqrtf(block_sum(var, shared) / h + 1e-5f);
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    const Pack<T> g = load_pack(gamma + j), b = load_pack(beta + j);
    Pack<T> out;
    for (int q = 0; q < P; ++q)
      out.v[q] = store<T>((row[j + q] - mu) * r * load(g.v[q]) + load(b.v[q]));
    store_pack(y + base + j, out);
  }
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
}

// dx += r (g - (sum g + xhat sum g xhat) / h), g = dy gamma: one block per row, x and dy read once
// a Pack at a time, xhat and g kept in the block's shared memory (2h floats).
template <typename T>
__global__ void layernorm_backward_dx_packs_kernel(const T* x, const T* gamma, const float* mean,
                                                   const float* rstd, const T* dy, T* dx, int h) {
  constexpr int P = Pack<T>::kSize;
  __shared__ float shared[32];
  float* xhat = dynamic_shared<float>();
  float* g = xhat + h;
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sum_g = 0, sum_gx = 0;
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    const Pack<T> px = load_pack(x + base + j), pd = load_pack(dy + base + j);
    const Pack<T> pg = load_pack(gamma + j);
    for (int q = 0; q < P; ++q) {
      const float xh = (load(px.v[q]) - mu) * r, gq = load(pd.v[q]) * load(pg.v[q]);
      xhat[j + q] = xh;
      g[j + q] = gq;
      sum_g += gq;
      sum_gx += gq * xh;
    }
  }
  sum_g = block_sum(sum_g, shared);
  sum_gx = block_sum(sum_gx, shared);
  for (int j = threadIdx.x * P; j < h; j += blockDim.x * P) {
    Pack<T> out = load_pack(dx + base + j);
    for (int q = 0; q < P; ++q)
      out.v[q] = store<T>(load(out.v[q]) + r * (g[j + q] - (sum_g + xhat[j + q] * sum_gx) / h));
    store_pack(dx + base + j, out);
  }
}

template <typename T>
__global__ void layernorm_backward_dx_kernel(const T* x, const T* gamma, const float* mean,
                                             const float* rstd, const T* dy, T* dx, int h) {
  __shared__ float shared[32];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * h;
  const float mu = mean[blockIdx.x], r = rstd[blockIdx.x];
  float sum_g = 0, sum_gx = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    float xhat = (load(x[base + j]) - mu) * r;
    float g = load(dy[base + j]) * load(gamma[j]);
    sum_g += g;
    sum_gx += g * xhat;
  }
  sum_g = block_sum(sum_g, shared);
  sum_gx = block_sum(sum_gx, shared);
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    float xhat = (load(x[base + j]) - mu) * r;
    float g = load(dy[base + j]) * load(gamma[j]);
    dx[base + j] = store<T>(load(dx[base + j]) + r * (g - (sum_g + xhat * sum_gx) / h));
  }
}

// dgamma, dbeta: columns across x, chunks of rows across y, partials added atomically.
template <typename T>
__global__ void layernorm_backward_params_kernel(const T* x, const float* mean, const float* rstd,
                                                 const T* dy, float* dgamma, float* dbeta, int n,
                                                 int h, int chunk) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= h) return;
  const int first = blockIdx.y * chunk, last = min(n, first + chunk);
  float g = 0, b = 0;
  for (int r = first; r < last; ++r) {
    std::size_t i = static_cast<std::size_t>(r) * h + col;
    float grad = load(dy[i]);
    g += grad * (load(x[i]) - mean[r]) * rstd[r];
    b += grad;
  }
  if (first < last) {
    atomicAdd(dgamma + col, g);
    atomicAdd(dbeta + col, b);
  }
}

}  // namespace

// The LayerNorm row kernels keep rows in shared memory: up to this many floats per block (the
// default limit of 48 KiB, no opt-in needed).
constexpr int kRowFloats = 12 * 1024;

template <typename T>
void layernorm_forward(Context& ctx, const T* x, const T* gamma, const T* beta, T* y, float* mean,
                       float* rstd, int n, int h) {
  if (n == 0) return;
  if (h <= kRowFloats && packable<T>(h, {x, gamma, beta, y})) {
    launch<layernorm_forward_packs_kernel<T>>(n, row_threads(h, Pack<T>::kSize), h * sizeof(float),
                                              stream(ctx), x, gamma, beta, y, mean, rstd, h);
    return;
  }
  launch<layernorm_forward_kernel<T>>(n, threads_for(h), 0, stream(ctx), x, gamma, beta, y, mean,
                                      rstd, h);
}

template <typename T>
void layernorm_backward(Context& ctx, const T* x, const T* gamma, const float* mean,
                        const float* rstd, const T* dy, T* dx, GradOut<T> dgamma_out,
                        GradOut<T> dbeta_out, int n, int h) {
  if (n == 0) return;
  if (2 * h <= kRowFloats && packable<T>(h, {x, gamma, dy, dx}))
    launch<layernorm_backward_dx_packs_kernel<T>>(n, row_threads(h, Pack<T>::kSize),
                                                  2 * h * sizeof(float), stream(ctx), x, gamma,
                                                  mean, rstd, dy, dx, h);
  else
    launch<layernorm_backward_dx_kernel<T>>(n, threads_for(h), 0, stream(ctx), x, gamma, mean, rstd,
                                            dy, dx, h);
  // 16-bit gradients: gamma's and beta's column sums in an fp32 scratch [2, h], added in once.
  const bool low = dgamma_out.low || dbeta_out.low;
  Tensor<float> sums =
      low ? zeros<float>(ctx.device(), 2 * static_cast<std::size_t>(h)) : Tensor<float>();
  float* dgamma = low ? sums.data() : dgamma_out.master;
  float* dbeta = low ? sums.data() + h : dbeta_out.master;
  const int chunk = row_chunk(n);
  const dim3 grid((h + 127) / 128, (n + chunk - 1) / chunk);
  launch<layernorm_backward_params_kernel<T>>(grid, 128, 0, stream(ctx), x, mean, rstd, dy, dgamma,
                                              dbeta, n, h, chunk);
  if (dgamma_out.low) accumulate<T>(ctx, dgamma, dgamma_out.low, static_cast<std::size_t>(h));
  if (dbeta_out.low) accumulate<T>(ctx, dbeta, dbeta_out.low, static_cast<std::size_t>(h));
}

#define TED_INSTANTIATE_LAYERNORM(T)                                                             \
  template void layernorm_forward<T>(Context&, const T*, const T*, const T*, T*, float*, float*, \
                                     int, int);                                                  \
  template void layernorm_backward<T>(Context&, const T*, const T*, const float*, const float*,  \
                                      const T*, T*, GradOut<T>, GradOut<T>, int, int);
TED_INSTANTIATE_LAYERNORM(float)
TED_INSTANTIATE_LAYERNORM(Half)
TED_INSTANTIATE_LAYERNORM(BFloat16)

}  // namespace ted::kernels::cuda
