// Seeing what the streams do (issue 15): traces, counters and logs.
//
//   sluice::trace::start(path) / stop() / flush(), and the RAII trace::Session
//                               Chrome trace-event JSON (Perfetto, chrome://tracing)
//   sluice::counters(dev), sluice::counters(), sluice::set_counters_enabled(on)
//                               waits, events, bytes copied, caches, prefetcher
//   sluice::log::set_level(level), sluice::log::set_callback(fn)
//                               the library's log messages, to stderr or to `fn`
//
// All three are process-wide: one trace at a time, one log level and one log
// receiver per process. Every fallible call has a throwing form and a
// `std::nothrow` form returning sluice::Result<T>, as everywhere in the bindings.
#ifndef SLUICE_CPP_TRACE_HPP
#define SLUICE_CPP_TRACE_HPP

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/config.hpp"
#include "sluice/device.hpp"
#include "sluice/error.hpp"
#include "sluice/result.hpp"

namespace sluice {

// --- traces ------------------------------------------------------------------------

/// Traces: Chrome trace-event JSON that Perfetto (ui.perfetto.dev) and
/// chrome://tracing open, with one track per stream named after its label
/// (Stream::set_label), a span per op's enqueue, an arrow from each op to the op
/// whose wait the engine inserted for it, graph captures and launches, allocations,
/// prefetcher batches and log messages. One trace at a time per process;
/// `SLUICE_TRACE=path` starts one without code, `SLUICE_TRACE_DEVICE=1` adds device
/// spans (of every Nth op with `SLUICE_TRACE_SAMPLE=N`, read at start). The file is
/// a valid trace even if the process ends without stop() (it is closed at exit) or
/// crashes (a prefix that the viewers open).
namespace trace {

/// Starts writing a trace to `path` (created or truncated). Fails with
/// ErrorCode::null_argument for a null `path`, ErrorCode::invalid_argument for an
/// empty one or a file that cannot be created, and ErrorCode::invalid_state while
/// a trace is already being written.
inline Result<void> start(std::nothrow_t, const char* path) {
  return detail::check(sluice_trace_start(path));
}

/// start(std::nothrow, path.c_str()).
inline Result<void> start(std::nothrow_t, const std::string& path) {
  return start(std::nothrow, path.c_str());
}

/// Stops the trace: waits for pending device spans and closes the JSON array and
/// the file. Does nothing when no trace is being written (so twice is fine).
inline Result<void> stop(std::nothrow_t) { return detail::check(sluice_trace_stop()); }

/// Writes what the trace has buffered to its file now (it is also written every
/// 100 ms); the file is then a prefix of the trace that the viewers open. Does
/// nothing when no trace is being written.
inline Result<void> flush(std::nothrow_t) { return detail::check(sluice_trace_flush()); }

#if SLUICE_CPP_EXCEPTIONS
/// Starts writing a trace to `path`; throws sluice::Error on failure (see the
/// std::nothrow form for the codes).
inline void start(const char* path) { start(std::nothrow, path).value(); }
/// Starts writing a trace to `path`; throws sluice::Error on failure.
inline void start(const std::string& path) { start(std::nothrow, path).value(); }
/// Stops the trace (nothing when none is written); throws when finishing the file fails.
inline void stop() { stop(std::nothrow).value(); }
/// Writes the buffered trace to its file; throws when writing fails.
inline void flush() { flush(std::nothrow).value(); }
#endif

/// An RAII trace scope: starts a trace in its constructor and stops it in its
/// `noexcept` destructor (ignoring errors; call stop() first to see them).
/// Move-only; a moved-from or default-constructed Session is inactive and its
/// destructor does nothing.
///
/// Tracing is process-wide: a Session does not own "its" trace, it stops whatever
/// trace is being written when it ends. Do not stop the trace by other means
/// (trace::stop) while a Session is active, and do not nest Sessions (the inner
/// one fails to start with ErrorCode::invalid_state).
///
/// ```cpp
/// {
///   sluice::trace::Session tracing("pipeline.json");
///   run_pipeline();
/// }  // pipeline.json is a complete JSON array here
/// ```
class Session {
 public:
  /// An inactive scope: it traces nothing and its destructor does nothing.
  Session() noexcept = default;

  /// Starts a trace to `path` (see trace::start for the error codes). The returned
  /// scope stops it when it goes out of scope, unless stop() or release() ran first.
  static Result<Session> begin(std::nothrow_t, const char* path) {
    Result<void> r = trace::start(std::nothrow, path);
    if (!r) return r.error();
    return Session(Started{});
  }

  /// begin(std::nothrow, path.c_str()).
  static Result<Session> begin(std::nothrow_t, const std::string& path) {
    return begin(std::nothrow, path.c_str());
  }

#if SLUICE_CPP_EXCEPTIONS
  /// Starts a trace to `path`; throws sluice::Error when it cannot start (then no
  /// Session exists and nothing is stopped).
  explicit Session(const char* path) : Session(begin(std::nothrow, path).value()) {}
  /// Starts a trace to `path`; throws sluice::Error when it cannot start.
  explicit Session(const std::string& path) : Session(path.c_str()) {}

  /// Stops the trace now and throws when finishing the file fails. The scope is
  /// inactive afterwards either way; on an inactive scope it does nothing.
  void stop() { stop(std::nothrow).value(); }
#endif

  /// Takes over `other`'s trace; `other` becomes inactive.
  Session(Session&& other) noexcept : active_(std::exchange(other.active_, false)) {}

  /// Stops this scope's trace (if active), then takes over `other`'s.
  Session& operator=(Session&& other) noexcept {
    if (this != &other) {
      reset();
      active_ = std::exchange(other.active_, false);
    }
    return *this;
  }

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Stops the trace (ignoring errors) when the scope is active.
  ~Session() { reset(); }

  /// Stops the trace now and reports the C API's verdict. The scope is inactive
  /// afterwards, also on error; on an inactive scope it does nothing.
  Result<void> stop(std::nothrow_t) {
    if (!std::exchange(active_, false)) return {};
    return trace::stop(std::nothrow);
  }

  /// Writes what the trace has buffered to its file (trace::flush).
  Result<void> flush(std::nothrow_t) const { return trace::flush(std::nothrow); }

#if SLUICE_CPP_EXCEPTIONS
  /// Writes what the trace has buffered to its file; throws when writing fails.
  void flush() const { flush(std::nothrow).value(); }
#endif

  /// True between the start and stop() / release() / the move that emptied it.
  bool active() const noexcept { return active_; }
  /// active().
  explicit operator bool() const noexcept { return active_; }

  /// Gives up the scope without stopping the trace: it goes on until trace::stop
  /// or the process exits (which closes the file).
  void release() noexcept { active_ = false; }

 private:
  struct Started {};
  explicit Session(Started) noexcept : active_(true) {}

  void reset() noexcept {
    if (std::exchange(active_, false)) sluice_error_free(sluice_trace_stop());
  }

  bool active_ = false;
};

}  // namespace trace

// --- counters ----------------------------------------------------------------------

/// Counters of a device or of the process: waits inserted, deduplicated and
/// skipped; events recorded, created, recycled and pooled; bytes copied per
/// direction; device and pinned allocator hits, misses and trims; graph cache and
/// graph update counts; prefetcher waits; engine syncs. The fields the C header
/// marks "while counting" (waits_deduplicated, waits_skipped_same_stream and the
/// bytes_* fields) only count while set_counters_enabled(true), `SLUICE_COUNTERS=1`
/// or a trace is on; the others always count. Plain values, copied out.
using Counters = sluice_counters_t;

/// The counters of `device`: its streams, destroyed ones included, and its
/// pools. A default-constructed or moved-from (empty) view gives
/// ErrorCode::invalid_handle, never the process's counters: use counters(std::nothrow)
/// for those.
inline Result<Counters> counters(std::nothrow_t, DeviceRef device) {
  if (!device) {
    return Error(ErrorCode::invalid_handle, 0,
                 "sluice::counters: the device handle is empty (sluice::counters() gives "
                 "the counters of every device of the process)");
  }
  Counters c{};
  return detail::check(sluice_counters(device.raw(), &c), c);
}

/// The counters of every device opened in the process (destroyed streams
/// included), summed.
inline Result<Counters> counters(std::nothrow_t) {
  Counters c{};
  return detail::check(sluice_counters(sluice_device_t{}, &c), c);
}

/// Turns on or off, process-wide, the counters that cost work on every op (those
/// marked "while counting" in Counters). Off by default, on with
/// `SLUICE_COUNTERS=1`; a trace counts them while it is written either way.
inline Result<void> set_counters_enabled(std::nothrow_t, bool enabled) {
  return detail::check(sluice_counters_set_enabled(enabled));
}

#if SLUICE_CPP_EXCEPTIONS
/// The counters of `device`; throws sluice::Error (invalid_handle for an empty or
/// stale view).
inline Counters counters(DeviceRef device) { return counters(std::nothrow, device).value(); }
/// The counters of every device of the process.
inline Counters counters() { return counters(std::nothrow).value(); }
/// Turns the per-op counters on or off, process-wide.
inline void set_counters_enabled(bool enabled) {
  set_counters_enabled(std::nothrow, enabled).value();
}
#endif

// --- logs --------------------------------------------------------------------------

/// The library's log messages: off by default (the library stays silent unless
/// asked), or from `SLUICE_LOG=error|warn|info|debug`, read at the first message.
/// They go to stderr as "sluice [level] message", or to a callback.
///
/// Note: this namespace shares its name with ::log of <cmath>; code that says
/// `using namespace sluice;` should call std::log.
namespace log {

/// A log level (`SLUICE_LOG_*`). A level logs its messages and those of the
/// levels above it in this list.
enum class Level : std::uint32_t {
  off = SLUICE_LOG_OFF,      ///< nothing is logged (the default)
  error = SLUICE_LOG_ERROR,  ///< errors only (a trace that cannot be written)
  warn = SLUICE_LOG_WARN,    ///< and warnings (a capture aborted by an operation)
  info = SLUICE_LOG_INFO,    ///< and notable events (graph update fallbacks, cache trims, traces)
  debug = SLUICE_LOG_DEBUG,  ///< everything (stale handles, blocks the caches gave back)
};

/// A log receiver: the message's level and text (without a trailing newline;
/// valid during the call only).
using Callback = std::function<void(Level, std::string_view)>;

/// Sets the process-wide log level (overrides `SLUICE_LOG`). A value outside
/// Level gives ErrorCode::invalid_argument and changes nothing.
inline Result<void> set_level(std::nothrow_t, Level level) {
  return detail::check(sluice_log_set_level(static_cast<std::uint32_t>(level)));
}

#if SLUICE_CPP_EXCEPTIONS
/// Sets the process-wide log level; throws for a value outside Level.
inline void set_level(Level level) { set_level(std::nothrow, level).value(); }
#endif

}  // namespace log

namespace detail {

/// The heap home of the log callback the C API holds (its `user_data`).
struct LogSink {
  explicit LogSink(log::Callback f) : fn(std::move(f)) {}

  log::Callback fn;

  /// sluice_log_fn: calls the callable; an exception it throws is swallowed here
  /// (it must not unwind into the library).
  static void trampoline(std::uint32_t level, const char* message, void* user_data) noexcept {
    auto* sink = static_cast<LogSink*>(user_data);
    std::string_view text = message != nullptr ? std::string_view(message) : std::string_view();
#if SLUICE_CPP_EXCEPTIONS
    try {
      sink->fn(static_cast<log::Level>(level), text);
    } catch (...) {
    }
#else
    sink->fn(static_cast<log::Level>(level), text);
#endif
  }
};

/// Which LogSink these headers last installed, and the lock that keeps
/// installing one and retiring the one it replaced atomic. Never destroyed, so a
/// message logged during process exit still finds its callable.
struct LogState {
  std::mutex mutex;
  LogSink* current = nullptr;
};

inline LogState& log_state() noexcept {
  static LogState* const state = new LogState();
  return *state;
}

}  // namespace detail

namespace log {

/// Sends the library's messages to `fn` instead of stderr; an empty `fn` goes back
/// to stderr. The level is unchanged: set_level (or `SLUICE_LOG`) decides what is
/// logged, so set one too.
///
/// `fn` is moved to the heap. It is called on whichever thread logs (the caller's,
/// or one of the library's own: the trace writer, prefetcher producers), possibly
/// on several at once and while the library holds locks: it must be thread-safe
/// and must not call sluice (this function included: that deadlocks). An exception
/// it throws is swallowed.
///
/// Lifetime: sluice_log_set_callback replaces the receiver under the write side of
/// the lock that every message holds while it calls the receiver, so when it
/// returns no call of the previous receiver is in flight and none can start. The
/// previous callable is therefore destroyed inside this call, after the switch
/// (not while `fn` is being installed). The callable installed last is never
/// destroyed (a library thread may still log while the process exits): whatever
/// it refers to must outlive the last message, or be released by
/// set_callback({}) first. On failure `fn` is destroyed and the previous receiver
/// stays.
inline Result<void> set_callback(std::nothrow_t, Callback fn) {
  std::unique_ptr<detail::LogSink> next;
  if (fn) next.reset(new detail::LogSink(std::move(fn)));
  std::unique_ptr<detail::LogSink> retired;
  sluice_error_t* e = nullptr;
  {
    detail::LogState& st = detail::log_state();
    std::lock_guard<std::mutex> lock(st.mutex);
    e = next ? sluice_log_set_callback(&detail::LogSink::trampoline, next.get())
             : sluice_log_set_callback(nullptr, nullptr);
    if (e == nullptr) {
      retired.reset(st.current);
      st.current = next.release();
    }
  }
  // Callables are destroyed outside the lock: a destructor may call set_callback.
  return detail::check(e);
}

#if SLUICE_CPP_EXCEPTIONS
/// Sends the library's messages to `fn` (an empty one: back to stderr); throws
/// sluice::Error on failure. See the std::nothrow form for threads and lifetime.
inline void set_callback(Callback fn) { set_callback(std::nothrow, std::move(fn)).value(); }
#endif

}  // namespace log

}  // namespace sluice

#endif  // SLUICE_CPP_TRACE_HPP
