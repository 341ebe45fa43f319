// sluice::Device / DeviceRef on the host backend.
#include "sluice_test.hpp"

#include <cstdlib>
#include <string>

using sluice::Backend;
using sluice::ErrorCode;

TEST_F(SluiceTest, HostDeviceProps) {
  sluice::DeviceProps p = dev_.props();
  EXPECT_EQ(p.backend, Backend::host);
  EXPECT_EQ(p.ordinal, 0u);
  EXPECT_FALSE(p.name.empty());
  EXPECT_EQ(p.compute_capability_major, 0);
  EXPECT_GT(p.multiprocessor_count, 0);
  EXPECT_GE(sluice::Device::count(Backend::host), 1u);
}

TEST_F(SluiceTest, OpenDefaultFollowsEnvironment) {
  // ctest sets SLUICE_BACKEND=host; the GPU suite runs the binary with cuda.
  const char* env = std::getenv("SLUICE_BACKEND");
  const Backend want =
      env != nullptr && std::string(env) == "cuda" ? Backend::cuda : Backend::host;
  sluice::Device d = sluice::Device::open_default();
  EXPECT_EQ(d.props().backend, want);
  auto r = sluice::Device::open_default(std::nothrow);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->props().backend, want);
}

TEST_F(SluiceTest, OpenErrors) {
  auto missing = sluice::Device::open(std::nothrow, Backend::host, 100000);
  EXPECT_EQ(missing.code(), ErrorCode::no_device) << missing.error().message();
  EXPECT_SLUICE_THROW(sluice::Device::open(Backend::host, 100000), ErrorCode::no_device);

  auto bogus = sluice::Device::open(std::nothrow, static_cast<Backend>(77), 0);
  EXPECT_EQ(bogus.code(), ErrorCode::invalid_argument) << bogus.error().message();

  // Without a usable driver this is NO_DRIVER; with one, a count.
  auto cuda = sluice::Device::count(std::nothrow, Backend::cuda);
  if (!cuda) {
    EXPECT_EQ(cuda.code(), ErrorCode::no_driver) << cuda.error().message();
  }
}

TEST_F(SluiceTest, PriorityRangeClamps) {
  sluice::PriorityRange pr = dev_.priority_range();
  sluice::Stream lo = sluice::Stream::create(dev_, sluice::StreamFlags::none, pr.least + 1000);
  sluice::Stream hi = sluice::Stream::create(dev_, sluice::StreamFlags::none, pr.greatest - 1000);
  lo.synchronize();
  hi.synchronize();
}

TEST_F(SluiceTest, WaitAllDrainsEveryStream) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  std::atomic<int> done{0};
  a.host_callback([&] {
    sleep_ms(50);
    ++done;
  });
  b.host_callback([&] {
    sleep_ms(50);
    ++done;
  });
  dev_.wait_all();
  EXPECT_EQ(done.load(), 2);
}

TEST_F(SluiceTest, PinnedPoolStats) {
  dev_.pinned_trim();
  const sluice::PinnedStats s0 = dev_.pinned_stats();
  {
    sluice::Buffer p = sluice::Buffer::alloc_pinned(dev_, 4096);
    sluice::PinnedStats s1 = dev_.pinned_stats();
    EXPECT_GE(s1.bytes_in_use, s0.bytes_in_use + 4096);
  }
  sluice::PinnedStats s2 = dev_.pinned_stats();
  EXPECT_EQ(s2.bytes_in_use, s0.bytes_in_use);
  EXPECT_GE(s2.bytes_cached, 4096u);
  {
    sluice::Buffer again = sluice::Buffer::alloc_pinned(dev_, 4096);
    EXPECT_GE(dev_.pinned_stats().hits, s2.hits + 1);
  }
  dev_.set_pinned_limit(0);
  EXPECT_EQ(dev_.pinned_stats().cache_limit, 0u);
  EXPECT_EQ(dev_.pinned_stats().bytes_cached, 0u);
  dev_.set_pinned_limit(256u << 20);
}

TEST_F(SluiceTest, DeviceRefIsAView) {
  sluice::Device d = sluice::Device::open(Backend::host, 0);
  sluice::DeviceRef ref = d;
  EXPECT_EQ(ref.raw().bits, d.raw().bits);
  EXPECT_EQ(ref.props().backend, Backend::host);
  sluice::DeviceRef copy = ref;
  EXPECT_TRUE(copy);

  d.close();
  EXPECT_FALSE(d);
  // The view does not keep the device open: it is now stale.
  auto r = ref.props(std::nothrow);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(contains(r.error().message(), "stale")) << r.error().message();
  EXPECT_FALSE(sluice::DeviceRef());
}

TEST_F(SluiceTest, ChildrenOutliveTheDeviceHandle) {
  sluice::Device d = sluice::Device::open(Backend::host, 0);
  sluice::Stream s = sluice::Stream::create(d);
  sluice::Buffer b = sluice::Buffer::alloc(s, 16);
  d.close();
  std::vector<std::uint8_t> v(16, 9);
  sluice::copy_from_host(s, b, 0, v);
  EXPECT_EQ(sluice::read_vector<std::uint8_t>(s, b, 0, 16), v);
}
