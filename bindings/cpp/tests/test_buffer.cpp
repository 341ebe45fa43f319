// sluice::Buffer and the copy helpers: data checked byte for byte.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "sluice_test.hpp"

using sluice::BufferKind;
using sluice::ErrorCode;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>((i * 131u + seed) & 0xffu);
  return v;
}

struct Pod {
  std::int32_t a;
  float b;
  std::uint16_t c[3];
};

}  // namespace

TEST_F(SluiceTest, DeviceRoundTrip) {
  sluice::Stream s = sluice::Stream::create(dev_);
  const std::size_t n = (1u << 20) + 3;
  sluice::Buffer b = sluice::Buffer::alloc(s, n);
  sluice::BufferInfo info = b.info();
  EXPECT_EQ(info.kind, BufferKind::device);
  EXPECT_EQ(info.size, n);
  EXPECT_EQ(info.host_ptr, nullptr);
  EXPECT_EQ(b.size(), n);
  EXPECT_TRUE(b.host_bytes().empty());

  auto in = pattern(n, 7);
  sluice::copy_from_host(s, b, 0, in);
  std::vector<std::uint8_t> out(n, 0);
  sluice::copy_to_host(s, out, b, 0);
  ASSERT_EQ(std::memcmp(in.data(), out.data(), n), 0);
}

TEST_F(SluiceTest, OffsetsTouchOnlyTheirRange) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer b = sluice::Buffer::alloc(s, 256);
  sluice::memset(s, b, 0, 0xAB, 256);
  auto in = pattern(100, 1);
  sluice::copy_from_host(s, b, 50, in);
  sluice::memset(s, b, 200, 0x00, 10);
  auto all = sluice::read_vector<std::uint8_t>(s, b, 0, 256);
  for (std::size_t i = 0; i < 256; ++i) {
    std::uint8_t want = 0xAB;
    if (i >= 50 && i < 150) want = in[i - 50];
    if (i >= 200 && i < 210) want = 0;
    ASSERT_EQ(all[i], want) << "byte " << i;
  }
  auto mid = sluice::read_vector<std::uint8_t>(s, b, 60, 5);
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), in.begin() + 10));
}

TEST_F(SluiceTest, BufferToBufferCopy) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer a = sluice::Buffer::alloc(s, 1000);
  sluice::Buffer b = sluice::Buffer::alloc(s, 1000);
  auto in = pattern(1000, 3);
  sluice::copy_from_host(s, a, 0, in);
  sluice::memset(s, b, 0, 0, 1000);
  sluice::copy(s, b, 100, a, 10, 500);
  auto out = sluice::read_vector<std::uint8_t>(s, b, 0, 1000);
  for (std::size_t i = 0; i < 1000; ++i) {
    std::uint8_t want = (i >= 100 && i < 600) ? in[i - 100 + 10] : 0;
    ASSERT_EQ(out[i], want) << "byte " << i;
  }
}

TEST_F(SluiceTest, PinnedBuffer) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer p = sluice::Buffer::alloc_pinned(dev_, 4096);
  EXPECT_EQ(p.kind(), BufferKind::pinned);
  sluice::MutableByteView host = p.host_bytes();
  ASSERT_EQ(host.size(), 4096u);
  ASSERT_NE(host.data(), nullptr);

  // host -> pinned (through the host view) -> device -> pinned region -> host view
  auto in = pattern(4096, 9);
  std::memcpy(host.data(), in.data(), 2048);
  sluice::Buffer d = sluice::Buffer::alloc(s, 2048);
  sluice::copy(s, d, 0, p, 0, 2048);
  sluice::copy(s, p, 2048, d, 0, 2048);
  p.sync().wait_read();  // the host waits for the last writer of p
  EXPECT_EQ(std::memcmp(host.data() + 2048, in.data(), 2048), 0);
}

TEST_F(SluiceTest, RegisteredHostMemory) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::vector<std::uint32_t> mem(512, 0);
  {
    sluice::Buffer r = sluice::Buffer::register_host(dev_, mem);
    sluice::BufferInfo info = r.info();
    EXPECT_EQ(info.kind, BufferKind::registered);
    EXPECT_EQ(info.size, mem.size() * sizeof(std::uint32_t));
    EXPECT_EQ(info.host_ptr, static_cast<void*>(mem.data()));

    std::vector<std::uint32_t> in(512);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<std::uint32_t>(i * 2654435761u);
    sluice::Buffer d = sluice::Buffer::alloc(s, 2048);
    sluice::copy_from_host(s, d, 0, in);
    sluice::copy(s, r, 0, d, 0, 2048);
    r.sync().wait_read();
    EXPECT_EQ(mem, in);
  }
  auto bad = sluice::Buffer::register_host(std::nothrow, dev_, nullptr, 16);
  EXPECT_FALSE(bad);
}

TEST_F(SluiceTest, TypedHelpers) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer b = sluice::Buffer::alloc(s, 4096);

  std::array<double, 4> arr{{1.5, -2.25, 3.0e10, 0.0}};
  sluice::copy_from_host(s, b, 0, arr);
  std::array<double, 4> arr_out{};
  sluice::copy_to_host(s, arr_out, b, 0);
  EXPECT_EQ(arr_out, arr);

  std::string text = "sluice: explicit streams";
  sluice::copy_from_host(s, b, 100, text);
  std::string text_out(text.size(), '?');
  sluice::copy_to_host(s, text_out, b, 100);
  EXPECT_EQ(text_out, text);

  std::vector<Pod> pods{{1, 2.5f, {1, 2, 3}}, {-7, 0.125f, {4, 5, 6}}};
  sluice::copy_from_host(s, b, 200, pods);
  auto pods_out = sluice::read_vector<Pod>(s, b, 200, 2);
  ASSERT_EQ(pods_out.size(), 2u);
  EXPECT_EQ(std::memcmp(pods.data(), pods_out.data(), sizeof(Pod) * 2), 0);

  const std::vector<std::int16_t> cv{-1, 2, -3};
  sluice::copy_from_host(s, b, 300, cv);
  EXPECT_EQ(sluice::read_vector<std::int16_t>(s, b, 300, 3), cv);

  // span sources and destinations
  std::vector<std::uint8_t> raw = pattern(64, 5);
  sluice::copy_from_host(s, b, 400, sluice::span<const std::uint8_t>(raw.data(), 32));
  std::vector<std::uint8_t> back(64, 0);
  sluice::span<std::uint8_t> dst(back.data(), 32);
  sluice::copy_to_host(s, dst, b, 400);
  EXPECT_TRUE(std::equal(back.begin(), back.begin() + 32, raw.begin()));
  EXPECT_EQ(back[32], 0);
}

TEST_F(SluiceTest, OutOfRangeCopiesChangeNothing) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer b = sluice::Buffer::alloc(s, 64);
  sluice::memset(s, b, 0, 0x5A, 64);
  std::vector<std::uint8_t> big(65, 1);

  EXPECT_SLUICE_THROW(sluice::copy_from_host(s, b, 0, big), ErrorCode::out_of_range);
  EXPECT_EQ(sluice::copy_from_host(std::nothrow, s, b, 1, big.data(), 64).code(),
            ErrorCode::out_of_range);
  std::vector<std::uint8_t> out(8);
  EXPECT_EQ(sluice::copy_to_host(std::nothrow, s, out, b, 60).code(), ErrorCode::out_of_range);
  EXPECT_EQ(sluice::memset(std::nothrow, s, b, 63, 0, 2).code(), ErrorCode::out_of_range);
  EXPECT_EQ(sluice::copy(std::nothrow, s, b, 0, b, SIZE_MAX, 1).code(), ErrorCode::out_of_range);
  auto vec = sluice::read_vector<std::uint8_t>(std::nothrow, s, b, 64, 1);
  EXPECT_EQ(vec.code(), ErrorCode::out_of_range);

  auto all = sluice::read_vector<std::uint8_t>(s, b, 0, 64);
  EXPECT_TRUE(std::all_of(all.begin(), all.end(), [](std::uint8_t v) { return v == 0x5A; }));
}

TEST_F(SluiceTest, ZeroSizedAllocationIsRejected) {
  sluice::Stream s = sluice::Stream::create(dev_);
  auto r = sluice::Buffer::alloc(std::nothrow, s, 0);
  EXPECT_EQ(r.code(), ErrorCode::invalid_argument);
}

TEST_F(SluiceTest, FreeWhileInUseOnAnotherStream) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::Buffer buf = sluice::Buffer::alloc(a, 1 << 16);
  sluice::Buffer dst = sluice::Buffer::alloc(b, 1 << 16);
  auto in = pattern(1 << 16, 11);
  sluice::copy_from_host(a, buf, 0, in);
  b.host_callback([] { sleep_ms(30); });
  sluice::copy(b, dst, 0, buf, 0, 1 << 16);  // waits for a's write, on b
  buf.close();                              // freed while b may still read it
  EXPECT_EQ(sluice::read_vector<std::uint8_t>(b, dst, 0, 1 << 16), in);
}
