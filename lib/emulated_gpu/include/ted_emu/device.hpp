// What kernel code sees on the emulated GPU: the built-in variables (threadIdx, blockIdx,
// blockDim, gridDim), the warp and block synchronisation, shuffles and ballots, atomics and the
// device math CUDA adds to the host's. Included by cuda_runtime.h.
//
// Each thread of a block is a fiber; a fiber runs until it reaches a barrier, a warp-wide
// operation or its end, then the block's scheduler (src/scheduler.cpp) runs the next one. A
// warp-wide operation completes once every lane its mask names has reached it; __syncthreads
// once every thread of the block that has not exited has. So a missing barrier lets a thread
// read what the others have not written yet, as on a GPU.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>

struct cudaLaunchConfig_t;

namespace ted_emu::detail {

enum class WarpOp : int { sync, shuffle_index, shuffle_xor, shuffle_up, shuffle_down, ballot };

// Blocks the calling fiber at the block's barrier.
void sync_threads();
// Blocks the calling fiber until every lane of `mask` has reached the same warp-wide operation,
// then returns this lane's result: the 8 bytes of the chosen source lane's `bits` (shuffles,
// all ones when that lane is not taking part), or the ballot of the lanes' `bits != 0`.
std::uint64_t warp_exchange(WarpOp op, unsigned mask, std::uint64_t bits, int param, int width);
// A kernel asked the GPU to stop (__trap): the launch fails with cudaErrorLaunchFailure.
[[noreturn]] void trap(const char* why);

// One thread's call of a launched kernel with the launch's arguments.
class KernelCall {
 public:
  virtual ~KernelCall() = default;
  virtual void run() const = 0;
};

template <typename Kernel, typename Args>
class BoundKernel final : public KernelCall {
 public:
  BoundKernel(Kernel kernel, Args args) : kernel_(kernel), args_(std::move(args)) {}
  void run() const override { std::apply(kernel_, args_); }

 private:
  Kernel kernel_;
  Args args_;
};

template <typename... Params, typename Args>
std::shared_ptr<const KernelCall> make_kernel_call(void (*kernel)(Params...), Args args) {
  return std::make_shared<BoundKernel<void (*)(Params...), Args>>(kernel, std::move(args));
}

// Checks the launch as the runtime does, then queues the grid on the stream.
cudaError_t launch(const cudaLaunchConfig_t* config, const void* kernel,
                   std::shared_ptr<const KernelCall> call);

template <typename T>
std::uint64_t to_bits(T value) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move up to 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}
template <typename T>
T from_bits(std::uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

}  // namespace ted_emu::detail

// The built-in variables, as variables of the OS thread: the scheduler writes the values of the
// fiber it is about to resume (a sync call is opaque to the compiler, so kernels reload them).
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread uint3 blockDim;
extern __thread uint3 gridDim;
constexpr int warpSize = 32;

// ---- synchronisation, shuffles, ballots ------------------------------------------------------
inline void __syncthreads() {
  ted_emu::detail::sync_threads();
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ted_emu::detail::warp_exchange(ted_emu::detail::WarpOp::sync, mask, 0, 0, 32);
}
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  using namespace ted_emu::detail;
  return from_bits<T>(warp_exchange(WarpOp::shuffle_index, mask, to_bits(var), src_lane, width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  using namespace ted_emu::detail;
  return from_bits<T>(warp_exchange(WarpOp::shuffle_xor, mask, to_bits(var), lane_mask, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace ted_emu::detail;
  return from_bits<T>(
      warp_exchange(WarpOp::shuffle_up, mask, to_bits(var), static_cast<int>(delta), width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  using namespace ted_emu::detail;
  return from_bits<T>(
      warp_exchange(WarpOp::shuffle_down, mask, to_bits(var), static_cast<int>(delta), width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  using namespace ted_emu::detail;
  return static_cast<unsigned>(warp_exchange(WarpOp::ballot, mask, predicate != 0, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) != 0;
}
inline int __all_sync(unsigned mask, int predicate) {
  return __ballot_sync(mask, predicate) == __ballot_sync(mask, 1);
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __threadfence_block() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
[[noreturn]] inline void __trap() {
  ted_emu::detail::trap("__trap()");
}

// ---- integer intrinsics ----------------------------------------------------------------------
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
inline int __popcll(unsigned long long x) {
  return __builtin_popcountll(x);
}
inline int __ffs(int x) {
  return __builtin_ffs(x);
}
inline int __clz(int x) {
  return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x));
}
template <typename T>
T __ldg(const T* p) {
  return *p;
}

// ---- atomics: real ones, since several streams may run kernels at once ------------------------
template <typename T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value, std::memory_order_relaxed);
}
template <typename T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value, std::memory_order_relaxed);
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value, std::memory_order_relaxed);
  return compare;  // the old value either way
}
template <typename T>
T atomicMax(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (old < value && !ref.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
T atomicMin(T* address, T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load(std::memory_order_relaxed);
  while (value < old && !ref.compare_exchange_weak(old, value, std::memory_order_relaxed)) {
  }
  return old;
}

// ---- device math that the host's math.h lacks ------------------------------------------------
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
inline double rsqrt(double x) {
  return 1.0 / sqrt(x);
}
inline float __expf(float x) {
  return expf(x);
}
inline float __logf(float x) {
  return logf(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
// CUDA's min and max take any two arithmetic types (the usual conversions).
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> min(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(b) < static_cast<C>(a) ? static_cast<C>(b) : static_cast<C>(a);
}
template <typename A, typename B,
          typename = std::enable_if_t<std::is_arithmetic_v<A> && std::is_arithmetic_v<B>>>
inline std::common_type_t<A, B> max(A a, B b) {
  using C = std::common_type_t<A, B>;
  return static_cast<C>(a) < static_cast<C>(b) ? static_cast<C>(b) : static_cast<C>(a);
}
