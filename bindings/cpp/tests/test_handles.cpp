// Ownership: every owning wrapper is move-only; a moved-from wrapper is empty,
// its destructor does nothing, and using it reports INVALID_HANDLE.
#include <type_traits>
#include <utility>

#include "sluice_test.hpp"

namespace {

template <class T>
constexpr bool move_only_raii() {
  return !std::is_copy_constructible<T>::value && !std::is_copy_assignable<T>::value &&
         std::is_nothrow_move_constructible<T>::value &&
         std::is_nothrow_move_assignable<T>::value && std::is_nothrow_destructible<T>::value &&
         std::is_nothrow_default_constructible<T>::value;
}

static_assert(move_only_raii<sluice::Device>(), "Device");
static_assert(move_only_raii<sluice::Stream>(), "Stream");
static_assert(move_only_raii<sluice::Event>(), "Event");
static_assert(move_only_raii<sluice::Buffer>(), "Buffer");
static_assert(move_only_raii<sluice::SyncObject>(), "SyncObject");
static_assert(move_only_raii<sluice::Op>(), "Op");
static_assert(move_only_raii<sluice::Module>(), "Module");
static_assert(move_only_raii<sluice::Function>(), "Function");
static_assert(move_only_raii<sluice::Graph>(), "Graph");
static_assert(move_only_raii<sluice::GraphExec>(), "GraphExec");
static_assert(move_only_raii<sluice::GraphCache>(), "GraphCache");
static_assert(move_only_raii<sluice::Capture>(), "Capture");

static_assert(std::is_trivially_copyable<sluice::DeviceRef>::value, "DeviceRef");
static_assert(std::is_trivially_copyable<sluice::StreamRef>::value, "StreamRef");
static_assert(std::is_trivially_copyable<sluice::EventRef>::value, "EventRef");
static_assert(std::is_trivially_copyable<sluice::BufferRef>::value, "BufferRef");
static_assert(std::is_trivially_copyable<sluice::SyncRef>::value, "SyncRef");
static_assert(std::is_trivially_copyable<sluice::GraphRef>::value, "GraphRef");
static_assert(std::is_trivially_copyable<sluice::GraphExecRef>::value, "GraphExecRef");
static_assert(std::is_trivially_copyable<sluice::GraphCacheRef>::value, "GraphCacheRef");

// Avoids -Wself-move while still moving an object into itself.
template <class T>
T& same(T& t) {
  return t;
}

/// Moves, move-assigns, self-moves and release/adopts one wrapper type.
template <class T, class Make>
void check_moves(Make make) {
  T a = make();
  ASSERT_TRUE(a);
  const auto raw = a.raw();
  ASSERT_NE(raw.bits, 0u);

  // Move construction leaves the source empty.
  T b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.raw().bits, 0u);
  EXPECT_EQ(b.raw().bits, raw.bits);

  // Move assignment destroys the target's old handle.
  T c = make();
  const auto live = sluice::live_handles();
  c = std::move(b);
  EXPECT_EQ(sluice::live_handles(), live - 1);
  EXPECT_EQ(c.raw().bits, raw.bits);
  EXPECT_FALSE(b);

  // Self-move keeps the handle.
  c = std::move(same(c));
  EXPECT_EQ(c.raw().bits, raw.bits);

  // Assigning an empty wrapper destroys the handle.
  c = T();
  EXPECT_EQ(sluice::live_handles(), live - 2);
  EXPECT_FALSE(c);

  // release / adopt round trip.
  T d = make();
  const auto h = d.release();
  EXPECT_FALSE(d);
  T e = T::adopt(h);
  EXPECT_EQ(e.raw().bits, h.bits);

  // Explicit close, then a harmless destructor and an idempotent second close.
  EXPECT_TRUE(e.close(std::nothrow));
  EXPECT_FALSE(e);
  EXPECT_TRUE(e.close(std::nothrow));
}

}  // namespace

TEST_F(SluiceTest, DeviceMoves) {
  check_moves<sluice::Device>([] { return sluice::Device::open(sluice::Backend::host, 0); });
}

TEST_F(SluiceTest, StreamMoves) {
  check_moves<sluice::Stream>([this] { return sluice::Stream::create(dev_); });
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Stream t = std::move(s);
  EXPECT_SLUICE_THROW(s.synchronize(), sluice::ErrorCode::invalid_handle);  // NOLINT
  EXPECT_EQ(s.synchronize(std::nothrow).code(), sluice::ErrorCode::invalid_handle);
  t.synchronize();
}

TEST_F(SluiceTest, EventMoves) {
  sluice::Stream s = sluice::Stream::create(dev_);
  check_moves<sluice::Event>([&s] { return s.record_event(); });
}

TEST_F(SluiceTest, BufferMoves) {
  sluice::Stream s = sluice::Stream::create(dev_);
  check_moves<sluice::Buffer>([&s] { return sluice::Buffer::alloc(s, 64); });
  sluice::Buffer b = sluice::Buffer::alloc(s, 8);
  sluice::Buffer c = std::move(b);
  std::uint64_t v = 1;
  EXPECT_SLUICE_THROW(sluice::copy_from_host(s, b, 0, &v, sizeof v),  // NOLINT
                      sluice::ErrorCode::invalid_handle);
  sluice::copy_from_host(s, c, 0, &v, sizeof v);
}

TEST_F(SluiceTest, SyncObjectMoves) {
  check_moves<sluice::SyncObject>([] { return sluice::SyncObject::create(); });
}

TEST_F(SluiceTest, OpMoves) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  const auto live = sluice::live_handles();
  sluice::Op a(s, {}, {x});
  EXPECT_TRUE(a.active());
  EXPECT_EQ(sluice::live_handles(), live + 1);
  sluice::Op b(std::move(a));
  EXPECT_FALSE(a.active());  // NOLINT
  EXPECT_TRUE(b.active());
  EXPECT_EQ(a.end(std::nothrow).code(), sluice::ErrorCode::invalid_handle);
  sluice::Op c;
  c = std::move(b);
  EXPECT_TRUE(c.active());
  EXPECT_EQ(c.stream(), s.ref());
  c = sluice::Op();  // ends the op
  EXPECT_EQ(sluice::live_handles(), live);
  EXPECT_TRUE(x.info().has_writer);
}

TEST_F(SluiceTest, GraphMoves) {
  sluice::Stream s = sluice::Stream::create(dev_);
  check_moves<sluice::Graph>([&s] {
    sluice::Capture cap(s);
    return cap.end();
  });
}

TEST_F(SluiceTest, GraphExecMoves) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Capture cap(s);
  sluice::Graph g = cap.end();
  check_moves<sluice::GraphExec>([&g] { return g.instantiate(); });
  sluice::GraphExec a = g.instantiate();
  sluice::GraphExec b = std::move(a);
  EXPECT_EQ(a.launch(std::nothrow, s).code(), sluice::ErrorCode::invalid_handle);  // NOLINT
  b.launch(s);
  s.synchronize();
}

TEST_F(SluiceTest, GraphCacheMoves) {
  check_moves<sluice::GraphCache>([this] { return sluice::GraphCache::create(dev_); });
}

TEST_F(SluiceTest, CaptureMoves) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Stream t = sluice::Stream::create(dev_);
  const auto live = sluice::live_handles();
  sluice::Capture a(s);
  EXPECT_EQ(sluice::live_handles(), live) << "a capture scope owns no handle of its own";
  sluice::Capture b(std::move(a));
  EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(a.stream());
  EXPECT_EQ(a.end(std::nothrow).code(), sluice::ErrorCode::invalid_handle);
  EXPECT_TRUE(b.active());
  EXPECT_EQ(b.stream(), s.ref());
  EXPECT_TRUE(s.is_capturing()) << "moving the scope does not end the capture";

  // Move assignment ends (and discards) the target's capture.
  sluice::Capture c(t);
  c = std::move(b);
  EXPECT_FALSE(t.is_capturing());
  EXPECT_TRUE(s.is_capturing());
  EXPECT_EQ(c.stream(), s.ref());

  // Self-move keeps it.
  c = std::move(same(c));
  EXPECT_TRUE(c.active());
  EXPECT_TRUE(s.is_capturing());

  // Assigning an empty scope ends the capture.
  c = sluice::Capture();
  EXPECT_FALSE(s.is_capturing());

  // release() hands the open capture to the caller.
  sluice::Capture d(s);
  sluice_stream_t raw = d.release();
  EXPECT_FALSE(d.active());
  EXPECT_EQ(raw.bits, s.raw().bits);
  EXPECT_TRUE(s.is_capturing());
  sluice::Graph g = sluice::end_capture(s);
  EXPECT_EQ(g.node_count(), 0u);
  EXPECT_EQ(sluice::live_handles(), live + 1);
}

TEST_F(SluiceTest, DefaultConstructedWrappersAreEmpty) {
  sluice::Device d;
  sluice::Stream s;
  sluice::Event e;
  sluice::Buffer b;
  sluice::SyncObject y;
  sluice::Op o;
  sluice::Module m;
  sluice::Function f;
  sluice::Graph g;
  sluice::GraphExec x;
  sluice::GraphCache c;
  sluice::Capture cap;
  EXPECT_FALSE(d || s || e || b || y || o || m || f || g || x || c || cap);
  EXPECT_EQ(s.raw().bits, 0u);
}
