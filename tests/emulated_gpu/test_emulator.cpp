// The emulated GPU against what a GPU does where correctness depends on it (docs/emulated_gpu.md):
// launch limits and their errors, __shared__ and barriers, warp shuffles and ballots, a block
// order that changes between launches, asynchronous streams ordered by events, checked copies,
// out-of-bounds writes, shared memory that holds no old values and is bounded, the memory pool,
// cuBLAS's column-major GEMMs and CUB's sort protocol. Kernels are written here in CUDA C++ and
// compiled by the host compiler against the emulator. Run with TED_EMU_GPUS=6 (device 0 for the
// ordinary cases; 1 to 5 for the cases that leave a device failed, as a real fault leaves a GPU
// context) and TED_EMU_MEMORY=256M.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include "catch.hpp"

#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

namespace {

__global__ void store_index(int* out) {
  out[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int>(blockIdx.x * 1000 + threadIdx.x);
}

__global__ void uses_dynamic_shared(int* out) {
  out[threadIdx.x] = 1;
}

// Each thread reads its right neighbour's value through shared memory.
template <bool kBarrier>
__global__ void neighbour(const int* in, int* out) {
  __shared__ int shared[256];
  const unsigned t = threadIdx.x;
  shared[t] = in[t];
  if (kBarrier) __syncthreads();
  out[t] = shared[(t + 1) % blockDim.x];
}

__global__ void warp_ops(int* sum, int* down, int* up, unsigned* ballot, int* half) {
  const int lane = static_cast<int>(threadIdx.x);
  int v = lane;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  sum[lane] = v;
  down[lane] = __shfl_down_sync(0xffffffffu, lane, 3);
  up[lane] = __shfl_up_sync(0xffffffffu, lane, 2);
  ballot[lane] = __ballot_sync(0xffffffffu, lane & 1);
  half[lane] = __shfl_sync(0xffffffffu, lane, 5, 16);  // lane 5 of each half-warp
}

// Half a warp waits at a barrier while the other half waits in a shuffle that names the first
// half: neither can complete (a GPU hangs or returns garbage).
__global__ void divergent(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
  }
}

// Reads its static shared memory before writing it: what a previous block left there, or on a
// GPU whatever the memory held.
__global__ void read_before_write(float* out) {
  __shared__ float tile[64];
  out[blockIdx.x * blockDim.x + threadIdx.x] = tile[threadIdx.x];
  __syncthreads();
  tile[threadIdx.x] = 1.0f;
}

}  // namespace

extern __shared__ float4 ted_dynamic_shared[];  // as kernels/cuda/common.cuh declares it

namespace {

// Writes `count` floats of dynamic shared memory, whatever the launch asked for.
__global__ void fill_dynamic(int count) {
  float* shared = reinterpret_cast<float*>(ted_dynamic_shared);
  for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x))
    shared[i] = 2.0f;
  __syncthreads();
}

// Lanes past `active` return before a full-mask shuffle names them.
__global__ void shuffle_after_exit(int* out, unsigned active) {
  if (threadIdx.x >= active) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void record_order(int* counter, int* order) {
  if (threadIdx.x == 0) order[atomicAdd(counter, 1)] = static_cast<int>(blockIdx.x);
}

__global__ void write_one_past(int* data, int n) {
  if (threadIdx.x == 0) data[n] = 7;
}

template <typename... Params, typename... Args>
cudaError_t run(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared,
                cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <typename T>
T* device_buffer(std::size_t n) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> download(const T* p, std::size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

}  // namespace

TEST_CASE("the emulated GPU looks like an H100 and says it is emulated", "[emulator]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  REQUIRE(count == 6);
  cudaDeviceProp p{};
  REQUIRE(cudaGetDeviceProperties(&p, 0) == cudaSuccess);
  CHECK(std::string(p.name).find("emulated") != std::string::npos);
  CHECK(p.maxThreadsPerBlock == 1024);
  CHECK(p.maxGridSize[1] == 65535);
  CHECK(p.sharedMemPerBlock == 48 * 1024);
  CHECK(p.sharedMemPerBlockOptin == 232448);
  CHECK(cudaSetDevice(6) == cudaErrorInvalidDevice);
  cudaGetLastError();
}

TEST_CASE("launches beyond an H100's limits fail with the runtime's errors", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int* out = device_buffer<int>(2048);
  CHECK(run(store_index, 1, 1024, 0, nullptr, out) == cudaSuccess);
  CHECK(run(store_index, 1, 1025, 0, nullptr, out) == cudaErrorInvalidConfiguration);
  CHECK(run(store_index, dim3(1, 65536), 1, 0, nullptr, out) == cudaErrorInvalidConfiguration);
  CHECK(run(store_index, dim3(1, 1, 65536), 1, 0, nullptr, out) == cudaErrorInvalidConfiguration);
  CHECK(run(store_index, 1, dim3(1, 1, 65), 0, nullptr, out) == cudaErrorInvalidConfiguration);
  CHECK(run(store_index, 0, 32, 0, nullptr, out) == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);  // recorded, then cleared
  CHECK(cudaGetLastError() == cudaSuccess);
  // Dynamic shared memory: 48 KiB without asking, up to the device's maximum once opted in.
  CHECK(run(uses_dynamic_shared, 1, 32, 48 * 1024, nullptr, out) == cudaSuccess);
  CHECK(run(uses_dynamic_shared, 1, 32, 64 * 1024, nullptr, out) == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(uses_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             232448 + 1) == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(uses_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               64 * 1024) == cudaSuccess);
  CHECK(run(uses_dynamic_shared, 1, 32, 64 * 1024, nullptr, out) == cudaSuccess);
  CHECK(run(uses_dynamic_shared, 1, 32, 64 * 1024 + 4, nullptr, out) == cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const auto values = download(out, 1024);
  CHECK(values[0] == 1);
  CHECK(values[1023] == 1023);  // the first launch ran
  cudaFree(out);
}

TEST_CASE("threads of a block share __shared__ memory and meet at barriers", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  std::vector<int> host(256);
  std::iota(host.begin(), host.end(), 500);
  int* in = device_buffer<int>(256);
  int* out = device_buffer<int>(256);
  REQUIRE(cudaMemcpy(in, host.data(), sizeof(int) * 256, cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(run(neighbour<true>, 1, 256, 0, nullptr, in, out) == cudaSuccess);
  auto got = download(out, 256);
  for (int t = 0; t < 256; ++t) CHECK(got[t] == host[(t + 1) % 256]);
  // Without the barrier some thread reads its neighbour's slot before the neighbour wrote it,
  // whatever order the threads run in. Fresh input each time, so old values cannot match.
  for (int round = 0; round < 4; ++round) {
    for (int& v : host) v += 1000;
    REQUIRE(cudaMemcpy(in, host.data(), sizeof(int) * 256, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(run(neighbour<false>, 1, 256, 0, nullptr, in, out) == cudaSuccess);
    got = download(out, 256);
    int wrong = 0;
    for (int t = 0; t < 256; ++t) wrong += got[t] != host[(t + 1) % 256];
    CHECK(wrong > 0);
  }
  cudaFree(in);
  cudaFree(out);
}

TEST_CASE("warp shuffles and ballots exchange values between the lanes of a warp", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int *sum = device_buffer<int>(32), *down = device_buffer<int>(32), *up = device_buffer<int>(32),
      *half = device_buffer<int>(32);
  unsigned* ballot = device_buffer<unsigned>(32);
  REQUIRE(run(warp_ops, 1, 32, 0, nullptr, sum, down, up, ballot, half) == cudaSuccess);
  const auto s = download(sum, 32), d = download(down, 32), u = download(up, 32),
             h = download(half, 32);
  const auto b = download(ballot, 32);
  for (int lane = 0; lane < 32; ++lane) {
    CHECK(s[lane] == 31 * 32 / 2);
    CHECK(d[lane] == (lane + 3 < 32 ? lane + 3 : lane));  // past the end: its own value
    CHECK(u[lane] == (lane >= 2 ? lane - 2 : lane));
    CHECK(b[lane] == 0xaaaaaaaau);
    CHECK(h[lane] == (lane < 16 ? 5 : 21));
  }
  for (void* p : {static_cast<void*>(sum), static_cast<void*>(down), static_cast<void*>(up),
                  static_cast<void*>(half), static_cast<void*>(ballot)})
    cudaFree(p);
}

TEST_CASE("the order of blocks changes between launches", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const int blocks = 64;
  int* counter = device_buffer<int>(1);
  int* order = device_buffer<int>(blocks);
  std::vector<std::vector<int>> seen;
  for (int launch = 0; launch < 2; ++launch) {
    REQUIRE(cudaMemset(counter, 0, sizeof(int)) == cudaSuccess);
    REQUIRE(run(record_order, blocks, 32, 0, nullptr, counter, order) == cudaSuccess);
    seen.push_back(download(order, blocks));
    auto sorted = seen.back();
    std::sort(sorted.begin(), sorted.end());
    std::vector<int> all(blocks);
    std::iota(all.begin(), all.end(), 0);
    CHECK(sorted == all);                                            // every block ran once
    CHECK(!std::is_sorted(seen.back().begin(), seen.back().end()));  // not in index order
  }
  CHECK(seen[0] != seen[1]);
  cudaFree(counter);
  cudaFree(order);
}

TEST_CASE("streams run asynchronously and in order; events order one after another", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t a, b;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  int* data = device_buffer<int>(1024);
  int* pinned = nullptr;
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), sizeof(int) * 1024) == cudaSuccess);
  // A slow piece of work, then a fill and a download to pinned memory: the host reads before
  // the stream got there, and sees no result (the emulator poisons a pending download).
  auto sleep = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); };
  REQUIRE(cudaLaunchHostFunc(a, sleep, nullptr) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(data, 0x01, sizeof(int) * 1024, a) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(pinned, data, sizeof(int) * 1024, cudaMemcpyDeviceToHost, a) ==
          cudaSuccess);
  CHECK(cudaStreamQuery(a) == cudaErrorNotReady);
  CHECK(pinned[0] != 0x01010101);
  REQUIRE(cudaStreamSynchronize(a) == cudaSuccess);
  CHECK(pinned[1023] == 0x01010101);
  // Stream b waits for an event that stream a records after slow work.
  cudaEvent_t ready;
  REQUIRE(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(a, sleep, nullptr) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(data, 0x02, sizeof(int) * 1024, a) == cudaSuccess);
  REQUIRE(cudaEventRecord(ready, a) == cudaSuccess);
  CHECK(cudaEventQuery(ready) == cudaErrorNotReady);
  REQUIRE(cudaStreamWaitEvent(b, ready, 0) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(pinned, data, sizeof(int) * 1024, cudaMemcpyDeviceToHost, b) ==
          cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  CHECK(pinned[0] == 0x02020202);
  CHECK(cudaEventQuery(ready) == cudaSuccess);
  // Timing events measure the time between them on the stream.
  cudaEvent_t start, stop;
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&stop) == cudaSuccess);
  REQUIRE(cudaEventRecord(start, a) == cudaSuccess);
  REQUIRE(cudaLaunchHostFunc(a, sleep, nullptr) == cudaSuccess);
  REQUIRE(cudaEventRecord(stop, a) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(stop) == cudaSuccess);
  float ms = 0;
  REQUIRE(cudaEventElapsedTime(&ms, start, stop) == cudaSuccess);
  CHECK(ms >= 45.0f);
  CHECK(cudaEventElapsedTime(&ms, ready, stop) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  for (cudaEvent_t e : {ready, start, stop}) cudaEventDestroy(e);
  cudaFreeHost(pinned);
  cudaFree(data);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

TEST_CASE("copies are checked against the allocations they touch", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int* data = device_buffer<int>(16);
  std::vector<int> host(32, 3);
  CHECK(cudaMemcpy(data, host.data(), sizeof(int) * 16, cudaMemcpyHostToDevice) == cudaSuccess);
  CHECK(cudaMemcpy(data, host.data(), sizeof(int) * 17, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);  // one past the end
  CHECK(cudaMemcpy(host.data(), data, sizeof(int) * 16, cudaMemcpyHostToDevice) ==
        cudaErrorInvalidValue);  // the direction says otherwise
  CHECK(cudaMemcpy(data + 4, data, sizeof(int) * 8, cudaMemcpyDeviceToDevice) == cudaSuccess);
  CHECK(cudaMemsetAsync(data + 8, 0, sizeof(int) * 9, nullptr) == cudaErrorInvalidValue);
  REQUIRE(cudaFree(data) == cudaSuccess);
  CHECK(cudaMemcpy(host.data(), data, sizeof(int), cudaMemcpyDeviceToHost) ==
        cudaErrorInvalidValue);  // freed: host memory now, as far as the runtime knows
  cudaGetLastError();
  // Fresh device memory reads as NaN, not as zeros by luck.
  float* fresh = device_buffer<float>(4);
  const auto values = download(fresh, 4);
  CHECK(std::isnan(values[0]));
  cudaFree(fresh);
}

TEST_CASE("a barrier that some threads never reach fails the launch and the device", "[emulator]") {
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  int* out = device_buffer<int>(32);
  REQUIRE(run(divergent, 1, 32, 0, nullptr, out) == cudaSuccess);  // queued
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  CHECK(run(store_index, 1, 32, 0, nullptr, out) == cudaErrorLaunchFailure);  // sticky
  cudaGetLastError();
}

TEST_CASE("static __shared__ memory reads as NaN at each block's start", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  float* out = device_buffer<float>(4 * 64);
  REQUIRE(run(read_before_write, 4, 64, 0, nullptr, out) == cudaSuccess);
  const auto got = download(out, 4 * 64);
  // Every block, the first one and those after a block that wrote 1.0 everywhere.
  for (float v : got) CHECK(std::isnan(v));
  cudaFree(out);
}

TEST_CASE("a kernel that writes past the dynamic shared memory it asked for fails", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(run(fill_dynamic, 2, 64, 256 * sizeof(float), nullptr, 256) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // all of it inside: fine
  REQUIRE(cudaSetDevice(3) == cudaSuccess);
  REQUIRE(run(fill_dynamic, 2, 64, 256 * sizeof(float), nullptr, 257) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  cudaGetLastError();
}

TEST_CASE("a full-mask shuffle that names lanes which have exited fails the launch", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  int* out = device_buffer<int>(32);
  REQUIRE(run(shuffle_after_exit, 1, 32, 0, nullptr, out, 32u) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // every lane there: fine
  REQUIRE(cudaSetDevice(4) == cudaSuccess);
  int* other = device_buffer<int>(32);
  REQUIRE(run(shuffle_after_exit, 1, 32, 0, nullptr, other, 20u) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
  cudaGetLastError();
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaFree(out);
}

TEST_CASE("a write past the end of an allocation is an illegal address", "[emulator]") {
  REQUIRE(cudaSetDevice(2) == cudaSuccess);
  int* data = device_buffer<int>(100);
  REQUIRE(run(write_one_past, 1, 32, 0, nullptr, data, 100) == cudaSuccess);
  CHECK(cudaFree(data) == cudaErrorIllegalAddress);
  cudaGetLastError();
}

TEST_CASE("the pool keeps freed memory, which cudaMalloc cannot use until it is trimmed",
          "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  cudaMemPool_t pool;
  REQUIRE(cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess);
  std::uint64_t keep = UINT64_MAX;
  REQUIRE(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) == cudaSuccess);
  std::size_t free0 = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free0, &total) == cudaSuccess);
  CHECK(total == std::size_t{256} << 20);
  void* big = nullptr;
  REQUIRE(cudaMallocAsync(&big, std::size_t{200} << 20, stream) == cudaSuccess);
  REQUIRE(cudaFreeAsync(big, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  std::size_t free1 = 0;
  REQUIRE(cudaMemGetInfo(&free1, &total) == cudaSuccess);
  CHECK(free1 + (std::size_t{200} << 20) <= free0);  // still held by the pool
  void* other = nullptr;
  CHECK(cudaMalloc(&other, std::size_t{100} << 20) == cudaErrorMemoryAllocation);
  cudaGetLastError();
  void* again = nullptr;  // the pool itself reuses it
  REQUIRE(cudaMallocAsync(&again, std::size_t{150} << 20, stream) == cudaSuccess);
  REQUIRE(cudaFreeAsync(again, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaMemPoolTrimTo(pool, 0) == cudaSuccess);
  std::size_t free2 = 0;
  REQUIRE(cudaMemGetInfo(&free2, &total) == cudaSuccess);
  CHECK(free2 == free0);
  CHECK(cudaMalloc(&other, std::size_t{100} << 20) == cudaSuccess);
  cudaFree(other);
  keep = 0;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  cudaStreamDestroy(stream);
}

TEST_CASE("cuBLAS GEMMs have their column-major meaning", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 4, k = 3, pad = 2, batch = 2;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      // Column-major A is m x k (op N) or k x m (op T), with a padded leading dimension.
      const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
      const int lda = a_rows + pad, ldb = b_rows + pad, ldc = m + pad;
      const long long sa = static_cast<long long>(lda) * a_cols + 3,
                      sb = static_cast<long long>(ldb) * b_cols + 1,
                      sc = static_cast<long long>(ldc) * n + 2;
      std::vector<float> a(sa * batch), b(sb * batch), c(sc * batch);
      for (float& v : a) v = uniform(rng);
      for (float& v : b) v = uniform(rng);
      for (float& v : c) v = uniform(rng);
      const float alpha = 0.5f, beta = -1.5f;
      std::vector<float> want = c;
      for (int i = 0; i < batch; ++i)
        for (int col = 0; col < n; ++col)
          for (int row = 0; row < m; ++row) {
            double acc = 0;
            for (int p = 0; p < k; ++p) {
              const float av = ta ? a[i * sa + row * lda + p] : a[i * sa + p * lda + row];
              const float bv = tb ? b[i * sb + p * ldb + col] : b[i * sb + col * ldb + p];
              acc += static_cast<double>(av) * bv;
            }
            float& out = want[i * sc + col * ldc + row];
            out = static_cast<float>(alpha * acc + beta * out);
          }
      float *da = device_buffer<float>(a.size()), *db = device_buffer<float>(b.size()),
            *dc = device_buffer<float>(c.size());
      cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice);
      REQUIRE(cublasGemmStridedBatchedEx(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, da,
                                         CUDA_R_32F, lda, sa, db, CUDA_R_32F, ldb, sb, &beta, dc,
                                         CUDA_R_32F, ldc, sc, batch, CUBLAS_COMPUTE_32F,
                                         CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      const auto got = download(dc, c.size());
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
      cudaFree(da);
      cudaFree(db);
      cudaFree(dc);
    }
  // Checked as cuBLAS checks: a leading dimension below the rows, mixed operand types.
  const float one = 1.0f;
  float* x = device_buffer<float>(64);
  CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x, CUDA_R_32F, 3, x,
                     CUDA_R_32F, 4, &one, x, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, x, CUDA_R_16F, 4, x,
                     CUDA_R_32F, 4, &one, x, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED);
  cudaFree(x);
  cublasDestroy(handle);
}

TEST_CASE("CUB's radix sort: storage asked first, too little refused, stable", "[emulator]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  const int n = 1000;
  std::vector<std::uint64_t> keys(n);
  std::vector<std::int32_t> values(n);
  for (int i = 0; i < n; ++i) {
    keys[i] = static_cast<std::uint64_t>((i * 37) % 10);  // many ties
    values[i] = i;
  }
  auto* keys_in = device_buffer<std::uint64_t>(n);
  auto* keys_out = device_buffer<std::uint64_t>(n);
  auto* values_in = device_buffer<std::int32_t>(n);
  auto* values_out = device_buffer<std::int32_t>(n);
  cudaMemcpy(keys_in, keys.data(), n * 8, cudaMemcpyHostToDevice);
  cudaMemcpy(values_in, values.data(), n * 4, cudaMemcpyHostToDevice);
  std::size_t bytes = 0;
  REQUIRE(cub::DeviceRadixSort::SortPairsDescending(nullptr, bytes, keys_in, keys_out, values_in,
                                                    values_out, n) == cudaSuccess);
  REQUIRE(bytes > 0);
  void* temp = nullptr;
  REQUIRE(cudaMalloc(&temp, bytes) == cudaSuccess);
  std::size_t too_few = bytes - 1;
  CHECK(cub::DeviceRadixSort::SortPairsDescending(temp, too_few, keys_in, keys_out, values_in,
                                                  values_out, n) == cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE(cub::DeviceRadixSort::SortPairsDescending(temp, bytes, keys_in, keys_out, values_in,
                                                    values_out, n) == cudaSuccess);
  const auto got_keys = download(keys_out, n);
  const auto got_values = download(values_out, n);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[b] < keys[a]; });
  for (int i = 0; i < n; ++i) {
    CHECK(got_keys[i] == keys[order[i]]);
    CHECK(got_values[i] == order[i]);
  }
  for (void* p : {temp, static_cast<void*>(keys_in), static_cast<void*>(keys_out),
                  static_cast<void*>(values_in), static_cast<void*>(values_out)})
    cudaFree(p);
}
