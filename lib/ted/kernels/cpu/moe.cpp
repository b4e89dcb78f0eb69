#include "ted/kernels/cpu/moe.hpp"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "ted/core/parallel.hpp"
#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/kernels/cpu/linear.hpp"

namespace ted::kernels::cpu {

namespace {

// Tokens per task of the token-parallel loops: enough work to be worth a wake-up.
constexpr std::int64_t kTokenGrain = 32;

// f(token, choice index, buffer row) for every kept choice, tokens split over the thread pool
// (each token's choices in order, by one thread). Fine for the callers: a buffer row belongs to
// one choice, and a token's own rows are touched by its thread only.
template <typename M, typename F>
void for_each_kept_parallel(const RoutingArrays<const M>& routing, int tokens, int top_k,
                            int capacity, F&& f) {
  parallel_for(
      tokens,
      [&](std::int64_t first, std::int64_t last) {
        for (std::int64_t s = first; s < last; ++s)
          for (int k = 0; k < top_k; ++k) {
            const std::size_t index = static_cast<std::size_t>(s) * top_k + k;
            const std::int32_t slot = routing.slot[index];
            if (slot < 0) continue;
            f(static_cast<int>(s), index,
              static_cast<std::size_t>(routing.expert[index]) * capacity + slot);
          }
      },
      kTokenGrain);
}

// Rows of block b that hold tokens: used_rows[b] (at most rows), or all of them.
int used_of(const std::int32_t* used_rows, std::size_t b, int rows) {
  return used_rows ? std::clamp(used_rows[b], 0, rows) : rows;
}

// Runs work(i) for i in [0, n): when the pool threads the GEMMs (kernels/cpu/blas.hpp) and
// there are at least as many items as threads, whole items side by side, each item's GEMMs
// on its own thread and each thread taking the next item when it is done, the costliest
// first so that the threads finish together (on 2 cores, splitting one expert's capacity-row
// GEMMs gave 1.70x the one thread, experts side by side 1.8-1.9x); else one after the other,
// each GEMM threaded. Items are independent, so their order changes nothing they compute.
template <typename Work, typename Cost>
void side_by_side(std::size_t n, Work&& work, Cost&& cost) {
  const auto threads = static_cast<std::size_t>(parallel_threads());
  if (pool_threads_blas() && threads > 1 && n >= threads) {
    std::vector<std::size_t> order(n);
    for (std::size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return cost(a) > cost(b); });
    parallel_chunks(static_cast<std::int64_t>(n), static_cast<int>(n),
                    [&](std::int64_t first, std::int64_t last) {
                      for (std::int64_t i = first; i < last; ++i)
                        work(order[static_cast<std::size_t>(i)]);
                    });
    return;
  }
  for (std::size_t i = 0; i < n; ++i) work(i);
}

}  // namespace

template <typename T>
void dispatch(const T* x, const RoutingArrays<const master_t<T>>& routing, int tokens, int experts,
              int top_k, T* buffer, int h, int capacity) {
  std::fill(buffer, buffer + static_cast<std::size_t>(experts) * capacity * h, narrow<T>(0));
  for_each_kept_parallel(routing, tokens, top_k, capacity,
                         [&](int s, std::size_t, std::size_t row) {
                           std::copy(x + static_cast<std::size_t>(s) * h,
                                     x + static_cast<std::size_t>(s + 1) * h, buffer + row * h);
                         });
}

template <typename T>
void dispatch_backward(const T* d_buffer, const RoutingArrays<const master_t<T>>& routing,
                       int tokens, int top_k, T* dx, int h, int capacity) {
  for_each_kept_parallel(routing, tokens, top_k, capacity,
                         [&](int s, std::size_t, std::size_t row) {
                           const T* d = d_buffer + row * h;
                           T* out = dx + static_cast<std::size_t>(s) * h;
                           for (int j = 0; j < h; ++j)
                             out[j] = narrow<T>(widen(out[j]) + widen(d[j]));
                         });
}

template <typename T>
void combine(const T* expert_out, const RoutingArrays<const master_t<T>>& routing, int tokens,
             int top_k, T* y, int h, int capacity) {
  using C = master_t<T>;
  parallel_for(
      tokens,
      [&](std::int64_t first, std::int64_t last) {
        std::vector<C> row(static_cast<std::size_t>(h));
        for (std::int64_t s = first; s < last; ++s) {
          std::fill(row.begin(), row.end(), C(0));
          for (int k = 0; k < top_k; ++k) {
            const std::size_t index = static_cast<std::size_t>(s) * top_k + k;
            const std::int32_t slot = routing.slot[index];
            if (slot < 0) continue;
            const T* out = expert_out +
                           (static_cast<std::size_t>(routing.expert[index]) * capacity + slot) * h;
            for (int j = 0; j < h; ++j) row[j] += routing.weight[index] * widen(out[j]);
          }
          T* dst = y + static_cast<std::size_t>(s) * h;
          for (int j = 0; j < h; ++j) dst[j] = narrow<T>(row[j]);
        }
      },
      kTokenGrain);
}

template <typename T>
void combine_backward(const T* expert_out, const T* dy,
                      const RoutingArrays<const master_t<T>>& routing, int tokens, int experts,
                      int top_k, T* d_expert_out, master_t<T>* d_weight, int h, int capacity) {
  using C = master_t<T>;
  std::fill(d_expert_out, d_expert_out + static_cast<std::size_t>(experts) * capacity * h,
            narrow<T>(0));
  std::fill(d_weight, d_weight + static_cast<std::size_t>(tokens) * top_k, C(0));
  for_each_kept_parallel(routing, tokens, top_k, capacity,
                         [&](int s, std::size_t index, std::size_t row) {
                           const T* g = dy + static_cast<std::size_t>(s) * h;
                           const T* out = expert_out + row * h;
                           T* d = d_expert_out + row * h;
                           C dot = 0;
                           for (int j = 0; j < h; ++j) {
                             d[j] = narrow<T>(routing.weight[index] * widen(g[j]));
                             dot += widen(g[j]) * widen(out[j]);
                           }
                           d_weight[index] = dot;
                         });
}

template <typename T>
void experts_forward(const T* in, const T* w1, const T* b1, const T* w2, T* hidden, T* act, T* out,
                     int sources, int experts, int rows, int h, int f,
                     const std::int32_t* used_rows) {
  const std::size_t blocks = static_cast<std::size_t>(sources) * static_cast<std::size_t>(experts);
  const std::size_t R = static_cast<std::size_t>(rows);
  auto block = [&](std::size_t b) {
    const std::size_t le = b % static_cast<std::size_t>(experts);
    const int used = used_of(used_rows, b, rows);
    T* ob = out + b * R * h;
    std::fill(ob + static_cast<std::size_t>(used) * h, ob + R * h, T(0));  // empty slots
    if (used == 0) return;
    linear_forward<T>(in + b * R * h, w1 + le * h * f, nullptr, hidden + b * R * f, used, h, f);
    bias_gelu_forward<T>(hidden + b * R * f, b1 + le * f, act + b * R * f, used, f);
    linear_forward<T>(act + b * R * f, w2 + le * f * h, nullptr, ob, used, f, h);
  };
  side_by_side(blocks, block, [&](std::size_t b) { return used_of(used_rows, b, rows); });
}

template <typename T>
void experts_backward(const T* in, const T* w1, const T* w2, const T* hidden, const T* act,
                      const T* d_out, T* d_in, T* d_hidden, T* dw1, T* db1, T* dw2, T* db2,
                      int sources, int experts, int rows, int h, int f,
                      const std::int32_t* used_rows) {
  const std::size_t blocks = static_cast<std::size_t>(sources) * static_cast<std::size_t>(experts);
  const std::size_t R = static_cast<std::size_t>(rows);
  std::fill(d_in, d_in + blocks * R * h, T(0));
  // A local expert's blocks (one per source rank) add into its weight gradients in source
  // order, so the work items are the local experts. Rows past a block's used rows are empty
  // slots with a zero gradient: they would add nothing.
  auto expert = [&](std::size_t le) {
    for (std::size_t b = le; b < blocks; b += static_cast<std::size_t>(experts)) {
      const int used = used_of(used_rows, b, rows);
      if (used == 0) continue;
      T* dh = d_hidden + b * R * f;
      std::fill(dh, dh + static_cast<std::size_t>(used) * f, T(0));
      linear_backward<T>(act + b * R * f, w2 + le * f * h, d_out + b * R * h, dh, dw2 + le * f * h,
                         db2 + le * h, used, f, h);
      gelu_bias_backward<T>(hidden + b * R * f, dh, db1 + le * f, used, f);
      linear_backward<T>(in + b * R * h, w1 + le * h * f, dh, d_in + b * R * h, dw1 + le * h * f,
                         nullptr, used, h, f);
    }
  };
  side_by_side(static_cast<std::size_t>(experts), expert, [&](std::size_t le) {
    int rows_used = 0;
    for (std::size_t b = le; b < blocks; b += static_cast<std::size_t>(experts))
      rows_used += used_of(used_rows, b, rows);
    return rows_used;
  });
}

#define TED_INSTANTIATE_PERMUTATION(T)                                                            \
  template void dispatch<T>(const T*, const RoutingArrays<const master_t<T>>&, int, int, int, T*, \
                            int, int);                                                            \
  template void dispatch_backward<T>(const T*, const RoutingArrays<const master_t<T>>&, int, int, \
                                     T*, int, int);                                               \
  template void combine<T>(const T*, const RoutingArrays<const master_t<T>>&, int, int, T*, int,  \
                           int);                                                                  \
  template void combine_backward<T>(const T*, const T*, const RoutingArrays<const master_t<T>>&,  \
                                    int, int, int, T*, master_t<T>*, int, int);

#define TED_INSTANTIATE_EXPERTS(T)                                                               \
  template void experts_forward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int, int, \
                                   int, int, int, const std::int32_t*);                          \
  template void experts_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*,  \
                                    T*, T*, T*, T*, T*, T*, int, int, int, int, int,             \
                                    const std::int32_t*);

TED_INSTANTIATE_PERMUTATION(float)
TED_INSTANTIATE_PERMUTATION(double)
TED_INSTANTIATE_PERMUTATION(Half)
TED_INSTANTIATE_PERMUTATION(BFloat16)
TED_INSTANTIATE_EXPERTS(float)
TED_INSTANTIATE_EXPERTS(double)

}  // namespace ted::kernels::cpu
