// The emulated GPU's runtime, its copies and fills. Each copy is checked against the
// allocations it touches (direction, bounds, use after free). As the CUDA documentation has it,
// copies to and from pinned host memory are asynchronous: a download to pinned memory is
// poisoned until it lands, and TED_EMU_DELAY_US holds them back, so that a host read or write
// without a synchronisation sees or makes wrong data. To and from pageable memory, the host
// buffer is read before an upload returns, and a download to it returns once done.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "runtime_state.hpp"

// ---- copies and fills -------------------------------------------------------------------------
namespace ted_emu {
namespace {

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost:
      return "host to host";
    case cudaMemcpyHostToDevice:
      return "host to device";
    case cudaMemcpyDeviceToHost:
      return "device to host";
    case cudaMemcpyDeviceToDevice:
      return "device to device";
    default:
      return "default";
  }
}

// Checks a copy's pointers against its kind; the sides of dst and src on success.
cudaError_t check_copy(void* dst, std::size_t dst_extent, const void* src, std::size_t src_extent,
                       cudaMemcpyKind kind, Side* dst_side, Side* src_side) {
  *dst_side = side_of(dst, dst_extent, nullptr);
  *src_side = side_of(src, src_extent, nullptr);
  if (*dst_side == Side::bad || *src_side == Side::bad) {
    explain(std::string("a ") + kind_name(kind) + " copy runs past the end of its " +
            (*dst_side == Side::bad ? "destination" : "source") + " allocation");
    return cudaErrorInvalidValue;
  }
  const bool dst_dev = *dst_side == Side::device, src_dev = *src_side == Side::device;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      ok = dst_dev && !src_dev;
      break;
    case cudaMemcpyDeviceToHost:
      ok = src_dev && !dst_dev;
      break;
    case cudaMemcpyDeviceToDevice:
      ok = dst_dev && src_dev;
      break;
    case cudaMemcpyHostToHost:
      ok = !dst_dev && !src_dev;
      break;
    case cudaMemcpyDefault:
      break;
  }
  if (!ok) {
    explain(std::string("a copy marked ") + kind_name(kind) + " goes from " +
            (src_dev ? "device" : "host") + " to " + (dst_dev ? "device" : "host") + " memory");
    return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}

}  // namespace

}  // namespace ted_emu

using namespace ted_emu;

namespace {

// Queues a copy of `rows` rows; the host side's rules as in the file's comment.
cudaError_t queue_copy(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
                       std::size_t width, std::size_t rows, cudaMemcpyKind kind,
                       cudaStream_t handle) {
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t rc = device_error(stream->device())) return set_error(rc);
  if (!width || !rows) return cudaSuccess;
  if (!dst || !src || dst_pitch < width || src_pitch < width)
    return set_error(cudaErrorInvalidValue);
  Side dst_side, src_side;
  const std::size_t dst_extent = (rows - 1) * dst_pitch + width;
  const std::size_t src_extent = (rows - 1) * src_pitch + width;
  if (cudaError_t rc = check_copy(dst, dst_extent, src, src_extent, kind, &dst_side, &src_side))
    return set_error(rc);
  auto copy_rows = [=](const void* from) {
    for (std::size_t r = 0; r < rows; ++r)
      std::memmove(static_cast<char*>(dst) + r * dst_pitch,
                   static_cast<const char*>(from) + r * src_pitch, width);
  };
  // A copy the host could touch too early (to or from pinned memory) is held back.
  const bool host_visible = dst_side == Side::pinned || src_side == Side::pinned;
  if (src_side == Side::host) {
    // Pageable source: read now, so the caller may reuse it at once.
    auto snapshot = std::make_shared<std::vector<char>>(src_extent);
    std::memcpy(snapshot->data(), src, src_extent);
    stream->enqueue([copy_rows, snapshot] { copy_rows(snapshot->data()); }, host_visible);
  } else {
    if (dst_side == Side::pinned) std::memset(dst, 0xff, dst_extent);  // not there yet
    stream->enqueue([copy_rows, src] { copy_rows(src); }, host_visible);
  }
  // A download to pageable memory returns once it has arrived.
  if (dst_side == Side::host && src_side != Side::host) {
    stream->synchronize();
    return set_error(device_error(stream->device()));
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t rc = context()) return set_error(rc);
  if (cudaError_t rc = queue_copy(dst, bytes, src, bytes, bytes, 1, kind, nullptr)) return rc;
  return cudaDeviceSynchronize();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (cudaError_t rc = context()) return set_error(rc);
  return queue_copy(dst, bytes, src, bytes, bytes, 1, kind, stream);
}

cudaError_t cudaMemcpy2DAsync(void* dst, std::size_t dst_pitch, const void* src,
                              std::size_t src_pitch, std::size_t width, std::size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  if (cudaError_t rc = context()) return set_error(rc);
  return queue_copy(dst, dst_pitch, src, src_pitch, width, height, kind, stream);
}

cudaError_t cudaMemsetAsync(void* pointer, int value, std::size_t bytes, cudaStream_t handle) {
  if (cudaError_t rc = context()) return set_error(rc);
  Stream* stream = stream_of(handle);
  if (!stream) return set_error(cudaErrorInvalidResourceHandle);
  if (!bytes) return cudaSuccess;
  if (!device_range(pointer, bytes)) {
    explain("cudaMemsetAsync of " + std::to_string(bytes) +
            " bytes outside a live device allocation");
    return set_error(cudaErrorInvalidValue);
  }
  stream->enqueue([pointer, value, bytes] { std::memset(pointer, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  if (cudaError_t rc = cudaMemsetAsync(pointer, value, bytes, nullptr)) return rc;
  return cudaDeviceSynchronize();
}
