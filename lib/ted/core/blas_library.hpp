// The BLAS the CPU kernels call (kernels/cpu/blas.hpp) and the emulated GPU's cuBLAS, loaded by
// the program itself at start-up instead of by the dynamic linker, so that its kernels are chosen
// from this CPU's features (core/cpu_features.hpp) before the library initialises.
//
// Why: OpenBLAS built for many CPUs (DYNAMIC_ARCH, as the distributions ship it) picks its kernels
// in a constructor that runs when the library is loaded, from the CPU's family and model numbers.
// A CPU newer than the library gets old kernels, silently: Debian 12's OpenBLAS 0.3.21 runs its
// Prescott (SSE3) kernels on an Intel Xeon of family 6 model 207 and its Haswell (AVX2) kernels on
// an AMD EPYC of family 26 (both have AVX-512), at a quarter and about half of the speed. OpenBLAS
// takes the kernels' name from OPENBLAS_CORETYPE, read in that constructor. So the BLAS is not
// linked: when the program starts (a static initialiser, before main and before any thread), this
// chooses the kernels (choose_coretype below: by cpuid, unless told otherwise), sets
// OPENBLAS_CORETYPE to them, loads the library (dlopen; the path found at configure time,
// cmake/TedDependencies.cmake), and puts the variable back as it was, so that the environment
// stays as the user gave it. Every program linked with ted or the emulated GPU does this, under
// mpirun as alone. The blas_kernel test fails when the kernels in use are below what the CPU
// supports.
#pragma once

#include <cblas.h>

#include <string>
#include <string_view>

#include "ted/core/cpu_features.hpp"

namespace ted {

struct BlasLibrary {
  std::string path;  // the file loaded
  decltype(&cblas_sgemm) sgemm = nullptr;
  decltype(&cblas_dgemm) dgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;  // OpenBLAS's openblas_set_num_threads, else null
  std::string name;                        // "OpenBLAS 0.3.21"; the file's name for another CBLAS
  std::string config;                      // OpenBLAS's build (openblas_get_config), else ""
  std::string kernel;  // the kernels in use (openblas_get_corename: "Cooperlake"), else ""
  VectorIsa kernel_isa = VectorIsa::unknown;  // what those kernels use; unknown if not known
  std::string chosen_by;  // how `kernel` was chosen (CoreTypeChoice::why): "cpuid (avx512)",
                          // "TED_BLAS_CORETYPE=Prescott", "the library itself", ...
};

// The BLAS, loaded when the program started (or now, on the first call). Throws ted::Error when
// it could not be loaded or lacks cblas_sgemm/cblas_dgemm.
const BlasLibrary& blas_library();

// Which OpenBLAS kernels a program asks for (OPENBLAS_CORETYPE while the library loads; ""
// leaves the variable as it is), and why, in this order:
//   TED_BLAS_CORETYPE=<core type>  forces it, whatever it is (Prescott: the blas_kernel test
//                                  fails); TED_BLAS_CORETYPE=library lets OpenBLAS choose as it
//                                  would alone (by the model number, or OPENBLAS_CORETYPE);
//   OPENBLAS_CORETYPE=<core type>  honoured, unless its kernels are narrower than this CPU's
//                                  widest level (Haswell on an AVX-512 CPU): a variable set for a
//                                  whole machine or image, for other programs' sake, would hold
//                                  the suite's GEMMs at a fraction of the CPU; then the cpuid
//                                  choice, and the reason says it replaced the variable;
//   otherwise                      the cpuid choice (openblas_coretype_for).
struct CoreTypeChoice {
  std::string coretype;  // "" = set nothing
  std::string why;       // for BlasLibrary::chosen_by
};
CoreTypeChoice choose_coretype(const CpuFeatures& features, const char* suite_choice,
                               const char* environment);

// The OpenBLAS core type for a CPU with these features: Cooperlake (AVX-512 with BF16),
// SkylakeX (AVX-512), Haswell (AVX2 and FMA), Sandybridge (AVX), Prescott (SSE3); "" where
// OpenBLAS had better decide (not x86). Names OpenBLAS has known since 0.3.10, whose fp32/fp64
// GEMM kernels are the widest the CPU runs (SapphireRapids' differ from Cooperlake's only in
// bf16 and int8).
std::string_view openblas_coretype_for(const CpuFeatures& features);

// The instruction set of an OpenBLAS core type's GEMM kernels (as openblas_get_corename names
// it, any case): Prescott sse3, Sandybridge avx, Haswell and Zen avx2, SkylakeX avx512, ...;
// unknown for a name not in OpenBLAS 0.3.21's x86-64 list.
VectorIsa openblas_kernel_isa(std::string_view corename);

}  // namespace ted
