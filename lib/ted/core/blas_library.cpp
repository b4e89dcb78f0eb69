#include "ted/core/blas_library.hpp"

#include <dlfcn.h>

#include <cctype>
#include <cstdlib>
#include <exception>
#include <utility>

#include "ted/core/error.hpp"

#ifndef TED_BLAS_LIBRARY
#error "TED_BLAS_LIBRARY (the BLAS's shared library) comes from cmake/TedDependencies.cmake"
#endif

namespace ted {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

template <typename F>
F symbol(void* handle, const char* name) {
  return reinterpret_cast<F>(dlsym(handle, name));
}

}  // namespace

CoreTypeChoice choose_coretype(const CpuFeatures& features, const char* suite_choice,
                               const char* environment) {
  const std::string_view by_cpuid = openblas_coretype_for(features);
  const std::string level(to_string(widest_isa(features)));
  if (suite_choice && *suite_choice) {
    if (same_name(suite_choice, "library"))
      return {"", environment && *environment
                      ? std::string("the library, told OPENBLAS_CORETYPE=") + environment +
                            " (TED_BLAS_CORETYPE=library)"
                      : "the library itself (TED_BLAS_CORETYPE=library)"};
    return {suite_choice, std::string("TED_BLAS_CORETYPE=") + suite_choice};
  }
  if (environment && *environment) {
    const VectorIsa asked = openblas_kernel_isa(environment);
    // Narrower than this CPU: most often set for a whole machine or image (for reproducible
    // numerics elsewhere), not for this suite. TED_BLAS_CORETYPE forces it.
    if (!by_cpuid.empty() && asked != VectorIsa::unknown && asked < widest_isa(features))
      return {std::string(by_cpuid), "cpuid (" + level +
                                         "), in place of OPENBLAS_CORETYPE=" + environment + " (" +
                                         std::string(to_string(asked)) + ") from the environment"};
    return {environment, std::string("OPENBLAS_CORETYPE=") + environment + " (the environment's)"};
  }
  if (by_cpuid.empty()) return {"", "the library itself"};
  return {std::string(by_cpuid), "cpuid (" + level + ")"};
}

namespace {

BlasLibrary load() {
  BlasLibrary blas;
  blas.path = TED_BLAS_LIBRARY;
  // Already in the process (linked by something else): its kernels were chosen when it loaded.
  void* handle = dlopen(blas.path.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  if (handle) {
    blas.chosen_by = "the library itself (it was loaded before the program could choose)";
  } else {
    const char* environment = std::getenv("OPENBLAS_CORETYPE");
    const std::string saved = environment ? environment : "";
    const CoreTypeChoice choice =
        choose_coretype(cpu_features(), std::getenv("TED_BLAS_CORETYPE"), environment);
    blas.chosen_by = choice.why;
    // OpenBLAS reads the variable once, in the constructor dlopen runs; then it is put back as
    // it was, so programs this one starts see the environment the user gave.
    if (!choice.coretype.empty()) setenv("OPENBLAS_CORETYPE", choice.coretype.c_str(), 1);
    handle = dlopen(blas.path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!choice.coretype.empty()) {
      if (environment)
        setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
      else
        unsetenv("OPENBLAS_CORETYPE");
    }
    if (!handle) {
      const char* why = dlerror();
      throw Error("cannot load the BLAS " + blas.path + ": " + (why ? why : "dlopen failed"));
    }
  }
  blas.sgemm = symbol<decltype(blas.sgemm)>(handle, "cblas_sgemm");
  blas.dgemm = symbol<decltype(blas.dgemm)>(handle, "cblas_dgemm");
  if (!blas.sgemm || !blas.dgemm)
    throw Error("the BLAS " + blas.path + " has no cblas_sgemm/cblas_dgemm");
  blas.set_num_threads = symbol<void (*)(int)>(handle, "openblas_set_num_threads");
  const auto config = symbol<char* (*)()>(handle, "openblas_get_config");
  const auto corename = symbol<char* (*)()>(handle, "openblas_get_corename");
  if (config && corename) {
    blas.config = config();
    // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the first two words.
    const std::size_t space = blas.config.find(' ', blas.config.find(' ') + 1);
    blas.name = blas.config.substr(0, space);
    blas.kernel = corename();
    blas.kernel_isa = openblas_kernel_isa(blas.kernel);
  } else {
    blas.name = blas.path.substr(blas.path.find_last_of('/') + 1);
    blas.chosen_by = "the library itself";
  }
  return blas;
}

// The load's outcome: the library, or the reason it could not be loaded (thrown on use).
struct Loaded {
  BlasLibrary blas;
  std::exception_ptr error;
  Loaded() {
    try {
      blas = load();
    } catch (...) {
      error = std::current_exception();
    }
  }
};

const Loaded& loaded() {
  static const Loaded once;
  return once;
}

// At start-up, before main and before any thread: setenv is safe here, and the kernels are
// chosen before anything else of the program may load the BLAS.
[[maybe_unused]] const bool loaded_at_start = (loaded(), true);

}  // namespace

const BlasLibrary& blas_library() {
  const Loaded& l = loaded();
  if (l.error) std::rethrow_exception(l.error);
  return l.blas;
}

std::string_view openblas_coretype_for(const CpuFeatures& features) {
  switch (widest_isa(features)) {
    case VectorIsa::avx512:
      return features.avx512_bf16 ? "Cooperlake" : "SkylakeX";
    case VectorIsa::avx2:
      return "Haswell";
    case VectorIsa::avx:
      return "Sandybridge";
    case VectorIsa::sse3:
      return "Prescott";
    case VectorIsa::sse2:
    case VectorIsa::unknown:
      break;
  }
  return "";
}

VectorIsa openblas_kernel_isa(std::string_view corename) {
  // OpenBLAS 0.3.21's x86-64 core types (driver/others/dynamic.c) by their kernels' widest set.
  static const std::pair<const char*, VectorIsa> table[] = {
      {"Katmai", VectorIsa::sse2},       {"Coppermine", VectorIsa::sse2},
      {"Northwood", VectorIsa::sse2},    {"Banias", VectorIsa::sse2},
      {"Athlon", VectorIsa::sse2},       {"Opteron", VectorIsa::sse2},
      {"Prescott", VectorIsa::sse3},     {"Atom", VectorIsa::sse3},
      {"Core2", VectorIsa::sse3},        {"Penryn", VectorIsa::sse3},
      {"Dunnington", VectorIsa::sse3},   {"Nehalem", VectorIsa::sse3},
      {"Opteron_SSE3", VectorIsa::sse3}, {"Barcelona", VectorIsa::sse3},
      {"Nano", VectorIsa::sse3},         {"Bobcat", VectorIsa::sse3},
      {"Sandybridge", VectorIsa::avx},   {"Bulldozer", VectorIsa::avx},
      {"Piledriver", VectorIsa::avx},    {"Steamroller", VectorIsa::avx},
      {"Excavator", VectorIsa::avx},     {"Haswell", VectorIsa::avx2},
      {"Zen", VectorIsa::avx2},          {"SkylakeX", VectorIsa::avx512},
      {"Cooperlake", VectorIsa::avx512}, {"SapphireRapids", VectorIsa::avx512}};
  for (const auto& [name, isa] : table)
    if (same_name(corename, name)) return isa;
  return VectorIsa::unknown;
}

}  // namespace ted
