#include "ted/core/cpu_features.hpp"

#include <cstring>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TED_X86 1
#endif

namespace ted {
namespace {

#if defined(TED_X86)
bool bit(unsigned value, int b) {
  return (value >> b) & 1u;
}

// The state components the OS saves on a context switch (XCR0): SSE, AVX and AVX-512 registers
// are usable only when it saves them.
unsigned long long xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  f.x86 = true;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  f.vendor = vendor;
  __get_cpuid(1, &a, &b, &c, &d);
  const unsigned base_family = (a >> 8) & 0xf, base_model = (a >> 4) & 0xf;
  f.family = static_cast<int>(base_family == 0xf ? base_family + ((a >> 20) & 0xff) : base_family);
  f.model = static_cast<int>(base_family == 0x6 || base_family == 0xf
                                 ? base_model + (((a >> 16) & 0xf) << 4)
                                 : base_model);
  f.sse2 = bit(d, 26);
  f.sse3 = bit(c, 0);
  const bool osxsave = bit(c, 27);
  const unsigned long long xcr = osxsave ? xcr0() : 0;
  const bool ymm = (xcr & 0x6) == 0x6;    // SSE and AVX state
  const bool zmm = (xcr & 0xe6) == 0xe6;  // and the opmask and both halves of the ZMM state
  f.avx = bit(c, 28) && ymm;
  f.fma = bit(c, 12) && ymm;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = bit(b, 5) && ymm;
    f.avx512f = bit(b, 16) && zmm;
    f.avx512dq = bit(b, 17) && zmm;
    f.avx512bw = bit(b, 30) && zmm;
    f.avx512vl = bit(b, 31) && zmm;
    f.amx_tile = bit(d, 24);
    const unsigned max_sub = a;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512_bf16 = bit(a, 5) && zmm;
    }
  }
  return f;
}
#else
CpuFeatures detect() {
  return {};
}
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

VectorIsa widest_isa(const CpuFeatures& f) {
  if (!f.x86) return VectorIsa::unknown;
  if (f.avx512f && f.avx512dq && f.avx512bw && f.avx512vl && f.avx2 && f.fma)
    return VectorIsa::avx512;
  if (f.avx2 && f.fma) return VectorIsa::avx2;
  if (f.avx) return VectorIsa::avx;
  if (f.sse3) return VectorIsa::sse3;
  if (f.sse2) return VectorIsa::sse2;
  return VectorIsa::unknown;
}

std::string_view to_string(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::sse2:
      return "sse2";
    case VectorIsa::sse3:
      return "sse3";
    case VectorIsa::avx:
      return "avx";
    case VectorIsa::avx2:
      return "avx2";
    case VectorIsa::avx512:
      return "avx512";
    case VectorIsa::unknown:
      break;
  }
  return "unknown";
}

std::string describe(const CpuFeatures& f) {
  if (!f.x86) return "not x86";
  std::string text = f.vendor + " family " + std::to_string(f.family) + " model " +
                     std::to_string(f.model) + ": " + std::string(to_string(widest_isa(f))) + " (";
  const std::pair<bool, const char*> flags[] = {
      {f.avx, "avx"},           {f.fma, "fma"},
      {f.avx2, "avx2"},         {f.avx512f, "avx512f"},
      {f.avx512dq, "avx512dq"}, {f.avx512bw, "avx512bw"},
      {f.avx512vl, "avx512vl"}, {f.avx512_bf16, "avx512_bf16"},
      {f.amx_tile, "amx_tile"}};
  bool first = true;
  for (const auto& [on, name] : flags)
    if (on) text += (first ? "" : " ") + std::string(name), first = false;
  return text + ")";
}

}  // namespace ted
