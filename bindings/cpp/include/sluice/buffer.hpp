// sluice::Buffer (owning) and sluice::BufferRef (non-owning view).
//
// A buffer is device memory, pinned host memory, registered host memory or
// foreign device memory (Buffer::wrap_device, DLPack in dlpack.hpp), with its own
// sync object. Copies are in copy.hpp.
#ifndef SLUICE_CPP_BUFFER_HPP
#define SLUICE_CPP_BUFFER_HPP

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <new>
#include <type_traits>
#include <utility>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/device.hpp"
#include "sluice/result.hpp"
#include "sluice/span.hpp"
#include "sluice/stream.hpp"
#include "sluice/sync.hpp"

namespace sluice {

/// What kind of memory a buffer is (`SLUICE_BUFFER_*`).
enum class BufferKind : std::uint32_t {
  device = SLUICE_BUFFER_DEVICE,          ///< stream-ordered device memory
  pinned = SLUICE_BUFFER_PINNED,          ///< pinned host memory from the device's pool
  registered = SLUICE_BUFFER_REGISTERED,  ///< caller-owned host memory, registered
  foreign = SLUICE_BUFFER_FOREIGN,        ///< device memory someone else owns (wrap_device, DLPack)
};

/// What a buffer is and where it lives.
struct BufferInfo {
  BufferKind kind = BufferKind::device;
  std::uint64_t size = 0;
  /// CUdeviceptr for device and foreign buffers; the host address otherwise. On the
  /// host backend all "device" memory is host memory: this address may be
  /// dereferenced there (after a host wait on the buffer's sync object).
  std::uint64_t device_ptr = 0;
  void* host_ptr = nullptr;  ///< host address for pinned/registered; nullptr for device/foreign
};

namespace detail {

/// The heap state of a wrap_device release callable. The C API calls `run`
/// exactly once when the wrap succeeded (never when it failed: then the caller
/// deletes the box); `run` calls the callable and deletes the box.
template <class F>
struct ReleaseBox {
  explicit ReleaseBox(F&& fn) : f(std::move(fn)) {}
  explicit ReleaseBox(const F& fn) : f(fn) {}

  F f;

  /// sluice_release_fn. An exception thrown by the callable is swallowed: the
  /// release runs on a library thread, or in a destructor.
  static void run(void* user_data) noexcept {
    auto* box = static_cast<ReleaseBox*>(user_data);
#if SLUICE_CPP_EXCEPTIONS
    try {
      box->f();
    } catch (...) {
    }
#else
    box->f();
#endif
    delete box;
  }
};

/// The operations of a buffer, shared by Buffer and BufferRef.
template <class Self>
class BufferApi {
 public:
  Result<BufferInfo> info(std::nothrow_t) const {
    sluice_buffer_info_t i{};
    if (sluice_error_t* e = sluice_buffer_info(h(), &i)) return Error::adopt(e);
    BufferInfo out;
    out.kind = static_cast<BufferKind>(i.kind);
    out.size = i.size;
    out.device_ptr = i.device_ptr;
    out.host_ptr = i.host_ptr;
    return out;
  }

  /// A new handle to the buffer's sync object, for Op scopes and host waits. The
  /// returned SyncObject owns that handle (not the buffer) and destroys it when it
  /// goes out of scope.
  Result<SyncObject> sync(std::nothrow_t) const {
    sluice_sync_t s{};
    if (sluice_error_t* e = sluice_buffer_sync(h(), &s)) return Error::adopt(e);
    return SyncObject::adopt(s);
  }

  /// The host bytes of a pinned or registered buffer; empty for device memory.
  /// Before writing them from the host after a copy read them, wait_write() on
  /// the buffer's sync object; before reading them after a copy wrote them,
  /// wait_read().
  Result<MutableByteView> host_bytes(std::nothrow_t) const {
    Result<BufferInfo> i = info(std::nothrow);
    if (!i) return i.error();
    return MutableByteView(static_cast<std::byte*>(i->host_ptr),
                           i->host_ptr ? static_cast<std::size_t>(i->size) : 0);
  }

#if SLUICE_CPP_EXCEPTIONS
  BufferInfo info() const { return info(std::nothrow).value(); }
  std::size_t size() const { return static_cast<std::size_t>(info().size); }
  BufferKind kind() const { return info().kind; }
  SyncObject sync() const { return sync(std::nothrow).value(); }
  MutableByteView host_bytes() const { return host_bytes(std::nothrow).value(); }
#endif

 private:
  sluice_buffer_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a buffer handle.
class BufferRef : public detail::BufferApi<BufferRef>, public detail::View<sluice_buffer_t> {
 public:
  using View::View;
};

/// A buffer handle (freed by the destructor: device memory is released in stream
/// order after every outstanding use, pinned memory returns to the pool, and
/// registered memory is unregistered once no copy uses it). Move-only.
class Buffer : public detail::BufferApi<Buffer>,
               public detail::Owner<Buffer, sluice_buffer_t, sluice_buffer_free, BufferRef> {
 public:
  /// `size` bytes of device memory, allocated in order on `stream`. The returned
  /// Buffer owns the handle and frees it when it goes out of scope.
  static Result<Buffer> alloc(std::nothrow_t, StreamRef stream, std::size_t size) {
    sluice_buffer_t b{};
    if (sluice_error_t* e = sluice_buffer_alloc(stream.raw(), size, &b)) return Error::adopt(e);
    return adopt(b);
  }

  /// `size` bytes of pinned host memory from the device's caching pool. The
  /// returned Buffer owns the handle and returns the memory to the pool when it
  /// goes out of scope.
  static Result<Buffer> alloc_pinned(std::nothrow_t, DeviceRef device, std::size_t size) {
    sluice_buffer_t b{};
    if (sluice_error_t* e = sluice_buffer_alloc_pinned(device.raw(), size, &b)) {
      return Error::adopt(e);
    }
    return adopt(b);
  }

  /// Registers caller-owned host memory `[ptr, ptr + len)`. The memory stays the
  /// caller's: keep it alive until the returned Buffer, which owns only the
  /// registration, is destroyed (which waits for copies still using it).
  static Result<Buffer> register_host(std::nothrow_t, DeviceRef device, void* ptr,
                                      std::size_t len) {
    sluice_buffer_t b{};
    if (sluice_error_t* e = sluice_buffer_register_host(device.raw(), ptr, len, &b)) {
      return Error::adopt(e);
    }
    return adopt(b);
  }

  /// Registers the storage of a contiguous container of trivially copyable
  /// elements (std::vector, std::array, a span); it must not reallocate meanwhile.
  /// The container stays the caller's, as for register_host(ptr, len).
  template <class C, class = detail::if_mutable_contiguous<C>>
  static Result<Buffer> register_host(std::nothrow_t, DeviceRef device, C& container) {
    return register_host(std::nothrow, device, static_cast<void*>(std::data(container)),
                         std::size(container) * sizeof(*std::data(container)));
  }

  /// Wraps device memory that someone else allocated and owns,
  /// `[device_ptr, device_ptr + len)` (for example a libtorch tensor's storage), as
  /// a buffer (BufferKind::foreign) with its own sync object.
  ///
  /// `release` (a callable taking no arguments; its result is ignored) is moved to
  /// the heap and called exactly once, after the returned Buffer is destroyed (and
  /// every graph that captured it) AND every use of the buffer that sluice ordered
  /// has completed on the device: on a library thread ("sluice-release") when work
  /// is still in flight, otherwise inside the call that dropped the last reference.
  /// An exception it throws is swallowed. When this call fails, `release` is
  /// destroyed without being called: the caller still owns the memory.
  ///
  /// On cuda the range must be memory of `device`'s context; on the host backend any
  /// non-zero address is taken (host-backend "device" memory is host memory).
  template <class F, class = typename std::enable_if<
                         !std::is_same<typename std::decay<F>::type, std::nullptr_t>::value>::type>
  static Result<Buffer> wrap_device(std::nothrow_t, DeviceRef device, std::uint64_t device_ptr,
                                    std::size_t len, F&& release) {
    using Box = detail::ReleaseBox<typename std::decay<F>::type>;
    auto* box = new Box(std::forward<F>(release));
    sluice_buffer_t b{};
    if (sluice_error_t* e =
            sluice_buffer_wrap_device(device.raw(), device_ptr, len, &Box::run, box, &b)) {
      delete box;  // not called on error
      return Error::adopt(e);
    }
    return adopt(b);
  }

  /// wrap_device with no release function: the owner frees the memory itself, after
  /// the Buffer is destroyed and its last use has completed (a host wait on its
  /// sync object before destroying it, for example).
  static Result<Buffer> wrap_device(std::nothrow_t, DeviceRef device, std::uint64_t device_ptr,
                                    std::size_t len, std::nullptr_t = nullptr) {
    sluice_buffer_t b{};
    if (sluice_error_t* e =
            sluice_buffer_wrap_device(device.raw(), device_ptr, len, nullptr, nullptr, &b)) {
      return Error::adopt(e);
    }
    return adopt(b);
  }

#if SLUICE_CPP_EXCEPTIONS
  template <class F>
  static Buffer wrap_device(DeviceRef device, std::uint64_t device_ptr, std::size_t len,
                            F&& release) {
    return wrap_device(std::nothrow, device, device_ptr, len, std::forward<F>(release)).value();
  }
  static Buffer wrap_device(DeviceRef device, std::uint64_t device_ptr, std::size_t len) {
    return wrap_device(std::nothrow, device, device_ptr, len, nullptr).value();
  }
  static Buffer alloc(StreamRef stream, std::size_t size) {
    return alloc(std::nothrow, stream, size).value();
  }
  static Buffer alloc_pinned(DeviceRef device, std::size_t size) {
    return alloc_pinned(std::nothrow, device, size).value();
  }
  static Buffer register_host(DeviceRef device, void* ptr, std::size_t len) {
    return register_host(std::nothrow, device, ptr, len).value();
  }
  template <class C, class = detail::if_mutable_contiguous<C>>
  static Buffer register_host(DeviceRef device, C& container) {
    return register_host(std::nothrow, device, container).value();
  }
#endif
};

}  // namespace sluice

#endif  // SLUICE_CPP_BUFFER_HPP
