// What this CPU's vector units can run, read from cpuid and from the vector state the operating
// system saves (xgetbv), never from the CPU's model number: a BLAS that picks its kernels by
// model falls back to old ones on a CPU released after it (core/blas_library.hpp chooses
// by these features instead, and the blas_kernel test checks the kernels in use against them).
#pragma once

#include <string>
#include <string_view>

namespace ted {

// The widest vector instruction set a GEMM kernel may use, in order. AMX is not a level here:
// fp32 GEMMs run on AVX-512 on the CPUs that have it.
enum class VectorIsa { unknown = 0, sse2, sse3, avx, avx2, avx512 };

struct CpuFeatures {
  bool x86 = false;           // the rest is false/empty elsewhere
  std::string vendor;         // "GenuineIntel", "AuthenticAMD", ...
  int family = 0, model = 0;  // for the record only, never for a choice
  bool sse2 = false, sse3 = false, avx = false, fma = false, avx2 = false;
  bool avx512f = false, avx512dq = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false, amx_tile = false;
};

// This CPU's features (read once).
const CpuFeatures& cpu_features();

// The widest level all of whose instructions the CPU and the OS support: avx512 needs F, DQ, BW
// and VL (what AVX-512 GEMM kernels use) with the ZMM and mask state enabled; avx2 needs FMA too.
VectorIsa widest_isa(const CpuFeatures& features);

std::string_view to_string(VectorIsa isa);

// "AuthenticAMD family 26 model 2: avx512 (avx512f avx512dq avx512bw avx512vl avx512_bf16)".
std::string describe(const CpuFeatures& features);

}  // namespace ted
