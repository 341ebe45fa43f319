// Library-wide functions: version, ABI, engine mode.
#include <string>

#include "sluice_test.hpp"

TEST(Library, VersionMatchesHeader) {
  EXPECT_STREQ(sluice::version(), SLUICE_VERSION_STRING);
  std::string expect = std::to_string(SLUICE_VERSION_MAJOR) + "." +
                       std::to_string(SLUICE_VERSION_MINOR) + "." +
                       std::to_string(SLUICE_VERSION_PATCH);
  EXPECT_EQ(expect, sluice::version());
  EXPECT_EQ(sluice::abi_version(), static_cast<std::uint32_t>(SLUICE_ABI_VERSION));
  EXPECT_TRUE(sluice::abi_compatible());
}

TEST_F(SluiceTest, EngineModeSwitch) {
  ASSERT_EQ(sluice::engine_mode(), sluice::EngineMode::async);
  auto s = sluice::Stream::create(dev_);
  auto x = sluice::SyncObject::create();
  const auto before = s.stats().engine_syncs;

  sluice::set_engine_mode(sluice::EngineMode::sync);
  EXPECT_EQ(sluice::engine_mode(), sluice::EngineMode::sync);
  { sluice::Op op(s, {}, {x}); }
  EXPECT_EQ(s.stats().engine_syncs, before + 1);

  sluice::set_engine_mode(sluice::EngineMode::async);
  EXPECT_EQ(sluice::engine_mode(), sluice::EngineMode::async);
  { sluice::Op op(s, {}, {x}); }
  EXPECT_EQ(s.stats().engine_syncs, before + 1);

  auto r = sluice::set_engine_mode(std::nothrow, static_cast<sluice::EngineMode>(9));
  EXPECT_EQ(r.code(), sluice::ErrorCode::invalid_argument);
  EXPECT_EQ(sluice::engine_mode(), sluice::EngineMode::async);
}
