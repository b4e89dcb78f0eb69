// Main of the GPU tests: exits 77 (CTest: skipped) when no GPU is visible, so a machine
// without one never reports these tests as passed. Otherwise runs Catch2 on GPU 0.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <memory>

#include "cuda/gpu.hpp"
#include "ted/backend/registry.hpp"

namespace {
std::unique_ptr<ted::Device> g_device;
std::unique_ptr<ted::kernels::cuda::Context> g_context;
}  // namespace

ted::kernels::cuda::Context& ted::test::gpu() {
  return *g_context;
}

int main(int argc, char** argv) {
  if (ted::gpu_count() == 0) {
    std::printf("SKIPPED: no GPU visible to this process (the CUDA tests need one)\n");
    return 77;
  }
  g_device = ted::make_gpu_device(0);
  g_context = std::make_unique<ted::kernels::cuda::Context>(*g_device);
  std::printf("GPU: %s\n", g_device->name().c_str());
  int failed = Catch::Session().run(argc, argv);
  g_context.reset();
  g_device.reset();
  return failed;
}
