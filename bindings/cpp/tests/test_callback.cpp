// Host callbacks with C++ callables.
#include <memory>
#include <stdexcept>
#include <vector>

#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST_F(SluiceTest, CallbackRunsOnceAndIsDestroyedAfter) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> calls{0};
  auto token = std::make_shared<int>(5);
  std::weak_ptr<int> watch = token;
  s.host_callback([&calls, t = std::move(token)] { calls += *t; });
  EXPECT_EQ(token, nullptr);
  s.synchronize();
  EXPECT_EQ(calls.load(), 5);
  EXPECT_TRUE(watch.expired()) << "the callable is destroyed once it ran";
}

TEST_F(SluiceTest, CallbacksRunInStreamOrder) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) s.host_callback([&order, i] { order.push_back(i); });
  s.synchronize();
  ASSERT_EQ(order.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST_F(SluiceTest, MoveOnlyCallable) {
  sluice::Stream s = sluice::Stream::create(dev_);
  auto p = std::make_unique<int>(11);
  int got = 0;
  s.host_callback([&got, p = std::move(p)]() mutable { got = *p; });
  s.synchronize();
  EXPECT_EQ(got, 11);
}

TEST_F(SluiceTest, LvalueCallableIsCopied) {
  sluice::Stream s = sluice::Stream::create(dev_);
  auto token = std::make_shared<int>(2);
  std::atomic<int> sum{0};
  auto fn = [&sum, token] { sum += *token; };
  s.host_callback(fn);
  s.host_callback(fn);
  s.synchronize();
  EXPECT_EQ(sum.load(), 4);
  EXPECT_EQ(token.use_count(), 2) << "both heap copies are gone; `fn` keeps its own";
}

TEST_F(SluiceTest, NonZeroReturnFailsTheNextSync) {
  sluice::Stream s = sluice::Stream::create(dev_);
  s.host_callback([] { return 7; });
  try {
    s.synchronize();
    FAIL() << "expected CALLBACK_FAILED";
  } catch (const sluice::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::callback_failed);
    EXPECT_TRUE(contains(e.what(), "7")) << e.what();
  }
  s.synchronize();  // reported once
  s.host_callback([] { return 0; });
  s.synchronize();
}

TEST_F(SluiceTest, ExceptionBecomesCallbackFailed) {
  sluice::Stream s = sluice::Stream::create(dev_);
  bool after = false;
  s.host_callback([]() -> void { throw std::runtime_error("thrown on a driver thread"); });
  s.host_callback([&] { after = true; });  // the stream keeps going
  auto r = s.synchronize(std::nothrow);
  ASSERT_EQ(r.code(), ErrorCode::callback_failed);
  EXPECT_TRUE(contains(r.error().message(), std::to_string(sluice::kCallbackException)))
      << r.error().message();
  EXPECT_TRUE(after);
  EXPECT_TRUE(s.synchronize(std::nothrow));
}

TEST_F(SluiceTest, RejectedCallbackIsDestroyedNotRun) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::StreamRef stale = s;
  s.close();
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  bool ran = false;
  auto r = stale.host_callback(std::nothrow, [&ran, t = std::move(token)] { ran = true; });
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(watch.expired());
  EXPECT_FALSE(ran);
  EXPECT_SLUICE_THROW(stale.host_callback([] {}), ErrorCode::invalid_handle);
}

TEST_F(SluiceTest, CallbacksAsTrackedOps) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  int value = 0, seen = -1;
  a.host_callback(
      [&] {
        sleep_ms(80);
        value = 5;
      },
      {}, {x});
  b.host_callback([&] { seen = value; }, {x}, {});
  b.synchronize();
  EXPECT_EQ(seen, 5);

  sluice::SyncObject y = sluice::SyncObject::create();
  sluice::SyncRef gone = y;
  y.close();
  auto r = a.host_callback(std::nothrow, [] {}, {gone}, {});
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
}

// In SLUICE_ENGINE=sync mode the enqueue call itself synchronises, so a failing
// callback is reported by host_callback() although it was enqueued and ran. The
// callable must then be destroyed exactly once (ASan checks the rest).
TEST_F(SluiceTest, EnqueueReportsTheFailureInSyncMode) {
  sluice::Stream s = sluice::Stream::create(dev_);
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  std::atomic<int> runs{0};
  sluice::set_engine_mode(sluice::EngineMode::sync);
  auto r = s.host_callback(std::nothrow, [&runs, t = std::move(token)] {
    ++runs;
    return 3;
  });
  sluice::set_engine_mode(sluice::EngineMode::async);
  EXPECT_EQ(r.code(), ErrorCode::callback_failed) << (r ? "" : r.error().message());
  EXPECT_EQ(runs.load(), 1);
  s.synchronize();
  EXPECT_TRUE(watch.expired());
}
