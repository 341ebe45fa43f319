// Graphs: Capture scopes, Graph / GraphExec, updates, the graph cache, and the
// lifetime of C++ host callbacks captured into graphs (host backend: "device"
// memory is host memory, and a captured host callback runs once per launch).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sluice_test.hpp"

using sluice::ErrorCode;

namespace {

/// How often a Tracked callable ran, and how often a live (not moved-from)
/// instance of it was destroyed.
struct Counters {
  std::atomic<int> calls{0};
  std::atomic<int> destroyed{0};
};

/// A move-only callable that counts its calls and the destruction of its one
/// owning instance (moved-from shells do not count), so "destroyed exactly once"
/// is checkable; ASan checks that the heap box is freed exactly once too.
template <class Body>
class Tracked {
 public:
  Tracked(Counters& c, Body body) : c_(&c), body_(std::move(body)) {}
  Tracked(Tracked&& o) noexcept : c_(o.c_), body_(std::move(o.body_)), owner_(o.owner_) {
    o.owner_ = false;
  }
  Tracked(const Tracked&) = delete;
  Tracked& operator=(const Tracked&) = delete;
  Tracked& operator=(Tracked&&) = delete;
  ~Tracked() {
    if (owner_) ++c_->destroyed;
  }

  void operator()() {
    ++c_->calls;
    body_();
  }

 private:
  Counters* c_;
  Body body_;
  bool owner_ = true;
};

template <class Body>
Tracked<Body> tracked(Counters& c, Body body) {
  return Tracked<Body>(c, std::move(body));
}

auto nothing() {
  return [] {};
}

/// Captures `n` host callbacks on `s`, the i-th storing `base + i` into `value`.
sluice::Graph capture_stores(sluice::StreamRef s, int n, std::atomic<int>& value, int base,
                             Counters& c) {
  sluice::Capture cap(s);
  for (int i = 0; i < n; ++i) s.host_callback(tracked(c, [&value, v = base + i] { value = v; }));
  return cap.end();
}

/// Restores graph caches to enabled, even when a check fails.
struct GraphsEnabledRestorer {
  ~GraphsEnabledRestorer() {
    if (!sluice::set_graphs_enabled(std::nothrow, true)) std::abort();
  }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string temp_path(const char* name) {
  return ::testing::TempDir() + "sluice-" + name + "-" + std::to_string(::getpid()) + ".dot";
}

}  // namespace

// --- capture, instantiate, launch ----------------------------------------------------

TEST_F(SluiceTest, CapturedCallbackRunsPerLaunchAndDiesWithTheLastGraph) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer pinned = sluice::Buffer::alloc_pinned(dev_, sizeof(std::uint64_t));
  sluice::Buffer dbuf = sluice::Buffer::alloc(s, sizeof(std::uint64_t));
  sluice::SyncObject pinned_sync = pinned.sync();
  auto* counter = reinterpret_cast<std::uint64_t*>(pinned.host_bytes().data());
  *counter = 0;
  Counters c;

  sluice::Graph g;
  {
    sluice::Capture cap(s);
    EXPECT_TRUE(cap.active());
    EXPECT_EQ(cap.stream(), s.ref());
    EXPECT_TRUE(s.is_capturing());
    // Host-visible memory written by the callback, then copied to device memory.
    s.host_callback(tracked(c, [counter] { *counter += 1; }), {}, {pinned_sync});
    sluice::copy(s, dbuf, 0, pinned, 0, sizeof(std::uint64_t));
    g = cap.end();
    EXPECT_FALSE(cap.active());
    EXPECT_FALSE(cap.stream());
  }
  EXPECT_FALSE(s.is_capturing());
  ASSERT_TRUE(g);
  EXPECT_EQ(g.node_count(), 2u);
  s.synchronize();
  EXPECT_EQ(c.calls.load(), 0) << "a capture records the callback; it does not run it";
  EXPECT_EQ(c.destroyed.load(), 0) << "the graph holds the callback";

  sluice::GraphExec exec = g.instantiate();
  exec.upload(s);
  for (int i = 0; i < 3; ++i) exec.launch(s);
  s.synchronize();
  EXPECT_EQ(c.calls.load(), 3);
  EXPECT_EQ(*counter, 3u);
  EXPECT_EQ(sluice::read_vector<std::uint64_t>(s, dbuf, 0, 1).at(0), 3u);
  EXPECT_EQ(c.destroyed.load(), 0);

  g.close();
  EXPECT_EQ(c.destroyed.load(), 0) << "the executable graph still holds the callback";
  exec.launch(s);  // still launchable without its Graph
  s.synchronize();
  EXPECT_EQ(c.calls.load(), 4);
  exec = sluice::GraphExec();
  EXPECT_EQ(c.destroyed.load(), 1) << "destroyed exactly once, with the last graph";
  s.synchronize();
  EXPECT_EQ(c.calls.load(), 4);
  EXPECT_EQ(c.destroyed.load(), 1);
}

TEST_F(SluiceTest, ReplaysReuseOneCallableInstance) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> seen{0};
  sluice::Capture cap(s);
  // A mutable callable keeps its state across launches: it is one object, invoked
  // once per launch, not a fresh copy per launch.
  s.host_callback([&seen, n = 0]() mutable { seen = ++n; });
  sluice::GraphExec exec = cap.end().instantiate();
  for (int i = 0; i < 3; ++i) exec.launch(s);
  s.synchronize();
  EXPECT_EQ(seen.load(), 3);
}

TEST_F(SluiceTest, GraphLaunchesOnAnotherStreamAndThroughViews) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Stream t = sluice::Stream::create(dev_);
  std::atomic<int> value{0};
  Counters c;
  sluice::Graph g = capture_stores(s, 1, value, 7, c);
  sluice::GraphRef gv = g;
  EXPECT_EQ(gv.node_count(), 1u);
  sluice::GraphExec exec = gv.instantiate();
  sluice::GraphExecRef ev = exec;
  ev.launch(t);
  t.synchronize();
  EXPECT_EQ(value.load(), 7);
  EXPECT_EQ(c.calls.load(), 1);
  // Destroying both while a launch may still be pending is safe: the launch keeps
  // the callback alive until it ran.
  ev.launch(t);
  g = sluice::Graph();
  exec = sluice::GraphExec();
  t.synchronize();
  EXPECT_EQ(c.calls.load(), 2);
  EXPECT_EQ(c.destroyed.load(), 1);
}

TEST_F(SluiceTest, EveryCaptureModeCaptures) {
  sluice::Stream s = sluice::Stream::create(dev_);
  for (sluice::CaptureMode mode : {sluice::CaptureMode::relaxed, sluice::CaptureMode::thread_local_,
                                   sluice::CaptureMode::global}) {
    std::atomic<int> ran{0};
    sluice::Capture cap(s, mode);
    s.host_callback([&ran] { ++ran; });
    sluice::Graph g = cap.end();
    EXPECT_EQ(g.node_count(), 1u);
    g.instantiate().launch(s);
    s.synchronize();
    EXPECT_EQ(ran.load(), 1);
  }
  auto bad = sluice::Capture::begin(std::nothrow, s, static_cast<sluice::CaptureMode>(7));
  EXPECT_EQ(bad.code(), ErrorCode::invalid_argument);
  EXPECT_FALSE(s.is_capturing());
}

TEST_F(SluiceTest, FreeFunctionCapture) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> ran{0};
  sluice::begin_capture(s);
  EXPECT_TRUE(s.is_capturing());
  s.host_callback([&ran] { ++ran; });
  sluice::Graph g = sluice::end_capture(s);
  EXPECT_FALSE(s.is_capturing());
  sluice::GraphExec exec = g.instantiate();
  exec.launch(s);
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(ran.load(), 2);

  EXPECT_EQ(sluice::end_capture(std::nothrow, s).code(), ErrorCode::invalid_state);
  ASSERT_TRUE(sluice::begin_capture(std::nothrow, s, sluice::CaptureMode::global));
  EXPECT_EQ(sluice::begin_capture(std::nothrow, s).code(), ErrorCode::invalid_state);
  auto e = sluice::end_capture(std::nothrow, s);
  ASSERT_TRUE(e) << e.error().message();
  EXPECT_EQ(e->node_count(), 0u);
}

// --- multi-stream capture ----------------------------------------------------------

TEST_F(SluiceTest, ForkJoinCaptureAcrossTwoStreamsViaEvents) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  std::mutex m;
  std::vector<int> log;
  auto note = [&m, &log](int v) {
    std::lock_guard<std::mutex> lock(m);
    log.push_back(v);
  };
  Counters ca, cb;

  sluice::Graph g;
  {
    sluice::Capture cap(a);
    a.host_callback(tracked(ca, [note] { note(1); }));
    sluice::Event fork = a.record_event();
    EXPECT_FALSE(b.is_capturing());
    b.wait(fork);
    EXPECT_TRUE(b.is_capturing()) << "waiting on a captured event joins the capture";
    b.host_callback(tracked(cb, [note] { note(2); }));
    sluice::Event join = b.record_event();
    a.wait(join);
    a.host_callback([note] { note(3); });
    g = cap.end();
  }
  EXPECT_FALSE(a.is_capturing());
  EXPECT_FALSE(b.is_capturing());
  EXPECT_EQ(g.node_count(), 3u);

  sluice::GraphExec exec = g.instantiate();
  for (int i = 0; i < 3; ++i) exec.launch(a);
  a.synchronize();
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3, 1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(ca.calls.load(), 3);
  EXPECT_EQ(cb.calls.load(), 3);

  g = sluice::Graph();
  exec = sluice::GraphExec();
  EXPECT_EQ(ca.destroyed.load(), 1);
  EXPECT_EQ(cb.destroyed.load(), 1);

  // Both streams work normally afterwards.
  b.host_callback([note] { note(4); });
  b.synchronize();
  EXPECT_EQ(log.back(), 4);
}

TEST_F(SluiceTest, UnjoinedForkFailsTheCapture) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  Counters c;
  {
    sluice::Capture cap(a);
    sluice::Event fork = a.record_event();
    b.wait(fork);
    ASSERT_TRUE(b.is_capturing());
    b.host_callback(tracked(c, nothing()));  // never joined back into a
    sluice::Result<sluice::Graph> r = cap.end(std::nothrow);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.code(), ErrorCode::capture_failed);
    EXPECT_TRUE(contains(r.error().message(), "not joined back")) << r.error().message();
    EXPECT_FALSE(cap.active());
  }
  EXPECT_FALSE(a.is_capturing());
  EXPECT_FALSE(b.is_capturing());
  EXPECT_EQ(c.calls.load(), 0);
  EXPECT_EQ(c.destroyed.load(), 1) << "the discarded capture released the callback";
  std::atomic<int> ran{0};
  b.host_callback([&ran] { ++ran; });
  b.synchronize();
  a.synchronize();
  EXPECT_EQ(ran.load(), 1);
}

// --- failures inside a capture -----------------------------------------------------

TEST_F(SluiceTest, RejectedOpInsideCaptureFailsTheEnd) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Counters c;
  sluice::Capture cap(s);
  s.host_callback(tracked(c, nothing()));
  EXPECT_SLUICE_THROW(s.synchronize(), ErrorCode::capture_unsupported);
  EXPECT_EQ(s.query(std::nothrow).code(), ErrorCode::capture_unsupported);
  EXPECT_EQ(sluice::Buffer::alloc(std::nothrow, s, 64).code(), ErrorCode::capture_unsupported);
  EXPECT_TRUE(cap.active()) << "the capture stays open until it is ended";
  EXPECT_TRUE(s.is_capturing());
  try {
    cap.end();
    FAIL() << "end() must fail after a rejected operation";
  } catch (const sluice::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::capture_failed);
    EXPECT_TRUE(contains(e.what(), "stream synchronize")) << e.what();
  }
  EXPECT_FALSE(cap.active());
  EXPECT_FALSE(s.is_capturing());
  EXPECT_EQ(c.calls.load(), 0);
  EXPECT_EQ(c.destroyed.load(), 1);
  EXPECT_EQ(cap.end(std::nothrow).code(), ErrorCode::invalid_handle) << "a second end()";
  s.synchronize();  // usable again
}

TEST_F(SluiceTest, CaptureScopeDiscardsAnUnendedCapture) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Counters c;
  {
    sluice::Capture cap(s);
    s.host_callback(tracked(c, nothing()));
    EXPECT_TRUE(s.is_capturing());
  }
  EXPECT_FALSE(s.is_capturing());
  EXPECT_EQ(c.calls.load(), 0);
  EXPECT_EQ(c.destroyed.load(), 1);

  // Also when an exception leaves the scope.
  Counters d;
  try {
    sluice::Capture cap(s);
    s.host_callback(tracked(d, nothing()));
    throw std::runtime_error("leaving early");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(s.is_capturing());
  EXPECT_EQ(d.destroyed.load(), 1);
  s.synchronize();
  EXPECT_EQ(d.calls.load(), 0);
}

TEST_F(SluiceTest, CaptureErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  {
    sluice::Capture cap(s);
    EXPECT_SLUICE_THROW(sluice::Capture again(s), ErrorCode::invalid_state);
    auto again = sluice::Capture::begin(std::nothrow, s);
    EXPECT_EQ(again.code(), ErrorCode::invalid_state);
    EXPECT_TRUE(s.is_capturing()) << "a refused second begin leaves the first capture alone";
    // A graph launch is refused inside a capture.
    sluice::Stream t = sluice::Stream::create(dev_);
    std::atomic<int> v{0};
    Counters c;
    sluice::GraphExec exec = capture_stores(t, 1, v, 1, c).instantiate();
    EXPECT_EQ(exec.launch(std::nothrow, s).code(), ErrorCode::capture_unsupported);
    EXPECT_EQ(cap.end(std::nothrow).code(), ErrorCode::capture_failed);
  }
  EXPECT_FALSE(s.is_capturing());

  sluice::StreamRef stale = s;
  s.close();
  EXPECT_EQ(sluice::Capture::begin(std::nothrow, stale).code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::Capture cap(stale), ErrorCode::invalid_handle);
  EXPECT_EQ(stale.is_capturing(std::nothrow).code(), ErrorCode::invalid_handle);
  sluice::Capture empty;
  EXPECT_FALSE(empty.active());
  EXPECT_EQ(empty.end(std::nothrow).code(), ErrorCode::invalid_handle);
}

TEST_F(SluiceTest, StaleGraphHandlesReportInvalidHandle) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> v{0};
  Counters c;
  sluice::Graph g = capture_stores(s, 1, v, 1, c);
  sluice::GraphExec exec = g.instantiate();
  sluice::GraphRef gv = g;
  sluice::GraphExecRef ev = exec;
  g.close();
  exec.close();
  EXPECT_EQ(gv.node_count(std::nothrow).code(), ErrorCode::invalid_handle);
  EXPECT_EQ(gv.instantiate(std::nothrow).code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(gv.debug_dot("/dev/null"), ErrorCode::invalid_handle);
  EXPECT_EQ(ev.launch(std::nothrow, s).code(), ErrorCode::invalid_handle);
  EXPECT_EQ(ev.upload(std::nothrow, s).code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(ev.launch(s), ErrorCode::invalid_handle);
  // Wrong types are refused too.
  sluice::GraphRef forged(sluice_graph_t{s.raw().bits});
  EXPECT_EQ(forged.node_count(std::nothrow).code(), ErrorCode::invalid_handle);
  EXPECT_EQ(c.destroyed.load(), 1);
}

// --- update ------------------------------------------------------------------------

TEST_F(SluiceTest, UpdateInPlaceThenReinstantiated) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> value{0};
  Counters c1, c2, c3;

  sluice::Graph g1 = capture_stores(s, 1, value, 1, c1);
  sluice::GraphExec exec = g1.instantiate();
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(value.load(), 1);

  // Same topology: updated in place.
  sluice::Graph g2 = capture_stores(s, 1, value, 2, c2);
  sluice::GraphUpdateInfo in_place = exec.update(g2);
  EXPECT_TRUE(in_place.in_place);
  EXPECT_TRUE(in_place.reason.empty()) << in_place.reason;
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(value.load(), 2);
  EXPECT_EQ(c1.calls.load(), 1) << "the old callback no longer runs";
  EXPECT_EQ(c1.destroyed.load(), 0) << "g1 still holds it";
  g1.close();
  EXPECT_EQ(c1.destroyed.load(), 1) << "nothing holds it after the update and g1's destruction";

  // Different node count: refused in place, re-instantiated.
  sluice::Graph g3 = capture_stores(s, 2, value, 10, c3);
  sluice::Result<sluice::GraphUpdateInfo> re = exec.update(std::nothrow, g3);
  ASSERT_TRUE(re) << re.error().message();
  EXPECT_FALSE(re->in_place);
  EXPECT_FALSE(re->reason.empty());
  exec.launch(s);
  s.synchronize();
  EXPECT_EQ(value.load(), 11);
  EXPECT_EQ(c3.calls.load(), 2);

  g2.close();
  g3.close();
  EXPECT_EQ(c2.destroyed.load(), 1);
  EXPECT_EQ(c3.destroyed.load(), 0) << "the executable graph holds g3's callbacks";
  exec.close();
  EXPECT_EQ(c3.destroyed.load(), 2);

  sluice::GraphExec stale;
  EXPECT_EQ(stale.update(std::nothrow, g3).code(), ErrorCode::invalid_handle);
}

// --- debug dot ---------------------------------------------------------------------

TEST_F(SluiceTest, DebugDotWritesGraphviz) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> v{0};
  Counters c;
  sluice::Graph g = capture_stores(s, 2, v, 0, c);
  const std::string verbose = temp_path("verbose");
  const std::string terse = temp_path("terse");
  g.debug_dot(verbose, true);
  g.debug_dot(terse.c_str());
  const std::string a = read_file(verbose), b = read_file(terse);
  EXPECT_EQ(a.rfind("digraph", 0), 0u) << a;
  EXPECT_EQ(b.rfind("digraph", 0), 0u) << b;
  EXPECT_GT(a.size(), b.size()) << "verbose labels are longer";
  std::remove(verbose.c_str());
  std::remove(terse.c_str());

  EXPECT_EQ(g.debug_dot(std::nothrow, nullptr).code(), ErrorCode::null_argument);
  auto bad = g.debug_dot(std::nothrow, "/nonexistent-sluice-dir/x.dot");
  EXPECT_FALSE(bad);
}

// --- graph cache -------------------------------------------------------------------

TEST_F(SluiceTest, GraphCacheRunsEagerThenCapturesThenReplays) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer acc = sluice::Buffer::alloc(s, sizeof(std::uint32_t));
  sluice::SyncObject acc_sync = acc.sync();
  sluice::memset(s, acc, 0, 0, sizeof(std::uint32_t));
  // On host, a device buffer's device_ptr is its host address.
  auto* acc_ptr =
      reinterpret_cast<std::uint32_t*>(static_cast<std::uintptr_t>(acc.info().device_ptr));
  Counters c;
  int body_calls = 0;
  sluice::GraphCache cache = sluice::GraphCache::create(dev_);
  const int n = 6;
  for (int i = 0; i < n; ++i) {
    cache.run(42, s, [&](sluice::StreamRef st) {
      EXPECT_EQ(st, s.ref());
      ++body_calls;
      // A callback that adds to the (host-visible) device memory.
      st.host_callback(tracked(c, [acc_ptr] { *acc_ptr += 1; }), {}, {acc_sync});
    });
  }
  sluice::GraphCacheStats st = cache.stats();
  EXPECT_EQ(st.eager, 1u);
  EXPECT_EQ(st.captured, 1u);
  EXPECT_EQ(st.replayed, static_cast<std::uint64_t>(n - 2));
  EXPECT_EQ(st.entries, 1u);
  EXPECT_EQ(body_calls, 2) << "the body runs for the warm-up and the capture only";
  EXPECT_EQ(sluice::read_vector<std::uint32_t>(s, acc, 0, 1).at(0), static_cast<std::uint32_t>(n));
  EXPECT_EQ(c.calls.load(), n);
  EXPECT_EQ(c.destroyed.load(), 1) << "the eager callback is gone; the captured one is cached";

  // Another key has its own entry.
  cache.run(43, s, [&](sluice::StreamRef) { ++body_calls; });
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(body_calls, 3);
  EXPECT_TRUE(cache.contains(42) && cache.contains(43));
  EXPECT_FALSE(cache.contains(44));
  cache.set_max_entries(1);  // keeps the most recently used key
  EXPECT_FALSE(cache.contains(42));
  EXPECT_TRUE(cache.contains(43));
  EXPECT_EQ(cache.stats().entries, 1u);

  sluice::GraphCacheRef view = cache;
  EXPECT_EQ(view.stats().eager, 2u);
  cache.close();
  EXPECT_EQ(c.destroyed.load(), 2) << "destroying the cache releases the captured callback";
  EXPECT_EQ(view.stats(std::nothrow).code(), ErrorCode::invalid_handle);
  EXPECT_EQ(view.run(std::nothrow, 1, s, [](sluice::StreamRef) {}).code(),
            ErrorCode::invalid_handle);
}

TEST_F(SluiceTest, GraphCacheBodyFailuresBecomeCallbackFailed) {
  Counters c;  // outlive the cache, which holds a captured callback
  std::atomic<int> runs{0};
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::GraphCache cache = sluice::GraphCache::create(dev_);

  // A thrown exception is caught in the trampoline; its message is kept.
  auto r = cache.run(std::nothrow, 1, s,
                     [](sluice::StreamRef) { throw std::runtime_error("boom in the body"); });
  ASSERT_EQ(r.code(), ErrorCode::callback_failed);
  EXPECT_TRUE(contains(r.error().message(), "boom in the body")) << r.error().message();
  EXPECT_SLUICE_THROW(cache.run(1, s, [](sluice::StreamRef) { throw 42; }),
                      ErrorCode::callback_failed);

  // An int code and a failed Result.
  auto code = cache.run(std::nothrow, 2, s, [](sluice::StreamRef) { return 5; });
  ASSERT_EQ(code.code(), ErrorCode::callback_failed);
  EXPECT_TRUE(contains(code.error().message(), "returned 5")) << code.error().message();
  auto res = cache.run(std::nothrow, 3, s, [](sluice::StreamRef st) {
    return sluice::copy(std::nothrow, st, sluice::BufferRef(), 0, sluice::BufferRef(), 0, 1);
  });
  ASSERT_EQ(res.code(), ErrorCode::callback_failed);
  EXPECT_TRUE(contains(res.error().message(), "SLUICE_ERROR_INVALID_HANDLE"))
      << res.error().message();
  EXPECT_TRUE(cache.run(std::nothrow, 3, s, [](sluice::StreamRef) { return 0; }));
  EXPECT_TRUE(cache.run(std::nothrow, 3, s, [](sluice::StreamRef) { return sluice::Result<void>(); }));
  sluice::GraphCacheStats before = cache.stats();
  EXPECT_EQ(before.eager, 1u) << "failed runs are not counted";
  EXPECT_EQ(before.captured, 1u);
  EXPECT_EQ(before.entries, 1u);

  // A failure during the capturing run: the capture is discarded (its callback
  // freed unrun), the stream leaves capture mode, and the next run captures again.
  auto good = [&](sluice::StreamRef st) { st.host_callback(tracked(c, [&runs] { ++runs; })); };
  cache.run(4, s, good);  // eager
  s.synchronize();
  EXPECT_EQ(c.destroyed.load(), 1);
  auto failing = cache.run(std::nothrow, 4, s, [&](sluice::StreamRef st) {
    st.host_callback(tracked(c, [&runs] { ++runs; }));
    st.synchronize();  // rejected inside the capture: throws CAPTURE_UNSUPPORTED
  });
  ASSERT_EQ(failing.code(), ErrorCode::callback_failed);
  EXPECT_TRUE(contains(failing.error().message(), "SLUICE_ERROR_CAPTURE_UNSUPPORTED"))
      << failing.error().message();
  EXPECT_FALSE(s.is_capturing());
  EXPECT_EQ(c.destroyed.load(), 2);
  cache.run(4, s, good);  // captured now
  cache.run(4, s, good);  // replayed
  s.synchronize();
  EXPECT_EQ(runs.load(), 3);
  sluice::GraphCacheStats st = cache.stats();
  EXPECT_EQ(st.eager, before.eager + 1);
  EXPECT_EQ(st.captured, before.captured + 1);
  EXPECT_EQ(st.replayed, 1u);
  EXPECT_EQ(st.entries, 2u);
}

TEST_F(SluiceTest, GraphCacheIsEagerWithGraphsDisabled) {
  GraphsEnabledRestorer restore;
  std::atomic<int> runs{0};
  int body_calls = 0;
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::GraphCache cache = sluice::GraphCache::create(dev_);
  sluice::set_graphs_enabled(false);
  auto body = [&](sluice::StreamRef st) {
    ++body_calls;
    st.host_callback([&runs] { ++runs; });
  };
  for (int i = 0; i < 4; ++i) cache.run(9, s, body);
  s.synchronize();
  sluice::GraphCacheStats st = cache.stats();
  EXPECT_EQ(st.eager, 4u);
  EXPECT_EQ(st.captured, 0u);
  EXPECT_EQ(st.replayed, 0u);
  EXPECT_EQ(body_calls, 4);
  EXPECT_EQ(runs.load(), 4);

  ASSERT_TRUE(sluice::set_graphs_enabled(std::nothrow, true));
  for (int i = 0; i < 3; ++i) cache.run(9, s, body);
  s.synchronize();
  st = cache.stats();
  EXPECT_EQ(st.eager, 5u);
  EXPECT_EQ(st.captured, 1u);
  EXPECT_EQ(st.replayed, 1u);
  EXPECT_EQ(runs.load(), 7);
}

TEST_F(SluiceTest, GraphCacheErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  EXPECT_SLUICE_THROW(sluice::GraphCache::create(sluice::DeviceRef()), ErrorCode::invalid_handle);
  sluice::GraphCache cache = sluice::GraphCache::create(dev_);
  sluice::StreamRef stale = s;
  s.close();
  bool called = false;
  EXPECT_SLUICE_THROW(cache.run(1, stale, [&](sluice::StreamRef) { called = true; }),
                      ErrorCode::invalid_handle);
  EXPECT_FALSE(called);
  sluice::GraphCache empty;
  EXPECT_EQ(empty.stats(std::nothrow).code(), ErrorCode::invalid_handle);
}

// --- the stream's block cache -------------------------------------------------------

TEST_F(SluiceTest, StreamBlockCacheLimit) {
  sluice::Stream s = sluice::Stream::create(dev_);
  s.set_block_cache_limit(0);
  s.set_block_cache_limit(1u << 20);
  {
    sluice::Buffer b = sluice::Buffer::alloc(s, 4096);
    sluice::memset(s, b, 0, 1, 4096);
  }
  sluice::Buffer again = sluice::Buffer::alloc(s, 4096);
  sluice::memset(s, again, 0, 2, 4096);
  EXPECT_EQ(sluice::read_vector<std::uint8_t>(s, again, 4095, 1).at(0), 2u);
  sluice::StreamRef view = s;
  EXPECT_TRUE(view.set_block_cache_limit(std::nothrow, 0));
  again.close();
  s.close();
  EXPECT_EQ(view.set_block_cache_limit(std::nothrow, 0).code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(view.set_block_cache_limit(1), ErrorCode::invalid_handle);
}
