// The BLAS kernels this process runs against what its CPU supports (core/blas_library.hpp):
// exits 1 when they are below it (OpenBLAS's Prescott or Haswell kernels on an AVX-512 CPU, as a
// BLAS that does not know the CPU's model number picks them), or when the kernels' name is not
// one it knows; 77 (skipped) where there is nothing to compare (not x86, or a CBLAS that does not
// name its kernels). Also checks that loading left the environment as it was given.
//   blas_kernel_check                             # as the suite runs: passes
//   TED_BLAS_CORETYPE=Prescott blas_kernel_check  # the kernels forced down: fails
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "ted/core/blas_library.hpp"
#include "ted/core/cpu_features.hpp"
#include "ted/core/error.hpp"
#include "ted/kernels/cpu/blas.hpp"

// A variable as the process started with it (/proc/self/environ), "" when unset.
std::string initial_variable(const std::string& name) {
  std::ifstream environ("/proc/self/environ", std::ios::binary);
  std::string entry;
  while (std::getline(environ, entry, '\0'))
    if (entry.compare(0, name.size() + 1, name + "=") == 0) return entry.substr(name.size() + 1);
  return "";
}

int main() {
  using ted::VectorIsa;
  const ted::CpuFeatures& cpu = ted::cpu_features();
  const VectorIsa supported = ted::widest_isa(cpu);
  std::printf("cpu:  %s\n", ted::describe(cpu).c_str());
  try {
    const auto& blas = ted::blas_library();
    std::printf("blas: %s\n", ted::kernels::cpu::blas_description().c_str());
    // The variable is changed only while the library loads: now it is as the process got it.
    const char* now = std::getenv("OPENBLAS_CORETYPE");
    const std::string given = initial_variable("OPENBLAS_CORETYPE");
    if ((now ? now : "") != given) {
      std::printf(
          "FAILED: OPENBLAS_CORETYPE is '%s' after loading, '%s' when the process started\n",
          now ? now : "", given.c_str());
      return 1;
    }
    if (!cpu.x86) {
      std::printf("SKIPPED: not an x86 CPU; its BLAS chooses its own kernels\n");
      return 77;
    }
    if (blas.kernel.empty()) {
      std::printf("SKIPPED: %s does not name its kernels\n", blas.name.c_str());
      return 77;
    }
    if (blas.kernel_isa == VectorIsa::unknown) {
      std::printf("FAILED: kernels '%s' are not in openblas_kernel_isa's table: add them\n",
                  blas.kernel.c_str());
      return 1;
    }
    const std::string ran(ted::to_string(blas.kernel_isa)), can(ted::to_string(supported));
    if (blas.kernel_isa < supported) {
      std::printf(
          "FAILED: %s runs its %s kernels (%s) on a CPU that supports %s (chosen by %s): its "
          "GEMMs run below this CPU's vector width\n",
          blas.name.c_str(), blas.kernel.c_str(), ran.c_str(), can.c_str(), blas.chosen_by.c_str());
      return 1;
    }
    std::printf("Passed: %s kernels (%s) on a CPU that supports %s\n", blas.kernel.c_str(),
                ran.c_str(), can.c_str());
    return 0;
  } catch (const ted::Error& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}
