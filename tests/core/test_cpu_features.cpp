// The choice of the BLAS's kernels from the CPU's features (core/cpu_features.hpp,
// core/blas_library.hpp), on made-up CPUs: the widest usable level needs every feature its
// kernels use, the OpenBLAS core type follows the level and never the model number, and every
// core type OpenBLAS 0.3.21 can name maps to the instruction set of its kernels.
#include "catch.hpp"

#include <string>
#include <tuple>

#include "ted/core/blas_library.hpp"
#include "ted/core/cpu_features.hpp"

namespace {

using ted::CpuFeatures;
using ted::openblas_coretype_for;
using ted::openblas_kernel_isa;
using ted::VectorIsa;

CpuFeatures sse3_cpu() {
  CpuFeatures f;
  f.x86 = true;
  f.vendor = "GenuineIntel";
  f.family = 6;
  f.sse2 = f.sse3 = true;
  return f;
}

CpuFeatures avx2_cpu() {
  CpuFeatures f = sse3_cpu();
  f.avx = f.fma = f.avx2 = true;
  return f;
}

CpuFeatures avx512_cpu() {
  CpuFeatures f = avx2_cpu();
  f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = true;
  return f;
}

}  // namespace

TEST_CASE("the widest vector level needs every feature its kernels use", "[cpu_features]") {
  CHECK(ted::widest_isa(CpuFeatures{}) == VectorIsa::unknown);  // not x86
  CHECK(ted::widest_isa(sse3_cpu()) == VectorIsa::sse3);
  CpuFeatures avx = sse3_cpu();
  avx.avx = true;
  CHECK(ted::widest_isa(avx) == VectorIsa::avx);
  CHECK(ted::widest_isa(avx2_cpu()) == VectorIsa::avx2);
  CpuFeatures no_fma = avx2_cpu();
  no_fma.fma = false;
  CHECK(ted::widest_isa(no_fma) == VectorIsa::avx);
  CHECK(ted::widest_isa(avx512_cpu()) == VectorIsa::avx512);
  // AVX-512 F alone (Xeon Phi), or without the OS saving its state (the detection clears the
  // flags then): not the AVX-512 the GEMM kernels need.
  CpuFeatures knl = avx2_cpu();
  knl.avx512f = true;
  CHECK(ted::widest_isa(knl) == VectorIsa::avx2);
}

TEST_CASE("OpenBLAS's core type comes from the features, not the model", "[cpu_features]") {
  CHECK(openblas_coretype_for(CpuFeatures{}).empty());  // not x86: OpenBLAS decides
  CHECK(openblas_coretype_for(sse3_cpu()) == "Prescott");
  CHECK(openblas_coretype_for(avx2_cpu()) == "Haswell");
  CHECK(openblas_coretype_for(avx512_cpu()) == "SkylakeX");
  CpuFeatures bf16 = avx512_cpu();
  bf16.avx512_bf16 = true;
  CHECK(openblas_coretype_for(bf16) == "Cooperlake");
  // The two CPUs: an Intel Xeon of family 6 model 207 and an AMD EPYC of family 26,
  // both with AVX-512 and BF16; and a model number nobody knows yet.
  for (const auto& [vendor, family, model] :
       {std::tuple{"GenuineIntel", 6, 207}, std::tuple{"AuthenticAMD", 26, 2},
        std::tuple{"AuthenticAMD", 99, 999}}) {
    CpuFeatures cpu = bf16;
    cpu.vendor = vendor;
    cpu.family = family;
    cpu.model = model;
    CHECK(openblas_coretype_for(cpu) == "Cooperlake");
  }
  CpuFeatures zen2 = avx2_cpu();
  zen2.vendor = "AuthenticAMD";
  zen2.family = 23;
  CHECK(openblas_coretype_for(zen2) == "Haswell");
}

TEST_CASE("OpenBLAS's core types map to their kernels' instruction set", "[cpu_features]") {
  CHECK(openblas_kernel_isa("Prescott") == VectorIsa::sse3);
  CHECK(openblas_kernel_isa("Nehalem") == VectorIsa::sse3);
  CHECK(openblas_kernel_isa("Sandybridge") == VectorIsa::avx);
  CHECK(openblas_kernel_isa("SandyBridge") == VectorIsa::avx);  // any case
  CHECK(openblas_kernel_isa("Haswell") == VectorIsa::avx2);
  CHECK(openblas_kernel_isa("Zen") == VectorIsa::avx2);
  CHECK(openblas_kernel_isa("SkylakeX") == VectorIsa::avx512);
  CHECK(openblas_kernel_isa("Cooperlake") == VectorIsa::avx512);
  CHECK(openblas_kernel_isa("SapphireRapids") == VectorIsa::avx512);
  CHECK(openblas_kernel_isa("Unknown") == VectorIsa::unknown);
  CHECK(openblas_kernel_isa("") == VectorIsa::unknown);
  // What the chooser names, OpenBLAS's table knows at the level chosen for.
  for (const CpuFeatures& cpu : {sse3_cpu(), avx2_cpu(), avx512_cpu()})
    CHECK(openblas_kernel_isa(openblas_coretype_for(cpu)) == ted::widest_isa(cpu));
}

TEST_CASE("this CPU's features are read and described", "[cpu_features]") {
  const CpuFeatures& cpu = ted::cpu_features();
#if defined(__x86_64__)
  CHECK(cpu.x86);
  CHECK(cpu.sse2);  // every x86-64 CPU
  CHECK(ted::widest_isa(cpu) >= VectorIsa::sse2);
  CHECK(ted::describe(cpu).find(cpu.vendor) == 0);
#else
  CHECK(ted::widest_isa(cpu) == VectorIsa::unknown);
#endif
}

TEST_CASE("the kernels asked for: the suite's knob, then the environment's if wide enough",
          "[cpu_features]") {
  using ted::choose_coretype;
  CpuFeatures cpu = avx512_cpu();
  cpu.avx512_bf16 = true;
  // Nothing set: cpuid.
  CHECK(choose_coretype(cpu, nullptr, nullptr).coretype == "Cooperlake");
  CHECK(choose_coretype(cpu, "", "").coretype == "Cooperlake");
  CHECK(choose_coretype(cpu, nullptr, nullptr).why == "cpuid (avx512)");
  // The environment's, honoured when at least as wide as the CPU ...
  CHECK(choose_coretype(cpu, nullptr, "SkylakeX").coretype == "SkylakeX");
  CHECK(choose_coretype(cpu, nullptr, "SapphireRapids").coretype == "SapphireRapids");
  CHECK(choose_coretype(avx2_cpu(), nullptr, "Zen").coretype == "Zen");
  CHECK(choose_coretype(cpu, nullptr, "SkylakeX").why ==
        "OPENBLAS_CORETYPE=SkylakeX (the environment's)");
  // ... or when it is no name we know (OpenBLAS judges it) ...
  CHECK(choose_coretype(cpu, nullptr, "NewLake").coretype == "NewLake");
  // ... and replaced when narrower, saying so.
  const auto replaced = choose_coretype(cpu, nullptr, "Haswell");
  CHECK(replaced.coretype == "Cooperlake");
  CHECK(replaced.why.find("in place of OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(choose_coretype(cpu, nullptr, "Prescott").coretype == "Cooperlake");
  CHECK(choose_coretype(avx2_cpu(), nullptr, "Sandybridge").coretype == "Haswell");
  // TED_BLAS_CORETYPE forces anything, and "library" leaves OpenBLAS to itself.
  CHECK(choose_coretype(cpu, "Prescott", nullptr).coretype == "Prescott");
  CHECK(choose_coretype(cpu, "Prescott", "Cooperlake").coretype == "Prescott");
  CHECK(choose_coretype(cpu, "Prescott", nullptr).why == "TED_BLAS_CORETYPE=Prescott");
  CHECK(choose_coretype(cpu, "library", "Haswell").coretype.empty());
  CHECK(choose_coretype(cpu, "library", nullptr).coretype.empty());
  // Not x86: OpenBLAS decides, the environment honoured.
  CHECK(choose_coretype(CpuFeatures{}, nullptr, nullptr).coretype.empty());
  CHECK(choose_coretype(CpuFeatures{}, nullptr, "ARMV8").coretype == "ARMV8");
}
