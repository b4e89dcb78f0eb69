// What the emulated cuBLAS and cuBLASLt share: column-major operands of fp32, fp16 or bf16,
// checked against the allocations they lie in, and their product computed by the host's CBLAS
// in fp32 (16-bit operands widened exactly first). Not a public header.
#pragma once

#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "half.hpp"
#include "internal.hpp"

namespace ted_emu {

inline std::size_t width_of(cudaDataType type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

inline float widen(const void* base, cudaDataType type, std::size_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  std::uint16_t bits;
  std::memcpy(&bits, static_cast<const char*>(base) + 2 * i, 2);
  return type == CUDA_R_16BF ? bf16_to_float(bits) : f16_to_float(bits);
}

inline void narrow(void* base, cudaDataType type, std::size_t i, float value) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(base)[i] = value;
    return;
  }
  const std::uint16_t bits = type == CUDA_R_16BF ? float_to_bf16(value) : float_to_f16(value);
  std::memcpy(static_cast<char*>(base) + 2 * i, &bits, 2);
}

// One column-major operand: `rows` x `cols` stored with leading dimension `ld`.
struct Operand {
  const void* data;
  cudaDataType type;
  int rows, cols;
  long long ld;
  // Elements from the first to one past the last that the operand touches.
  std::size_t extent() const {
    return rows && cols ? static_cast<std::size_t>(cols - 1) * ld + rows : 0;
  }
  // Batch entry i of a strided batch.
  Operand at(int i, long long stride) const {
    Operand moved = *this;
    moved.data = static_cast<const char*>(data) +
                 static_cast<long long>(i) * stride * static_cast<long long>(width_of(type));
    return moved;
  }
  std::vector<float> packed() const {  // widened, leading dimension = rows
    std::vector<float> out(static_cast<std::size_t>(rows) * cols);
    for (int c = 0; c < cols; ++c)
      for (int r = 0; r < rows; ++r)
        out[static_cast<std::size_t>(c) * rows + r] =
            widen(data, type, static_cast<std::size_t>(c) * ld + r);
    return out;
  }
};

// True when every batch entry of the operand lies inside one live allocation; else the first
// one that does not is in *bad_batch.
inline bool in_bounds(const Operand& op, long long stride, int batch, std::size_t* bad_batch) {
  const std::size_t width = width_of(op.type), extent = op.extent();
  if (!extent) return true;
  for (int i = 0; i < batch; ++i) {
    if (!device_range(op.at(i, stride).data, extent * width)) {
      *bad_batch = static_cast<std::size_t>(i);
      return false;
    }
  }
  return true;
}

// alpha op(A) op(B), packed column-major [m, n], in fp32 through the host's CBLAS.
std::vector<float> product(bool ta, bool tb, int m, int n, int k, float alpha, const Operand& a,
                           const Operand& b);

}  // namespace ted_emu
