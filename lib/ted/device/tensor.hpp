// A typed buffer on a backend device: what parameters, gradients and activations live in, so
// the same model code serves the CPU backend, the CUDA backend and the distributed layouts.
// Element access (operator[], data()) is for host-visible memory (the CPU device).
#pragma once

#include <cstddef>

#include "ted/device/device.hpp"

namespace ted {

template <typename T>
class Tensor {
 public:
  Tensor() = default;
  Tensor(Device& device, std::size_t size) : buffer_(device, size * sizeof(T)), size_(size) {}

  T* data() { return static_cast<T*>(buffer_.data()); }
  const T* data() const { return static_cast<const T*>(buffer_.data()); }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }

 private:
  DeviceBuffer buffer_;
  std::size_t size_ = 0;
};

// A zero-filled tensor of `size` elements.
template <typename T>
Tensor<T> zeros(Device& device, std::size_t size) {
  Tensor<T> tensor(device, size);
  if (size) device.fill(tensor.data(), size, dtype_of<T>::value, 0.0);
  return tensor;
}

}  // namespace ted
