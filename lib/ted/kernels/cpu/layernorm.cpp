#include "ted/kernels/cpu/layernorm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/vector_math.hpp"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

namespace {

// One row of LayerNorm forward: mean and 1/std, then y = (x - mean) / std * gamma + beta. The
// sums run in 16 lanes (vectorisable without reassociating), then the lanes in order.
constexpr int kLanes = 16;
template <typename T>
inline T lane_total(const T (&lanes)[kLanes]) {
  T total = 0;
  for (int k = 0; k < kLanes; ++k) total += lanes[k];
  return total;
}
template <typename T>
inline void layernorm_row(const T* __restrict row, const T* __restrict gamma,
                          const T* __restrict beta, T* __restrict out, int h, T* mean, T* rstd) {
  T lanes[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= h; j += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += row[j + k];
  T sum = lane_total(lanes);
  for (; j < h; ++j) sum += row[j];
  const T mu = sum / h;
  T dev[kLanes] = {};
  for (j = 0; j + kLanes <= h; j += kLanes)
    for (int k = 0; k < kLanes; ++k) dev[k] += (row[j + k] - mu) * (row[j + k] - mu);
  T var = lane_total(dev);
  for (; j < h; ++j) var += (row[j] - mu) * (row[j] - mu);
  const T r = T(1) / std::sqrt(var / h + T(1e-5));
  for (j = 0; j < h; ++j) out[j] = (row[j] - mu) * r * gamma[j] + beta[j];
  *mean = mu;
  *rstd = r;
}
TED_VECTOR_CLONES void layernorm_row_f32(const float* row, const float* gamma, const float* beta,
                                         float* out, int h, float* mean, float* rstd) {
  layernorm_row(row, gamma, beta, out, h, mean, rstd);
}

// One row of LayerNorm backward: dx += its gradient, and the row's dgamma, dbeta shares into
// the block partials pg, pb.
template <typename T>
inline void layernorm_row_backward(const T* __restrict row, const T* __restrict grad,
                                   const T* __restrict gamma, T mu, T r, T* __restrict din,
                                   T* __restrict pg, T* __restrict pb, int h) {
  T lanes_g[kLanes] = {}, lanes_gx[kLanes] = {};  // sums of dxhat and dxhat * xhat
  int j = 0;
  for (; j + kLanes <= h; j += kLanes)
    for (int k = 0; k < kLanes; ++k) {
      const T xhat = (row[j + k] - mu) * r;
      const T g = grad[j + k] * gamma[j + k];
      lanes_g[k] += g;
      lanes_gx[k] += g * xhat;
      pg[j + k] += grad[j + k] * xhat;
      pb[j + k] += grad[j + k];
    }
  T sum_g = lane_total(lanes_g), sum_gx = lane_total(lanes_gx);
  for (; j < h; ++j) {
    const T xhat = (row[j] - mu) * r;
    const T g = grad[j] * gamma[j];
    sum_g += g;
    sum_gx += g * xhat;
    pg[j] += grad[j] * xhat;
    pb[j] += grad[j];
  }
  for (j = 0; j < h; ++j) {
    const T xhat = (row[j] - mu) * r;
    din[j] += r * (grad[j] * gamma[j] - (sum_g + xhat * sum_gx) / h);
  }
}
TED_VECTOR_CLONES void layernorm_row_backward_f32(const float* row, const float* grad,
                                                  const float* gamma, float mu, float r, float* din,
                                                  float* pg, float* pb, int h) {
  layernorm_row_backward(row, grad, gamma, mu, r, din, pg, pb, h);
}

}  // namespace

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int n,
                       int h) {
  parallel_for(
      n,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t i = first; i < last; ++i) {
          if constexpr (std::is_same_v<T, float>)
            layernorm_row_f32(x + i * h, gamma, beta, y + i * h, h, mean + i, rstd + i);
          else
            layernorm_row(x + i * h, gamma, beta, y + i * h, h, mean + i, rstd + i);
        }
      },
      64);
}

// One pass over each row: its dx, and its share of dgamma and dbeta into the partial sums of
// its block of kLnBlock rows; then the blocks' partials are added in block order (parallel over
// columns). Blocks are fixed, so the sums do not depend on the thread count.
template <typename T>
void layernorm_backward(const T* x, const T* gamma, const T* mean, const T* rstd, const T* dy,
                        T* dx, T* dgamma, T* dbeta, int n, int h) {
  constexpr int kLnBlock = 32;
  const int blocks = (n + kLnBlock - 1) / kLnBlock;
  std::vector<T> partial(static_cast<std::size_t>(blocks) * 2 * h, T(0));
  parallel_for(
      blocks,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t blk = first; blk < last; ++blk) {
          T* pg = partial.data() + blk * 2 * h;  // dgamma, then dbeta
          T* pb = pg + h;
          const int end = std::min<int>(n, static_cast<int>(blk + 1) * kLnBlock);
          for (int i = static_cast<int>(blk) * kLnBlock; i < end; ++i) {
            const std::int64_t at = static_cast<std::int64_t>(i) * h;
            if constexpr (std::is_same_v<T, float>)
              layernorm_row_backward_f32(x + at, dy + at, gamma, mean[i], rstd[i], dx + at, pg, pb,
                                         h);
            else
              layernorm_row_backward(x + at, dy + at, gamma, mean[i], rstd[i], dx + at, pg, pb, h);
          }
        }
      },
      1);
  parallel_for(
      h,
      [&](std::int64_t first, std::int64_t last) {
        for (int blk = 0; blk < blocks; ++blk) {
          const T* pg = partial.data() + static_cast<std::int64_t>(blk) * 2 * h;
          for (std::int64_t j = first; j < last; ++j) {
            dgamma[j] += pg[j];
            dbeta[j] += pg[h + j];
          }
        }
      },
      64);
}

#define TED_INSTANTIATE_LAYERNORM(T)                                                            \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, int, int);       \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, \
                                      T*, int, int);

TED_INSTANTIATE_LAYERNORM(float)
TED_INSTANTIATE_LAYERNORM(double)

}  // namespace ted::kernels::cpu
