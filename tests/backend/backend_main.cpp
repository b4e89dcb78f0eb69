// Main of the per-backend tests: one list of cases (the kernel table's ops and short training
// runs), each scored against the CPU fp32 reference, run on the device given by --device.
//   test_backend --device cpu     every case on the CPU backend (fp32, bf16, fp16)
//   test_backend --device cuda    the same on GPU 0; exits 77 (CTest: skipped) without a GPU,
//                                 2 with one line when the runtime cannot use the GPU
//   test_backend --device cuda --require-cudnn "[attention]"
//                                 the attention cases where cuDNN's fused attention runs them;
//                                 where it does not (the emulated GPU, no cuDNN found), prints
//                                 why and exits 77
#define CATCH_CONFIG_RUNNER
#include "catch.hpp"

#include <cstdio>
#include <memory>

#include "backend/backend.hpp"
#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"

namespace {
struct Backend {
  std::unique_ptr<ted::Device> device;
  std::unique_ptr<ted::Ops<float>> f32;
  std::unique_ptr<ted::Ops<ted::Half>> f16;
  std::unique_ptr<ted::Ops<ted::BFloat16>> bf16;
};
Backend g_backend;

void release() {
  g_backend.bf16.reset();  // the tables use the device: they go first
  g_backend.f16.reset();
  g_backend.f32.reset();
  g_backend.device.reset();
}
}  // namespace

ted::Device& ted::test::device() {
  return *g_backend.device;
}
template <>
ted::Ops<float>& ted::test::ops<float>() {
  return *g_backend.f32;
}
template <>
ted::Ops<ted::Half>& ted::test::ops<ted::Half>() {
  return *g_backend.f16;
}
template <>
ted::Ops<ted::BFloat16>& ted::test::ops<ted::BFloat16>() {
  return *g_backend.bf16;
}

int main(int argc, char** argv) {
  Catch::Session session;
  std::string device_name = "cpu";
  bool require_cudnn = false;
  using Catch::Clara::Opt;
  session.cli(session.cli() | Opt(device_name, "cpu|cuda")["--device"]("the backend under test") |
              Opt(require_cudnn)["--require-cudnn"](
                  "skip (exit 77, saying why) unless cuDNN's attention runs the shapes"));
  if (int rc = session.applyCommandLine(argc, argv)) return rc;
  try {
    const auto kind = ted::parse_device_kind(device_name);
    if (kind == ted::DeviceKind::cuda) {
      ted::require_backend(kind, ted::CommBackend::mpi);
      g_backend.device = ted::make_gpu_device(0);
    } else {
      g_backend.device = ted::make_cpu_device();
    }
  } catch (const ted::UnusableGpu& e) {  // a GPU that is there but cannot be used: not a skip
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const ted::ConfigError& e) {
    std::printf("SKIPPED: %s\n", e.what());
    return 77;
  }
  g_backend.f32 = ted::make_ops<float>(*g_backend.device);
  g_backend.f16 = ted::make_ops<ted::Half>(*g_backend.device);
  g_backend.bf16 = ted::make_ops<ted::BFloat16>(*g_backend.device);
  std::printf("# backend %s on %s\n", g_backend.f32->name().c_str(),
              g_backend.device->name().c_str());
  if (require_cudnn) {  // a typical shape: bf16, 128 positions, 4 heads of 64
    const auto fused = g_backend.bf16->fused_attention(128, 4, 256, false);
    if (fused.kernel != "cudnn") {
      std::printf("SKIPPED: cuDNN's attention does not run here: %s\n",
                  fused.note.empty() ? ("the backend's fused kernel is " + fused.kernel).c_str()
                                     : fused.note.c_str());
      release();
      return 77;
    }
  }
  const int failed = session.run();
  release();
  return failed;
}
