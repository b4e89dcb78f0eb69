// The emulated GPU's runtime, its streams and events: a stream runs its work in order on a
// thread of its own, asynchronously to the host; events order streams and time them. With the
// CUDA calls that make, wait for and destroy them, and cudaLaunchHostFunc.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <thread>
#include <unordered_map>

#include "runtime_state.hpp"

struct CUevent_st {
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t recorded = 0, completed = 0;
  std::chrono::steady_clock::time_point when{};
  unsigned flags = 0;
};

namespace ted_emu {

std::mutex g_handles_mutex;
std::set<CUstream_st*> g_streams;

namespace {
std::unordered_map<CUevent_st*, std::shared_ptr<CUevent_st>> g_events;
}  // namespace

// ---- streams ------------------------------------------------------------------------------------
Stream::Stream(int device, unsigned) : device_(device), thread_([this] { run(); }) {}

Stream::~Stream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void Stream::enqueue(std::function<void()> work, bool held_back) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({std::move(work), held_back});
    ++queued_;
  }
  changed_.notify_all();
}

void Stream::run_one(std::unique_lock<std::mutex>& lock) {
  Work work = std::move(queue_.front());
  queue_.pop_front();
  executing_ = true;
  lock.unlock();
  if (work.held_back && settings().delay_us)
    std::this_thread::sleep_for(std::chrono::microseconds(settings().delay_us));
  work.run();
  lock.lock();
  executing_ = false;
  ++finished_;
  changed_.notify_all();
}

// A thread that waits for the stream runs its work itself, in order, rather than sleeping
// until the stream's thread has (the same order, fewer hand-offs between threads).
void Stream::synchronize() {
  std::unique_lock lock(mutex_);
  const std::uint64_t target = queued_;
  while (finished_ < target) {
    if (!queue_.empty() && !executing_) {
      run_one(lock);
    } else {
      changed_.wait(lock);
    }
  }
}

bool Stream::idle() {
  std::lock_guard lock(mutex_);
  return finished_ == queued_;
}

void Stream::run() {
  tls_device = device_;
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !executing_); });
    if (queue_.empty()) return;  // stopping, and nothing left
    run_one(lock);
  }
}

Stream* stream_of(cudaStream_t handle) {
  if (!handle) {
    const int device = tls_device;
    if (!valid_device(device) || open_device(device) != cudaSuccess) return nullptr;
    return device_state(device).default_stream.get();
  }
  std::lock_guard lock(g_handles_mutex);
  return g_streams.count(handle) ? handle->stream.get() : nullptr;
}

}  // namespace ted_emu

using namespace ted_emu;

// ---- streams and events -------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (!stream) return set_error(cudaErrorInvalidValue);
  if (!valid_device(tls_device)) return set_error(cudaErrorNoDevice);
  if (cudaError_t rc = open_device(tls_device)) return set_error(rc);
  auto* handle = new CUstream_st{std::make_unique<Stream>(tls_device, flags)};
  std::lock_guard lock(g_handles_mutex);
  g_streams.insert(handle);
  *stream = handle;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (cudaError_t rc = context()) return set_error(rc);
  {
    std::lock_guard lock(g_handles_mutex);
    if (!stream || !g_streams.erase(stream)) return set_error(cudaErrorInvalidResourceHandle);
  }
  delete stream;  // its thread finishes the queued work first
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  stream->synchronize();
  settle_pool(stream->device());
  return set_error(device_error(stream->device()));
}

cudaError_t cudaStreamQuery(cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t rc = device_error(stream->device())) return set_error(rc);
  return stream->idle() ? cudaSuccess : cudaErrorNotReady;
}

namespace {
std::shared_ptr<CUevent_st> find_event(cudaEvent_t event) {
  std::lock_guard lock(g_handles_mutex);
  auto it = g_events.find(event);
  return it == g_events.end() ? nullptr : it->second;
}
}  // namespace

cudaError_t cudaStreamWaitEvent(cudaStream_t handle, cudaEvent_t event, unsigned int) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  auto e = find_event(event);
  if (!stream || !e) return set_error(cudaErrorInvalidResourceHandle);
  std::uint64_t target;
  {
    std::lock_guard lock(e->mutex);
    target = e->recorded;
  }
  if (target == 0) return cudaSuccess;  // never recorded: nothing to wait for
  stream->enqueue([e, target] {
    std::unique_lock lock(e->mutex);
    e->changed.wait(lock, [&] { return e->completed >= target; });
  });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t handle, cudaHostFn_t fn, void* user_data) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (!fn) return set_error(cudaErrorInvalidValue);
  stream->enqueue([fn, user_data] { fn(user_data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (!event) return set_error(cudaErrorInvalidValue);
  auto e = std::make_shared<CUevent_st>();
  e->flags = flags;
  std::lock_guard lock(g_handles_mutex);
  g_events[e.get()] = e;
  *event = e.get();
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (cudaError_t rc = context()) return set_error(rc);
  std::lock_guard lock(g_handles_mutex);
  // Work that still refers to it keeps it alive until it has run (CUDA releases it then).
  return g_events.erase(event) ? cudaSuccess : set_error(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  auto e = find_event(event);
  if (!stream || !e) return set_error(cudaErrorInvalidResourceHandle);
  std::uint64_t generation;
  {
    std::lock_guard lock(e->mutex);
    generation = ++e->recorded;
  }
  stream->enqueue([e, generation] {
    {
      std::lock_guard lock(e->mutex);
      e->completed = std::max(e->completed, generation);
      e->when = std::chrono::steady_clock::now();
    }
    e->changed.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (cudaError_t rc = context()) return set_error(rc);
  auto e = find_event(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  std::unique_lock lock(e->mutex);
  const std::uint64_t target = e->recorded;
  e->changed.wait(lock, [&] { return e->completed >= target; });
  lock.unlock();
  settle_pool(tls_device);
  return set_error(valid_device(tls_device) ? device_error(tls_device) : cudaSuccess);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (cudaError_t rc = context()) return set_error(rc);
  auto e = find_event(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(e->mutex);
  return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (cudaError_t rc = context()) return set_error(rc);
  auto a = find_event(start), b = find_event(end);
  if (!ms || !a || !b) return set_error(cudaErrorInvalidValue);
  if ((a->flags | b->flags) & cudaEventDisableTiming)
    return set_error(cudaErrorInvalidResourceHandle);
  std::scoped_lock lock(a->mutex, b->mutex);
  if (!a->recorded || !b->recorded) return set_error(cudaErrorInvalidResourceHandle);
  if (a->completed < a->recorded || b->completed < b->recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}
