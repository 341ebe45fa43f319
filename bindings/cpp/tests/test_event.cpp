// sluice::Event / EventRef and stream waits on the host backend.
#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST_F(SluiceTest, RecordQuerySynchronize) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<bool> release{false};
  s.host_callback([&] {
    while (!release.load()) sleep_ms(1);
  });
  sluice::Event e = s.record_event();
  EXPECT_FALSE(e.query());
  release = true;
  e.synchronize();
  EXPECT_TRUE(e.query());
}

TEST_F(SluiceTest, SequenceNumbersIncrease) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Event a = s.record_event();
  sluice::Event b = s.record_event();
  sluice::EventSequence sa = a.sequence(), sb = b.sequence();
  EXPECT_EQ(sa.stream_id, s.stats().id);
  EXPECT_EQ(sb.stream_id, sa.stream_id);
  EXPECT_GT(sb.seq, sa.seq);
}

TEST_F(SluiceTest, CrossStreamWaitOrdersWork) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  int value = 0;  // written on a's worker, read on b's: ordered by the event
  int seen = -1;
  a.host_callback([&] {
    sleep_ms(100);
    value = 42;
  });
  sluice::Event ev = a.record_event();
  const auto waits0 = b.stats().waits;
  b.wait(ev);  // the host does not block here
  EXPECT_EQ(b.stats().waits, waits0 + 1);
  b.host_callback([&] { seen = value; });
  b.synchronize();
  EXPECT_EQ(seen, 42);
}

TEST_F(SluiceTest, ElapsedTime) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Event start = s.record_event(sluice::EventFlags::timing);
  s.host_callback([] { sleep_ms(20); });
  sluice::Event end = s.record_event(sluice::EventFlags::timing);
  end.synchronize();
  float ms = sluice::elapsed_ms(start, end);
  EXPECT_GE(ms, 15.0f);

  sluice::Event plain = s.record_event();
  plain.synchronize();
  EXPECT_SLUICE_THROW(sluice::elapsed_ms(start, plain), ErrorCode::invalid_argument);
  EXPECT_EQ(sluice::elapsed_ms(std::nothrow, start, plain).code(), ErrorCode::invalid_argument);
}

TEST_F(SluiceTest, EventOutlivesItsStream) {
  sluice::Stream s = sluice::Stream::create(dev_);
  s.host_callback([] { sleep_ms(10); });
  sluice::Event e = s.record_event();
  sluice::EventRef view = e;
  s.close();
  view.synchronize();
  EXPECT_TRUE(e.query());
}

TEST_F(SluiceTest, StaleEvent) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Event e = s.record_event();
  sluice::EventRef view = e;
  e.close();
  EXPECT_SLUICE_THROW(view.query(), ErrorCode::invalid_handle);
  EXPECT_EQ(s.wait(std::nothrow, view).code(), ErrorCode::invalid_handle);
}

TEST_F(SluiceTest, HandleTypesAreNotInterchangeable) {
  // A stream handle's bits passed as an event are rejected, not misread.
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice_event_t forged{s.raw().bits};
  auto r = sluice::EventRef(forged).query(std::nothrow);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
}
