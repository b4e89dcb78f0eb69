// What the CUDA backend must get right that a GPU shows only by failing, checked on the emulated
// GPU (part of test_comm_emulated, with its --device cuda and --backend):
// - a failed NCCL call inside a group leaves no group open behind it;
// - a collective's recorded time does not include the kernels queued before it;
// - on NCCL, measuring keeps the overlap: a started all-to-all that finished under the compute
//   queued after it records no exposed time, and nothing blocks the host to time it;
// - memory the device's pool keeps is handed back before cuBLAS sets up and when a device goes
//   away, so a sweep's next point sees the GPU's memory free;
// - NCCL's first collective on a communicator, which takes its connections' buffers from the
//   GPU then, finds them free after a step that went through nearly all of the GPU's memory;
// - the watchdog ends a collective whose peer never comes with one line (hidden case
//   [.watchdog], run alone by CTest with TED_NCCL_TIMEOUT set);
// - with TED_CUDA_DEBUG=1 a kernel that fails is reported at its launch, by name (hidden case
//   [.debug_launches], run alone by CTest with TED_EMU_GPUS=2).
// Run with TED_EMU_MEMORY=256M.
#include <cuda_runtime.h>
#include <mpi.h>
#include "catch.hpp"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "comm/test_env.hpp"
#include "ted/backend/registry.hpp"
#include "ted/core/error.hpp"
#include "ted/device/cuda_device.hpp"
#include "ted/device/tensor.hpp"
#include "ted/kernels/cuda/launch.hpp"
#include "ted_emu/control.hpp"

using ted::DataType;

namespace {

// Half a warp at a barrier, the other half in a shuffle naming the first half: it cannot end.
__global__ void stuck_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

bool on_gpu() {
  return ted::test::device().kind() == ted::DeviceKind::cuda;
}

std::vector<float> all_reduced(ted::Communicator& world, float mine) {
  std::vector<float> host(8, mine);
  ted::DeviceBuffer buffer(ted::test::device(), host.size() * sizeof(float));
  ted::test::device().copy_from_host(buffer.data(), host.data(), host.size() * sizeof(float));
  world.all_reduce(buffer.data(), buffer.data(), host.size(), DataType::f32);
  ted::test::device().copy_to_host(host.data(), buffer.data(), host.size() * sizeof(float));
  return host;
}

}  // namespace

TEST_CASE("an NCCL call that fails inside a group leaves no group open", "[emulated][nccl]") {
  if (ted::test::backend() != ted::CommBackend::nccl || ted::test::world().size() < 2) return;
  auto& world = ted::test::world();
  const std::size_t count = 4;
  ted::DeviceBuffer send(ted::test::device(), count * world.size() * sizeof(float));
  ted::DeviceBuffer recv(ted::test::device(), count * world.size() * sizeof(float));
  ted::test::device().fill(send.data(), count * world.size(), DataType::f32, 1.0);
  ted_emu::fail_nccl_call(2);  // the all-to-all's first receive, on every rank alike
  CHECK_THROWS_AS(world.all_to_all(send.data(), recv.data(), count, DataType::f32), ted::Error);
  // The next collective runs, rather than joining a group that never ends.
  const auto sums = all_reduced(world, static_cast<float>(world.rank() + 1));
  const float want = static_cast<float>(world.size() * (world.size() + 1) / 2);
  for (float v : sums) CHECK(v == want);
}

// On NCCL the host does not wait either: the time comes from events on the collective's stream.
TEST_CASE("a collective's recorded time leaves out the work queued before it", "[emulated]") {
  if (!on_gpu()) return;
  auto& world = ted::test::world();
  ted::Ledger ledger;
  ledger.set_keep_entries(true);
  world.set_ledger(&ledger);
  auto& device = ted::test::device();
  std::vector<float> host(8, 1.0f);
  ted::DeviceBuffer buffer(device, host.size() * sizeof(float));
  device.copy_from_host(buffer.data(), host.data(), host.size() * sizeof(float));
  device.synchronize();
  // 300 ms of "compute" on the device's stream, then the collective, with nothing between them
  // that waits for the stream (an upload there would wait for the compute before the clock).
  auto slow = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  REQUIRE(cudaLaunchHostFunc(ted::cuda::stream_of(device), slow, nullptr) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  world.all_reduce(buffer.data(), buffer.data(), host.size(), DataType::f32);
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  world.set_ledger(nullptr);
  device.copy_to_host(host.data(), buffer.data(), host.size() * sizeof(float));
  for (float v : host) CHECK(v == static_cast<float>(world.size()));
  REQUIRE(ledger.entries().size() == 1);
  if (world.backend() == ted::CommBackend::nccl) {
    // Timed by events on its own stream: the host did not wait for the compute to time it.
    CHECK(wall < 0.15);
  } else {
    CHECK(wall >= 0.3);  // staged through the host: it waits for the compute first
  }
  // Without the compute (the planted defect records all of its 0.3 s), with room for the ranks
  // arriving apart on a loaded machine (0.18 s seen on 2 busy cores).
  CHECK(ledger.entries()[0].seconds < 0.25);
}

TEST_CASE("on NCCL a recorded all-to-all keeps its overlap with the compute after it",
          "[emulated]") {
  auto& world = ted::test::world();
  if (!on_gpu() || world.backend() != ted::CommBackend::nccl) return;
  ted::Ledger ledger;
  ledger.set_keep_entries(true);
  world.set_ledger(&ledger);
  auto& device = ted::test::device();
  const std::size_t count = 1024;
  ted::DeviceBuffer send(device, count * world.size() * sizeof(float));
  ted::DeviceBuffer recv(device, count * world.size() * sizeof(float));
  device.fill(send.data(), count * world.size(), DataType::f32, 2.0);
  // The transfer goes out on the communicator's stream; 300 ms of compute queued after its
  // start on the device's stream hides it, and wait() comes after that compute.
  auto pending = world.all_to_all_start(send.data(), recv.data(), count, DataType::f32);
  auto slow = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  REQUIRE(cudaLaunchHostFunc(ted::cuda::stream_of(device), slow, nullptr) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  pending->wait();
  world.all_reduce(send.data(), send.data(), count, DataType::f32);  // blocking, also not waited
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<float> host(count * world.size());
  device.copy_to_host(host.data(), recv.data(), host.size() * sizeof(float));
  world.set_ledger(nullptr);
  for (float v : host) CHECK(v == 2.0f);
  CHECK(wall < 0.15);  // neither wait() nor the blocking all-reduce held the host
  REQUIRE(ledger.entries().size() == 2);
  CHECK(ledger.entries()[0].op == ted::CollectiveOp::all_to_all);
  CHECK(ledger.entries()[0].seconds < 0.1);  // done long before the compute reached wait()
  CHECK(ledger.entries()[1].seconds < 0.1);  // the all-reduce's own time, not the compute's
}

TEST_CASE("memory the pool keeps goes back to the GPU for cuBLAS and for the next device",
          "[emulated]") {
  if (!on_gpu()) return;
  std::size_t free_before = 0, total = 0;
  {
    // No headroom: the pool may keep all of the GPU (its release threshold).
    setenv("TED_POOL_HEADROOM", "0", 1);
    int mine = 0;  // this rank's GPU (another rank's may be in exclusive-process mode)
    REQUIRE(cudaGetDevice(&mine) == cudaSuccess);
    auto device = ted::make_gpu_device(mine);
    unsetenv("TED_POOL_HEADROOM");
    REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
    REQUIRE(total == std::size_t{256} << 20);
    // Nearly all of the GPU, freed into the pool, which keeps it.
    { ted::DeviceBuffer big(*device, free_before - (std::size_t{2} << 20)); }
    device->synchronize();
    // cuBLAS's workspace comes from cudaMalloc, not the pool: the kernel tables must hand the
    // pool's memory back first.
    CHECK_NOTHROW(ted::make_ops<float>(*device));
  }
  // The device went away: what its pool kept is free again for the next one.
  std::size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after >= free_before);
}

// NCCL connects a communicator to its peers at its first collective and takes the connections'
// buffers with cudaMalloc then, outside the pool: a pool that kept all it ever held would leave
// nothing for them (the release threshold, and the trim before the first collective).
TEST_CASE("NCCL's first collective finds the memory for its connections", "[emulated][nccl]") {
  if (ted::test::backend() != ted::CommBackend::nccl || ted::test::world().size() < 2) return;
  auto& world = ted::test::world();
  auto& device = ted::test::device();
  auto fresh = world.split(0, world.rank(), ted::GroupKind::world);  // not connected yet
  std::size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  // A step's peak: nearly all of the GPU's free memory through the pool, then freed.
  { ted::DeviceBuffer peak(device, free - (std::size_t{1} << 20)); }
  device.synchronize();
  std::vector<float> sums;
  REQUIRE_NOTHROW(sums = all_reduced(*fresh, 1.0f));
  for (float v : sums) CHECK(v == static_cast<float>(world.size()));
}

TEST_CASE("a collective whose peer never comes ends the process with one line",
          "[.watchdog][emulated][nccl]") {
  if (ted::test::backend() != ted::CommBackend::nccl || ted::test::world().size() < 2) return;
  auto& world = ted::test::world();
  if (world.rank() == 0) {
    all_reduced(world, 1.0f);  // rank 1 never joins: the watchdog ends this process
    FAIL("the all-reduce returned without its peer");
  }
  MPI_Barrier(MPI_COMM_WORLD);  // waits until mpirun ends it
}

TEST_CASE("with TED_CUDA_DEBUG=1 a failing kernel is reported at its launch, by name",
          "[.debug_launches][emulated]") {
  REQUIRE(ted::kernels::cuda::debug_launches());
  REQUIRE(cudaSetDevice(1) == cudaSuccess);  // this test leaves its device failed
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  int* out = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&out), 32 * sizeof(int)) == cudaSuccess);
  try {
    ted::kernels::cuda::launch<stuck_kernel>(1, 32, 0, stream, out);
    FAIL("the launch returned");
  } catch (const ted::Error& e) {
    const std::string text = e.what();
    INFO(text);
    CHECK(text.find("stuck_kernel") != std::string::npos);
    CHECK(text.find("failed while running") != std::string::npos);
  }
}
