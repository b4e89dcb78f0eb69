// One AdamW update of one element: the per-element math of the CPU optimizer
// (train/optimizer.cpp) and of the fused CUDA step (kernels/cuda/optimizer.cu), one function so
// the CPU tests cover what the GPU runs. g is the already unscaled and clipped gradient.
#pragma once

#include <cmath>

#include "ted/core/host_device.hpp"

namespace ted::kernels {

template <typename T>
struct AdamHyper {
  T lr, beta1, beta2, eps, weight_decay;  // weight_decay 0 for tensors that do not decay
  T correction1, correction2;             // 1 - beta^t
};

template <typename T>
TED_HOST_DEVICE inline void adamw_update(T& value, T& m, T& v, T g, const AdamHyper<T>& a) {
  m = a.beta1 * m + (T(1) - a.beta1) * g;
  v = a.beta2 * v + (T(1) - a.beta2) * g * g;
  T update = (m / a.correction1) / (std::sqrt(v / a.correction2) + a.eps);
  value -= a.lr * (update + a.weight_decay * value);
}

}  // namespace ted::kernels
