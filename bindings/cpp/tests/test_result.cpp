// sluice::Result<T>: values, errors, move-only payloads.
#include <memory>
#include <string>
#include <type_traits>

#include "sluice_test.hpp"

using sluice::Error;
using sluice::ErrorCode;
using sluice::Result;

namespace {
Result<int> good() { return 7; }
Result<int> bad() { return Error(ErrorCode::not_found, 0, "no such thing"); }
}  // namespace

TEST(Result, HoldsAValue) {
  Result<int> r = good();
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 7);
  EXPECT_EQ(*r, 7);
  EXPECT_EQ(r.code(), ErrorCode::ok);
  EXPECT_EQ(r.value_or(3), 7);
}

TEST(Result, HoldsAnError) {
  Result<int> r = bad();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.code(), ErrorCode::not_found);
  EXPECT_STREQ(r.error().message(), "no such thing");
  EXPECT_EQ(r.value_or(3), 3);
  try {
    (void)r.value();
    FAIL() << "value() on an error must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::not_found);
  }
}

TEST(Result, MoveOnlyPayload) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r.value(), 5);
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(Result, Arrow) {
  Result<std::string> r = std::string("abc");
  EXPECT_EQ(r->size(), 3u);
}

TEST(Result, Void) {
  Result<void> ok;
  EXPECT_TRUE(ok);
  ok.value();  // no throw
  Result<void> err = Error(ErrorCode::invalid_state, 0, "nope");
  EXPECT_FALSE(err);
  EXPECT_EQ(err.code(), ErrorCode::invalid_state);
  EXPECT_THROW(err.value(), Error);
}

TEST(Result, NodiscardTypes) {
  // Result is [[nodiscard]]; this only checks that the API returns Result by value.
  static_assert(std::is_same<decltype(sluice::StreamRef().synchronize(std::nothrow)),
                             Result<void>>::value,
                "nothrow overloads return Result");
  static_assert(std::is_same<decltype(sluice::Stream::create(std::nothrow, sluice::DeviceRef())),
                             Result<sluice::Stream>>::value,
                "nothrow create returns Result<Stream>");
}

TEST_F(SluiceTest, ResultOfOwningWrapper) {
  Result<sluice::Stream> r = sluice::Stream::create(std::nothrow, dev_);
  ASSERT_TRUE(r) << r.error().message();
  sluice::Stream s = std::move(r).value();
  EXPECT_TRUE(s);
  EXPECT_TRUE(s.synchronize(std::nothrow));
}
