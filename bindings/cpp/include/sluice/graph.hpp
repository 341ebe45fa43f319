// Graph capture and replay: sluice::Capture, Graph, GraphExec and GraphCache.
//
// Capture records the ops issued on a stream into a graph instead of running
// them; an executable graph made from it replays them with one launch:
//
//   sluice::Graph g;
//   {
//     sluice::Capture cap(stream);           // sluice_graph_capture_begin
//     sluice::copy(stream, dst, 0, src, 0, n);
//     stream.host_callback([&] { ++steps; }, {}, {dst_sync});
//     g = cap.end();                          // sluice_graph_capture_end
//   }                                         // (an unended capture is discarded)
//   sluice::GraphExec exec = g.instantiate();
//   for (int i = 0; i < 3; ++i) exec.launch(stream);   // the callback runs 3 times
//
// Other streams join a capture by waiting on an event recorded on a capturing
// stream (fork) and must be joined back (the origin waits on an event of theirs,
// or runs an op that conflicts with their last op) before the capture ends. While a stream captures, host synchronisation and
// queries, allocation, pageable copies and event queries fail with
// ErrorCode::capture_unsupported, and the capture then ends with
// ErrorCode::capture_failed.
//
// A graph does not keep the buffers it uses alive: keep them alive while any
// Graph or GraphExec using them exists. A host callback captured into a graph is
// held by the graph (and by every executable graph made from it) and destroyed
// when the last of them is destroyed; it runs once per launch. A captured
// callback that fails during a replay is reported (CALLBACK_FAILED) by the next
// synchronisation of the stream it was captured on, not of the stream the graph
// was launched on.
//
// GraphCache runs a region eagerly once, captures it the second time and replays
// it after that, per caller key:
//
//   sluice::GraphCache cache = sluice::GraphCache::create(dev);
//   for (int step = 0; step < n; ++step)
//     cache.run(/*key=*/1, stream, [&](sluice::StreamRef s) { issue_ops(s); });
#ifndef SLUICE_CPP_GRAPH_HPP
#define SLUICE_CPP_GRAPH_HPP

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "sluice/config.hpp"
#include "sluice/detail/handle.hpp"
#include "sluice/device.hpp"
#include "sluice/error.hpp"
#include "sluice/result.hpp"
#include "sluice/stream.hpp"

namespace sluice {

/// How a capture interacts with other threads (`SLUICE_CAPTURE_*`).
enum class CaptureMode : std::uint32_t {
  /// The default: ties nothing to the capturing thread, so it is safe when the
  /// capturing code moves between OS threads.
  relaxed = SLUICE_CAPTURE_RELAXED,
  /// CUDA's CU_STREAM_CAPTURE_MODE_THREAD_LOCAL (`thread_local` is a keyword).
  thread_local_ = SLUICE_CAPTURE_THREAD_LOCAL,
  /// CUDA's CU_STREAM_CAPTURE_MODE_GLOBAL: while it lasts, unsafe calls (a
  /// synchronize, an allocation) fail on every thread and may invalidate it.
  global = SLUICE_CAPTURE_GLOBAL,
};

/// How GraphExec::update applied a graph.
struct GraphUpdateInfo {
  /// True when the executable graph was updated in place; false when the update
  /// was refused (topology or node kinds changed) and it was re-instantiated.
  bool in_place = true;
  /// Why the in-place update was refused; empty when in place.
  std::string reason;
};

/// Counters of a graph cache: eager, captured, replayed runs and keys.
using GraphCacheStats = sluice_graph_cache_stats_t;

class Graph;
class GraphExec;

namespace detail {

/// Ends the capture open on `stream` and discards its graph: how a Capture scope
/// "destroys" the stream handle it holds (the stream itself is not owned).
inline sluice_error_t* discard_capture(sluice_stream_t stream) noexcept {
  sluice_graph_t g{};
  sluice_error_t* e = sluice_graph_capture_end(stream, &g);
  if (e == nullptr) sluice_error_free(sluice_graph_destroy(g));
  return e;
}

/// The operations of a graph, shared by Graph and GraphRef.
template <class Self>
class GraphApi {
 public:
  /// The number of operation nodes in the graph.
  Result<std::size_t> node_count(std::nothrow_t) const {
    std::size_t n = 0;
    return detail::check(sluice_graph_node_count(h(), &n), n);
  }

  /// Writes a Graphviz DOT description of the graph to `path`.
  Result<void> debug_dot(std::nothrow_t, const char* path, bool verbose = false) const {
    return check(sluice_graph_debug_dot(h(), path, verbose));
  }
  Result<void> debug_dot(std::nothrow_t, const std::string& path, bool verbose = false) const {
    return debug_dot(std::nothrow, path.c_str(), verbose);
  }

  /// Instantiates the graph into an executable graph (which stays valid after the
  /// Graph is destroyed). With SLUICE_GRAPH_DOT_DIR set, also writes a DOT file there.
  /// The returned GraphExec owns the new handle and destroys it when it goes out of
  /// scope.
  Result<GraphExec> instantiate(std::nothrow_t) const;  // defined below GraphExec

#if SLUICE_CPP_EXCEPTIONS
  std::size_t node_count() const { return node_count(std::nothrow).value(); }
  void debug_dot(const char* path, bool verbose = false) const {
    debug_dot(std::nothrow, path, verbose).value();
  }
  void debug_dot(const std::string& path, bool verbose = false) const {
    debug_dot(std::nothrow, path, verbose).value();
  }
  GraphExec instantiate() const;
#endif

 private:
  sluice_graph_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a graph handle.
class GraphRef : public detail::GraphApi<GraphRef>, public detail::View<sluice_graph_t> {
 public:
  using View::View;
};

/// A captured graph (destroyed by the destructor; executable graphs made from it
/// stay valid). Made by Capture::end() or end_capture(), or by adopt() from a C
/// handle. Move-only.
class Graph : public detail::GraphApi<Graph>,
              public detail::Owner<Graph, sluice_graph_t, sluice_graph_destroy, GraphRef> {};

namespace detail {

/// The operations of an executable graph, shared by GraphExec and GraphExecRef.
template <class Self>
class GraphExecApi {
 public:
  /// Uploads the graph's resources ahead of its first launch (a no-op on host).
  Result<void> upload(std::nothrow_t, StreamRef stream) const {
    return check(sluice_graph_exec_upload(h(), stream.raw()));
  }

  /// Launches the graph on `stream` (any stream of its device) as one tracked op:
  /// it waits for the earlier users of every buffer the graph touches and records
  /// one event after.
  Result<void> launch(std::nothrow_t, StreamRef stream) const {
    return check(sluice_graph_exec_launch(h(), stream.raw()));
  }

  /// Applies `graph` in place (same topology, new pointers or parameters); when
  /// that is refused, re-instantiates from `graph` instead. Says which happened.
  Result<GraphUpdateInfo> update(std::nothrow_t, GraphRef graph) const {
    sluice_graph_update_info_t info{};
    if (sluice_error_t* e = sluice_graph_exec_update(h(), graph.raw(), &info)) {
      return Error::adopt(e);
    }
    GraphUpdateInfo out;
    out.in_place = info.result == SLUICE_GRAPH_UPDATE_IN_PLACE;
    std::size_t len = 0;  // NUL-terminated by contract; never read past the array
    while (len < sizeof(info.reason) && info.reason[len] != '\0') ++len;
    out.reason.assign(info.reason, len);
    return out;
  }

#if SLUICE_CPP_EXCEPTIONS
  void upload(StreamRef stream) const { upload(std::nothrow, stream).value(); }
  void launch(StreamRef stream) const { launch(std::nothrow, stream).value(); }
  GraphUpdateInfo update(GraphRef graph) const { return update(std::nothrow, graph).value(); }
#endif

 private:
  sluice_graph_exec_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of an executable graph handle.
class GraphExecRef : public detail::GraphExecApi<GraphExecRef>,
                     public detail::View<sluice_graph_exec_t> {
 public:
  using View::View;
};

/// An executable graph, launchable on any stream of its device (destroyed by the
/// destructor; launches already enqueued complete). Made by Graph::instantiate(),
/// or by adopt() from a C handle. Move-only.
class GraphExec : public detail::GraphExecApi<GraphExec>,
                  public detail::Owner<GraphExec, sluice_graph_exec_t, sluice_graph_exec_destroy,
                                       GraphExecRef> {};

namespace detail {

template <class Self>
Result<GraphExec> GraphApi<Self>::instantiate(std::nothrow_t) const {
  sluice_graph_exec_t x{};
  if (sluice_error_t* e = sluice_graph_instantiate(h(), &x)) return Error::adopt(e);
  return GraphExec::adopt(x);
}

#if SLUICE_CPP_EXCEPTIONS
template <class Self>
GraphExec GraphApi<Self>::instantiate() const {
  return instantiate(std::nothrow).value();
}
#endif

}  // namespace detail

// --- capture ---------------------------------------------------------------------

/// Begins capturing `stream`: its ops (and those of streams that fork from it) are
/// recorded into a graph instead of running. Nothing owns the open capture: the
/// caller must end it with end_capture(). Prefer the Capture scope, which ends
/// (and discards) the capture if the code in between leaves early.
inline Result<void> begin_capture(std::nothrow_t, StreamRef stream,
                                  CaptureMode mode = CaptureMode::relaxed) {
  return detail::check(
      sluice_graph_capture_begin(stream.raw(), static_cast<std::uint32_t>(mode)));
}

/// Ends the capture begun on `stream` and returns its graph. On failure (an
/// unjoined fork, a rejected operation) the capture is still ended, the sync
/// objects are rolled back and the streams are usable again. The returned Graph
/// owns the new handle and destroys it when it goes out of scope.
inline Result<Graph> end_capture(std::nothrow_t, StreamRef stream) {
  sluice_graph_t g{};
  if (sluice_error_t* e = sluice_graph_capture_end(stream.raw(), &g)) return Error::adopt(e);
  return Graph::adopt(g);
}

#if SLUICE_CPP_EXCEPTIONS
inline void begin_capture(StreamRef stream, CaptureMode mode = CaptureMode::relaxed) {
  begin_capture(std::nothrow, stream, mode).value();
}
inline Graph end_capture(StreamRef stream) { return end_capture(std::nothrow, stream).value(); }
#endif

/// An RAII capture scope: begins capturing a stream on construction; end() ends
/// it and returns the Graph. If the scope is left without end() (an early return,
/// an exception), the destructor ends the capture and discards the graph, so the
/// stream never stays in capture mode. Move-only.
///
/// The Capture does not own the stream: keep the stream alive while the capture is
/// open, and do not end that capture by other means (end_capture) while a Capture
/// still holds it.
class Capture {
 public:
  Capture() noexcept = default;

  /// Begins capturing `stream` with `mode`. The returned scope owns the open
  /// capture (not the stream) and discards it when it goes out of scope, unless
  /// end() or release() ran first.
  static Result<Capture> begin(std::nothrow_t, StreamRef stream,
                               CaptureMode mode = CaptureMode::relaxed) {
    Result<void> r = begin_capture(std::nothrow, stream, mode);
    if (!r) return r.error();
    return Capture(stream.raw());
  }

#if SLUICE_CPP_EXCEPTIONS
  /// Begins capturing `stream`; throws sluice::Error when it cannot begin. The
  /// scope owns the open capture (not the stream), as for begin().
  explicit Capture(StreamRef stream, CaptureMode mode = CaptureMode::relaxed)
      : Capture(begin(std::nothrow, stream, mode).value()) {}

  /// Ends the capture and returns the graph; throws on failure. The capture is
  /// ended (and this scope inactive) either way.
  Graph end() { return end(std::nothrow).value(); }
#endif

  /// Ends the capture and returns the graph, which the returned Graph owns. The
  /// capture is ended (and this scope inactive) also on error; a second end()
  /// reports ErrorCode::invalid_handle.
  Result<Graph> end(std::nothrow_t) {
    // On an inactive scope this asks the C API with the zero handle, so the error
    // is its own ("stream handle is null (0)").
    return end_capture(std::nothrow, StreamRef(h_.release()));
  }

  /// True between begin and end.
  bool active() const noexcept { return !h_.empty(); }
  explicit operator bool() const noexcept { return active(); }

  /// The capturing stream; an empty view once the capture has ended or was moved from.
  StreamRef stream() const noexcept { return StreamRef(h_.get()); }

  /// Gives up the scope without ending the capture and returns the stream handle:
  /// the caller must end the capture (end_capture / sluice_graph_capture_end).
  sluice_stream_t release() noexcept { return h_.release(); }

 private:
  explicit Capture(sluice_stream_t stream) noexcept : h_(stream) {}

  detail::UniqueHandle<sluice_stream_t, detail::discard_capture> h_;
};

// --- graph cache -------------------------------------------------------------------

namespace detail {

/// The C body of GraphCache::run: calls the C++ callable with the stream and maps
/// its outcome to the C contract (0 = success). It runs synchronously inside
/// sluice_graph_cache_run, so it lives on the caller's stack.
template <class F>
struct GraphBody {
  explicit GraphBody(F& f) noexcept : fn(f) {}

  F& fn;
#if SLUICE_CPP_EXCEPTIONS
  std::exception_ptr thrown;  ///< what the callable threw
#endif
  std::optional<Error> failed;  ///< the error a Result-returning callable gave

  std::int32_t invoke(StreamRef stream) {
    using R = decltype(fn(stream));
    static_assert(!std::is_same<R, bool>::value,
                  "a graph cache body returns void, an int code (0 = success) or "
                  "sluice::Result<void>, not bool");
    if constexpr (std::is_void<R>::value) {
      fn(stream);
      return 0;
    } else if constexpr (std::is_same<typename std::decay<R>::type, Result<void>>::value) {
      Result<void> r = fn(stream);
      if (r) return 0;
      failed.emplace(r.error());
      return kCallbackException;
    } else {
      static_assert(std::is_integral<R>::value || std::is_enum<R>::value,
                    "a graph cache body returns void, an int code (0 = success) or "
                    "sluice::Result<void>");
      return static_cast<std::int32_t>(fn(stream));
    }
  }

  /// sluice_graph_body_fn.
  static std::int32_t trampoline(void* user_data, sluice_stream_t stream) noexcept {
    auto* self = static_cast<GraphBody*>(user_data);
#if SLUICE_CPP_EXCEPTIONS
    try {
      return self->invoke(StreamRef(stream));
    } catch (...) {
      self->thrown = std::current_exception();
      return kCallbackException;
    }
#else
    return self->invoke(StreamRef(stream));
#endif
  }

  /// The C error of a failed run, with what the body threw or returned appended.
  Error explain(sluice_error_t* e) const {
    Error err = Error::adopt(e);
    if (err.code() != ErrorCode::callback_failed) return err;
    std::string why;
    if (failed) {
      why = std::string("the body returned ") + failed->code_name() + ": " + failed->what();
    }
#if SLUICE_CPP_EXCEPTIONS
    if (thrown) {
      try {
        std::rethrow_exception(thrown);
      } catch (const Error& x) {
        why = std::string("the body threw sluice::Error ") + x.code_name() + ": " + x.what();
      } catch (const std::exception& x) {
        why = std::string("the body threw: ") + x.what();
      } catch (...) {
        why = "the body threw a non-std::exception";
      }
    }
#endif
    if (why.empty()) return err;
    return Error(err.code(), err.driver_code(), std::string(err.what()) + " (" + why + ")");
  }
};

/// The operations of a graph cache, shared by GraphCache and GraphCacheRef.
template <class Self>
class GraphCacheApi {
 public:
  /// Runs the region `key` on `stream`: the first run calls `body(stream)` eagerly,
  /// the second captures it into a graph, instantiates and launches it, and later
  /// runs replay that graph without calling `body`. With graphs disabled
  /// (set_graphs_enabled(false) or SLUICE_GRAPHS=0) every run is eager.
  ///
  /// `body` is called synchronously, on this thread, with a StreamRef to `stream`,
  /// and issues sluice ops on it. It returns void, an int code (0 = success) or
  /// sluice::Result<void>. A non-zero code, a failed Result or a thrown exception
  /// (caught here; it never crosses the C API) fails the run with
  /// ErrorCode::callback_failed, whose message then says what the body threw or
  /// returned; a capture in progress is ended and discarded. A replay must be valid
  /// for every later run of the key: the buffers and host-callback state the body
  /// used must stay alive as long as the cache.
  template <class F>
  Result<void> run(std::nothrow_t, std::uint64_t key, StreamRef stream, F&& body) const {
    using Fn = typename std::remove_reference<F>::type;
    static_assert(std::is_invocable<Fn&, StreamRef>::value,
                  "a graph cache body is callable as body(sluice::StreamRef)");
    GraphBody<Fn> b(body);
    if (sluice_error_t* e =
            sluice_graph_cache_run(h(), key, stream.raw(), &GraphBody<Fn>::trampoline, &b)) {
      return b.explain(e);
    }
    return {};
  }

  /// The cache's counters.
  Result<GraphCacheStats> stats(std::nothrow_t) const {
    GraphCacheStats s{};
    return detail::check(sluice_graph_cache_stats(h(), &s), s);
  }

  /// Whether the cache holds an entry for `key` (warmed up or captured, not evicted).
  Result<bool> contains(std::nothrow_t, std::uint64_t key) const {
    bool has = false;
    return detail::check(sluice_graph_cache_contains(h(), key, &has), has);
  }

  /// Keeps at most `max_entries` keys (0: no limit), evicting the least recently
  /// used ones beyond that. A new cache holds SLUICE_GRAPH_CACHE_MAX keys, else 1024.
  Result<void> set_max_entries(std::nothrow_t, std::size_t max_entries) const {
    return detail::check(sluice_graph_cache_set_max_entries(h(), max_entries));
  }

#if SLUICE_CPP_EXCEPTIONS
  template <class F>
  void run(std::uint64_t key, StreamRef stream, F&& body) const {
    run(std::nothrow, key, stream, std::forward<F>(body)).value();
  }
  GraphCacheStats stats() const { return stats(std::nothrow).value(); }
  bool contains(std::uint64_t key) const { return contains(std::nothrow, key).value(); }

  void set_max_entries(std::size_t max_entries) const {
    set_max_entries(std::nothrow, max_entries).value();
  }
#endif

 private:
  sluice_graph_cache_t h() const noexcept { return static_cast<const Self&>(*this).raw(); }
};

}  // namespace detail

/// A non-owning view of a graph cache handle.
class GraphCacheRef : public detail::GraphCacheApi<GraphCacheRef>,
                      public detail::View<sluice_graph_cache_t> {
 public:
  using View::View;
};

/// A graph cache: per caller key, eager once, then captured, then replayed
/// (destroyed by the destructor, with its executable graphs). Move-only.
/// Thread safety: may be used from any thread at once.
class GraphCache : public detail::GraphCacheApi<GraphCache>,
                   public detail::Owner<GraphCache, sluice_graph_cache_t,
                                        sluice_graph_cache_destroy, GraphCacheRef> {
 public:
  /// A new, empty cache for `device`. The returned GraphCache owns the handle and
  /// destroys it (and its graphs) when it goes out of scope.
  static Result<GraphCache> create(std::nothrow_t, DeviceRef device) {
    sluice_graph_cache_t h{};
    if (sluice_error_t* e = sluice_graph_cache_create(device.raw(), &h)) return Error::adopt(e);
    return adopt(h);
  }

#if SLUICE_CPP_EXCEPTIONS
  static GraphCache create(DeviceRef device) { return create(std::nothrow, device).value(); }
#endif
};

/// Turns graph caches on or off process-wide: when off, every GraphCache::run is
/// eager (initially off when SLUICE_GRAPHS=0, else on). Explicit captures are
/// unaffected.
inline Result<void> set_graphs_enabled(std::nothrow_t, bool enabled) {
  return detail::check(sluice_graph_cache_set_enabled(enabled));
}

#if SLUICE_CPP_EXCEPTIONS
inline void set_graphs_enabled(bool enabled) { set_graphs_enabled(std::nothrow, enabled).value(); }
#endif

}  // namespace sluice

#endif  // SLUICE_CPP_GRAPH_HPP
