#include "ted/kernels/cpu/linear.hpp"

#include <algorithm>
#include <cstdint>

#include "ted/kernels/cpu/blas.hpp"
#include "ted/kernels/cpu/elementwise.hpp"
#include "ted/kernels/elementwise.hpp"

namespace ted::kernels::cpu {

template <typename T>
void linear_forward(const T* x, const T* w, const T* b, T* y, int n, int in, int out) {
  if (n == 0) return;
  if (b) {
    for (int i = 0; i < n; ++i) std::copy(b, b + out, y + static_cast<std::int64_t>(i) * out);
  }
  gemm(false, false, n, out, in, T(1), x, in, w, out, b ? T(1) : T(0), y, out);
}

template <typename T>
void linear_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, int n, int in,
                     int out) {
  if (n == 0) return;
  if (dx) gemm(false, true, n, in, out, T(1), dy, out, w, out, T(1), dx, in);
  gemm(true, false, in, out, n, T(1), x, in, dy, out, T(1), dw, out);
  if (db) add_column_sums(dy, db, n, out);
}

#define TED_INSTANTIATE_LINEAR(T)                                                   \
  template void linear_forward<T>(const T*, const T*, const T*, T*, int, int, int); \
  template void linear_backward<T>(const T*, const T*, const T*, T*, T*, T*, int, int, int);

TED_INSTANTIATE_LINEAR(float)
TED_INSTANTIATE_LINEAR(double)

}  // namespace ted::kernels::cpu
