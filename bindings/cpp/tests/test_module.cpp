// Modules and launches: CUDA only; the host backend says so cleanly.
#include <string>

#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST_F(SluiceTest, ModuleLoadIsUnsupportedOnHost) {
  const std::string ptx = ".version 7.0\n.target sm_50\n.address_size 64\n";
  auto r = sluice::Module::load(std::nothrow, dev_, ptx);
  ASSERT_EQ(r.code(), ErrorCode::unsupported);
  EXPECT_TRUE(contains(r.error().message(), "module")) << r.error().message();
  EXPECT_SLUICE_THROW(sluice::Module::load(dev_, ptx.data(), ptx.size() + 1),
                      ErrorCode::unsupported);
}

TEST_F(SluiceTest, LaunchWithoutAFunction) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Function none;
  int arg = 1;
  auto r = sluice::launch(std::nothrow, s, none, sluice::LaunchDims::linear(100, 32), {}, {}, arg);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::launch(s, none, sluice::LaunchDims(), {}, {}),
                      ErrorCode::invalid_handle);
  sluice::Module m;
  EXPECT_EQ(m.function(std::nothrow, "k").code(), ErrorCode::invalid_handle);
}

TEST(LaunchDims, Linear) {
  sluice::LaunchDims d = sluice::LaunchDims::linear(1000, 256);
  EXPECT_EQ(d.grid[0], 4u);
  EXPECT_EQ(d.block[0], 256u);
  EXPECT_EQ(d.grid[1], 1u);
  sluice_launch_dims_t raw = d.raw();
  EXPECT_EQ(raw.grid[0], 4u);
  EXPECT_EQ(raw.block[2], 1u);
  EXPECT_EQ(sluice::LaunchDims::linear(0, 128).grid[0], 1u);
}
