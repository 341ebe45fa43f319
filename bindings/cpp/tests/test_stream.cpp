// sluice::Stream / StreamRef on the host backend.
#include <set>
#include <vector>

#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST_F(SluiceTest, CreateQuerySynchronize) {
  sluice::Stream s = sluice::Stream::create(dev_, sluice::StreamFlags::non_blocking);
  EXPECT_TRUE(s);
  s.synchronize();
  EXPECT_TRUE(s.query());
  std::atomic<bool> release{false};
  s.host_callback([&] {
    while (!release.load()) sleep_ms(1);
  });
  EXPECT_FALSE(s.query());
  release = true;
  s.synchronize();
  EXPECT_TRUE(s.query());
}

TEST_F(SluiceTest, BadFlagsAreRejected) {
  auto r = sluice::Stream::create(std::nothrow, dev_, static_cast<sluice::StreamFlags>(0x80));
  EXPECT_EQ(r.code(), ErrorCode::invalid_argument);
}

TEST_F(SluiceTest, StatsIdsAreUnique) {
  std::set<std::uint64_t> ids;
  std::vector<sluice::Stream> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(sluice::Stream::create(dev_));
    ids.insert(streams.back().stats().id);
  }
  EXPECT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids.count(0), 0u);
}

TEST_F(SluiceTest, Labels) {
  sluice::Stream s = sluice::Stream::create(dev_);
  s.set_label("prefetch");
  s.set_label(nullptr);
  EXPECT_EQ(sluice::StreamRef().set_label(std::nothrow, "x").code(), ErrorCode::invalid_handle);
}

TEST_F(SluiceTest, StreamRefViews) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::StreamRef ref = s;
  sluice::StreamRef ref2 = s.ref();
  EXPECT_EQ(ref, ref2);
  EXPECT_EQ(ref.raw().bits, s.raw().bits);
  EXPECT_EQ(ref.stats().id, s.stats().id);

  // Functions take StreamRef: both an owner and a view work.
  sluice::Buffer b1 = sluice::Buffer::alloc(s, 8);
  sluice::Buffer b2 = sluice::Buffer::alloc(ref, 8);
  std::uint64_t v = 0x1122334455667788u, out = 0;
  sluice::copy_from_host(ref, b2, 0, &v, sizeof v);
  sluice::copy(s, b1, 0, b2, 0, 8);
  sluice::copy_to_host(ref, &out, b1, 0, sizeof out);
  EXPECT_EQ(out, v);

  // A view of a handle owned elsewhere (e.g. by C code).
  sluice_stream_t c_owned{};
  ASSERT_EQ(sluice_stream_create(dev_.raw(), 0, 0, &c_owned), nullptr);
  sluice::StreamRef view(c_owned);
  view.synchronize();
  ASSERT_EQ(sluice_stream_destroy(c_owned), nullptr);
  // ... which goes stale when its owner destroys it.
  auto r = view.synchronize(std::nothrow);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(contains(r.error().message(), "stale")) << r.error().message();
}

TEST_F(SluiceTest, DestroyedStreamGivesInvalidHandle) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::StreamRef ref = s;
  s.close();
  EXPECT_FALSE(s);
  EXPECT_SLUICE_THROW(ref.synchronize(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(ref.stats(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::Buffer::alloc(ref, 8), ErrorCode::invalid_handle);
  // A second destroy through the C API is reported, not undefined behaviour.
  sluice_error_t* e = sluice_stream_destroy(ref.raw());
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(sluice_error_code(e), static_cast<std::uint32_t>(SLUICE_ERROR_INVALID_HANDLE));
  sluice_error_free(e);
}

TEST_F(SluiceTest, WrapExternalIsNonOwning) {
  sluice::Stream owner = sluice::Stream::create(dev_);
  void* native = owner.native_handle();
  ASSERT_NE(native, nullptr);
  {
    sluice::Stream wrapped = sluice::Stream::wrap_external(dev_, native);
    EXPECT_NE(wrapped.raw().bits, owner.raw().bits);
    EXPECT_EQ(wrapped.native_handle(), native);
    sluice::Buffer b = sluice::Buffer::alloc(wrapped, 4);
    std::uint32_t v = 0xdeadbeefu;
    sluice::copy_from_host(wrapped, b, 0, &v, sizeof v);
    wrapped.synchronize();
    EXPECT_EQ(sluice::read_vector<std::uint32_t>(owner, b, 0, 1).at(0), v);
  }
  // Destroying the wrapper left the foreign stream alone.
  std::atomic<bool> ran{false};
  owner.host_callback([&] { ran = true; });
  owner.synchronize();
  EXPECT_TRUE(ran.load());
}

TEST_F(SluiceTest, WrapExternalRejectsForeignPointers) {
  int not_a_stream = 0;
  auto r = sluice::Stream::wrap_external(std::nothrow, dev_, &not_a_stream);
  EXPECT_FALSE(r);
  auto null = sluice::Stream::wrap_external(std::nothrow, dev_, nullptr);
  EXPECT_FALSE(null);
}
