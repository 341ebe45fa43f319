// sluice::Error and the two error schemes (exceptions and Result).
#include <stdexcept>
#include <string>

#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST(Error, AdoptsCError) {
  sluice_error_t* raw = sluice_stream_synchronize(sluice_stream_t{0});
  ASSERT_NE(raw, nullptr);
  sluice::Error e = sluice::Error::adopt(raw);  // frees raw
  EXPECT_EQ(e.code(), ErrorCode::invalid_handle);
  EXPECT_EQ(e.raw_code(), static_cast<std::uint32_t>(SLUICE_ERROR_INVALID_HANDLE));
  EXPECT_EQ(e.driver_code(), 0u);
  EXPECT_STREQ(e.code_name(), "SLUICE_ERROR_INVALID_HANDLE");
  EXPECT_TRUE(contains(e.message(), "sluice_stream_synchronize")) << e.message();
  EXPECT_STREQ(e.message(), e.what());
}

TEST(Error, IsARuntimeError) {
  sluice::Error e(ErrorCode::out_of_range, 0, "boom");
  const std::runtime_error& base = e;
  EXPECT_STREQ(base.what(), "boom");
  EXPECT_THROW(throw e, std::runtime_error);
}

TEST(Error, CodeNamesMatchTheCApi) {
  for (std::uint32_t c = 1; c <= SLUICE_ERROR_COMPILE; ++c) {
    EXPECT_STREQ(sluice::code_name(static_cast<ErrorCode>(c)), sluice_error_code_name(c));
    EXPECT_TRUE(contains(sluice::code_name(static_cast<ErrorCode>(c)), "SLUICE_ERROR_"));
  }
  EXPECT_STREQ(sluice::code_name(ErrorCode::callback_failed), "SLUICE_ERROR_CALLBACK_FAILED");
  EXPECT_STREQ(sluice::code_name(static_cast<ErrorCode>(9999)), "SLUICE_ERROR_UNKNOWN");
}

TEST(Error, EnumMatchesMacros) {
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::panic), 1u);
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::invalid_handle), 4u);
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::unsupported), 6u);
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::callback_failed), 14u);
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::invalid_state), 18u);
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::end_of_data), 19u);
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::timeout), 20u);
  EXPECT_STREQ(sluice::code_name(ErrorCode::timeout), "SLUICE_ERROR_TIMEOUT");
  EXPECT_STREQ(sluice::code_name(ErrorCode::end_of_data), "SLUICE_ERROR_END_OF_DATA");
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::corrupt_data), 21u);
  EXPECT_STREQ(sluice::code_name(ErrorCode::corrupt_data), "SLUICE_ERROR_CORRUPT_DATA");
  EXPECT_EQ(static_cast<std::uint32_t>(ErrorCode::compile), 22u);
  EXPECT_STREQ(sluice::code_name(ErrorCode::compile), "SLUICE_ERROR_COMPILE");
}

TEST_F(SluiceTest, SameFailureThroughExceptionAndResult) {
  sluice::StreamRef none;
  EXPECT_SLUICE_THROW(none.synchronize(), ErrorCode::invalid_handle);

  sluice::Result<void> r = none.synchronize(std::nothrow);
  ASSERT_FALSE(r);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(contains(r.error().message(), "null")) << r.error().message();

  try {
    none.synchronize();
    FAIL() << "no throw";
  } catch (const sluice::Error& e) {
    EXPECT_STREQ(e.what(), r.error().what());
  }
}

TEST_F(SluiceTest, ErrorMessagesNameTheOperation) {
  auto s = sluice::Stream::create(dev_);
  auto b = sluice::Buffer::alloc(s, 16);
  char big[64] = {};
  auto r = sluice::copy_from_host(std::nothrow, s, b, 0, big, sizeof big);
  ASSERT_EQ(r.code(), ErrorCode::out_of_range);
  EXPECT_TRUE(contains(r.error().message(), "sluice_stream_copy_from_host")) << r.error().message();
}
