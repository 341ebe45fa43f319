// sluice::Stream (owning) and sluice::StreamRef (non-owning view).
//
// Every operation names its stream. There is no current stream: pass StreamRef
// (a Stream converts to one implicitly) to whatever needs a stream.
#ifndef SLUICE_CPP_STREAM_HPP
#define SLUICE_CPP_STREAM_HPP

#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/device.hpp"
#include "sluice/event.hpp"
#include "sluice/result.hpp"
#include "sluice/sync.hpp"

namespace sluice {

/// Stream creation flags (`SLUICE_STREAM_*`).
enum class StreamFlags : std::uint32_t {
  none = 0,
  non_blocking = SLUICE_STREAM_NON_BLOCKING,  ///< no sync with the legacy default stream
};

constexpr StreamFlags operator|(StreamFlags a, StreamFlags b) noexcept {
  return static_cast<StreamFlags>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}

/// Counters of a stream.
using StreamStats = sluice_stream_stats_t;

/// What a host callback returns when the callable threw (the exception itself is
/// swallowed on the driver thread; the stream reports CALLBACK_FAILED at its next
/// synchronisation, with this value in the message).
constexpr std::int32_t kCallbackException = -1;

namespace detail {

/// The heap state of one C++ host callback: the callable, moved to the heap. The
/// C API owns it from the enqueue on and hands it back exactly once, through
/// `free_user_data` (CallbackBox::destroy), when the callback can no longer run:
/// after it ran, when the enqueue fails, or, for a callback captured into a graph,
/// when the last graph holding it is destroyed. A captured callback runs once per
/// launch, so `trampoline` may run many times on one box.
template <class F>
struct CallbackBox {
  explicit CallbackBox(F&& fn) : f(std::move(fn)) {}
  explicit CallbackBox(const F& fn) : f(fn) {}

  F f;

  static std::int32_t call(F& fn) {
    using R = decltype(fn());
    static_assert(!std::is_same<R, bool>::value,
                  "a host callback returns void or an int code (0 = success), not bool");
    if constexpr (std::is_void<R>::value) {
      fn();
      return 0;
    } else {
      static_assert(std::is_integral<R>::value || std::is_enum<R>::value,
                    "a host callback returns void or an int code (0 = success)");
      return static_cast<std::int32_t>(fn());
    }
  }

  /// sluice_host_fn: runs the callable; an exception becomes kCallbackException.
  static std::int32_t trampoline(void* user_data) noexcept {
    auto* box = static_cast<CallbackBox*>(user_data);
#if SLUICE_CPP_EXCEPTIONS
    try {
      return call(box->f);
    } catch (...) {
      return kCallbackException;
    }
#else
    return call(box->f);
#endif
  }

  /// sluice_free_fn: destroys the box (and the callable) once the C API is done.
  static void destroy(void* user_data) noexcept { delete static_cast<CallbackBox*>(user_data); }
};

/// The operations of a stream, shared by Stream and StreamRef.
template <class Self>
class StreamApi {
 public:
  /// Blocks until all work enqueued so far has completed. Reports a device fault
  /// or a failed host callback of this stream.
  Result<void> synchronize(std::nothrow_t) const { return check(sluice_stream_synchronize(h())); }

  /// True when all work enqueued so far has completed.
  Result<bool> query(std::nothrow_t) const {
    bool idle = false;
    return detail::check(sluice_stream_query(h(), &idle), idle);
  }

  /// The underlying CUstream (an opaque pointer on host), for foreign work such as
  /// libtorch ops. Valid while the stream handle lives.
  Result<void*> native_handle(std::nothrow_t) const {
    void* raw = nullptr;
    return detail::check(sluice_stream_raw(h(), &raw), raw);
  }

  /// Sets the label fault reports name as the last operation; nullptr clears it.
  Result<void> set_label(std::nothrow_t, const char* label) const {
    return check(sluice_stream_set_label(h(), label));
  }

  Result<StreamStats> stats(std::nothrow_t) const {
    StreamStats s{};
    return detail::check(sluice_stream_stats(h(), &s), s);
  }

  /// Records an event at the current end of the stream. The returned Event owns
  /// the recording and destroys it when it goes out of scope.
  Result<Event> record_event(std::nothrow_t, EventFlags flags = EventFlags::none) const {
    sluice_event_t ev{};
    if (sluice_error_t* e = sluice_event_record(h(), static_cast<std::uint32_t>(flags), &ev)) {
      return Error::adopt(e);
    }
    return Event::adopt(ev);
  }

  /// Makes this stream wait on `event` on the device; the host does not block. An
  /// event of an ended capture, or of another capture than this stream's, is refused
  /// (`SLUICE_ERROR_INVALID_STATE`).
  Result<void> wait(std::nothrow_t, EventRef event) const {
    return check(sluice_stream_wait_event(h(), event.raw()));
  }

  /// True while the stream captures a graph (as the origin of a capture or as a
  /// stream that joined one by waiting on a captured event). See graph.hpp.
  Result<bool> is_capturing(std::nothrow_t) const {
    bool capturing = false;
    return detail::check(sluice_stream_is_capturing(h(), &capturing), capturing);
  }

  /// Bounds the stream's cache of freed device blocks (default 64 MiB, at most 16
  /// blocks) and returns what is cached beyond the bound to the driver's pool. A
  /// device buffer freed with this stream as its home is kept for reuse by an
  /// allocation of exactly the same size on this stream; 0 disables the cache.
  Result<void> set_block_cache_limit(std::nothrow_t, std::uint64_t bytes) const {
    return check(sluice_stream_set_block_cache_limit(h(), bytes));
  }

  /// Enqueues `fn()` as one tracked op that reads `reads` and writes `writes`.
  /// `fn` returns void or an int code (0 = success; non-zero makes the next
  /// synchronisation of this stream report CALLBACK_FAILED). An exception thrown by
  /// `fn` counts as kCallbackException. `fn` runs on a driver thread and must not
  /// call sluice or CUDA.
  ///
  /// `fn` is moved (or copied) to the heap and handed to the C API, which destroys
  /// it exactly once when the callback can no longer run: after it ran, when this
  /// call fails (then it never runs), or, when the stream is capturing a graph,
  /// once the last Graph / GraphExec holding the captured callback is destroyed.
  /// A captured callback runs once per launch of its graph, so `fn` must be
  /// invocable repeatedly (and, if one executable graph is launched on several
  /// streams at once, concurrently); everything it refers to must outlive the
  /// graphs that hold it.
  template <class F>
  Result<void> host_callback(std::nothrow_t, F&& fn, SyncList reads = {},
                             SyncList writes = {}) const {
    using Box = CallbackBox<typename std::decay<F>::type>;
    auto* box = new Box(std::forward<F>(fn));
    // From here on the C API owns `box`: it calls Box::destroy exactly once, on
    // success and on failure alike.
    return check(sluice_stream_launch_host_func(h(), &Box::trampoline, box, &Box::destroy,
                                             reads.data(), reads.size(), writes.data(),
                                             writes.size()));
  }

#if SLUICE_CPP_EXCEPTIONS
  void synchronize() const { synchronize(std::nothrow).value(); }
  bool query() const { return query(std::nothrow).value(); }
  void* native_handle() const { return native_handle(std::nothrow).value(); }
  void set_label(const char* label) const { set_label(std::nothrow, label).value(); }
  StreamStats stats() const { return stats(std::nothrow).value(); }
  Event record_event(EventFlags flags = EventFlags::none) const {
    return record_event(std::nothrow, flags).value();
  }
  void wait(EventRef event) const { wait(std::nothrow, event).value(); }
  bool is_capturing() const { return is_capturing(std::nothrow).value(); }
  void set_block_cache_limit(std::uint64_t bytes) const {
    set_block_cache_limit(std::nothrow, bytes).value();
  }
  template <class F>
  void host_callback(F&& fn, SyncList reads = {}, SyncList writes = {}) const {
    host_callback(std::nothrow, std::forward<F>(fn), std::move(reads), std::move(writes)).value();
  }
#endif

 private:
  sluice_stream_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a stream handle: for passing streams around and for
/// handles owned elsewhere (for example by C code). Trivially copyable; it does
/// not keep the stream alive.
class StreamRef : public detail::StreamApi<StreamRef>, public detail::View<sluice_stream_t> {
 public:
  using View::View;

  friend bool operator==(StreamRef a, StreamRef b) noexcept { return a.raw().bits == b.raw().bits; }
  friend bool operator!=(StreamRef a, StreamRef b) noexcept { return !(a == b); }
};

/// A stream handle (destroyed by the destructor: work already enqueued completes
/// and the memory it uses stays valid). Move-only.
/// Thread safety: may be used from any thread at once.
class Stream : public detail::StreamApi<Stream>,
               public detail::Owner<Stream, sluice_stream_t, sluice_stream_destroy, StreamRef> {
 public:
  /// Creates a stream on `device`; `priority` is clamped into the device's range.
  /// The returned Stream owns the handle and destroys it when it goes out of scope.
  static Result<Stream> create(std::nothrow_t, DeviceRef device,
                               StreamFlags flags = StreamFlags::none, int priority = 0) {
    sluice_stream_t h{};
    if (sluice_error_t* e = sluice_stream_create(device.raw(), static_cast<std::uint32_t>(flags),
                                                 priority, &h)) {
      return Error::adopt(e);
    }
    return adopt(h);
  }

  /// Adopts a foreign CUstream (for example libtorch's) without owning it: the
  /// returned Stream owns only the sluice handle, and destroying it leaves the
  /// foreign stream alone. The legacy and per-thread default streams are refused.
  /// On host, `native` must be `native_handle()` of a live host stream.
  static Result<Stream> wrap_external(std::nothrow_t, DeviceRef device, void* native) {
    sluice_stream_t h{};
    if (sluice_error_t* e = sluice_stream_wrap_external(device.raw(), native, &h)) {
      return Error::adopt(e);
    }
    return adopt(h);
  }

#if SLUICE_CPP_EXCEPTIONS
  static Stream create(DeviceRef device, StreamFlags flags = StreamFlags::none, int priority = 0) {
    return create(std::nothrow, device, flags, priority).value();
  }
  static Stream wrap_external(DeviceRef device, void* native) {
    return wrap_external(std::nothrow, device, native).value();
  }
#endif
};

}  // namespace sluice

#endif  // SLUICE_CPP_STREAM_HPP
