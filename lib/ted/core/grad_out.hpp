// Where a kernel adds a parameter's gradient. Gradients live in the master type (fp32, or fp64
// for fp64), or with 16-bit gradients (training.grad_dtype = the storage type, DeepSpeed's
// 16-bit ZeRO-1) in the storage type T: then each call adds its contribution, summed in the
// master type, into the 16-bit buffer, rounded once, as autograd adds each op's weight gradient
// into a 16-bit `.grad` (and as cuBLAS writes a 16-bit C with fp32 accumulation and beta = 1).
#pragma once

#include <cstddef>

#include "ted/core/dtype.hpp"

namespace ted {

template <typename T>
struct GradOut {
  using M = master_t<T>;
  M* master = nullptr;  // the master-type buffer, or
  T* low = nullptr;     // the 16-bit one (never both)

  GradOut() = default;
  GradOut(M* buffer) : master(buffer) {}  // NOLINT: a master-type pointer is a GradOut
  static GradOut storage(T* buffer) {
    GradOut g;
    g.low = buffer;
    return g;
  }
  explicit operator bool() const { return master || low; }
  // The gradient `k` elements further on.
  GradOut operator+(std::size_t k) const {
    GradOut g;
    if (master) g.master = master + k;
    if (low) g.low = low + k;
    return g;
  }
};

}  // namespace ted
