// Sync objects, SyncList and the Op scope: cross-stream ordering with no host
// sync, checked through data and the streams' counters.
#include <vector>

#include "sluice_test.hpp"

using sluice::ErrorCode;

TEST_F(SluiceTest, SyncObjectInfo) {
  sluice::SyncObject x = sluice::SyncObject::create();
  sluice::SyncInfo i = x.info();
  EXPECT_NE(i.id, 0u);
  EXPECT_EQ(i.reader_count, 0u);
  EXPECT_FALSE(i.has_writer);
  EXPECT_NE(sluice::SyncObject::create().info().id, i.id);
  x.wait_read();  // nothing recorded: returns at once
  x.wait_write();
}

TEST_F(SluiceTest, OpScopeOrdersProducerAndConsumerAcrossStreams) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();  // stands for `value`
  int value = 0;
  int seen = -1;
  const sluice::StreamStats a0 = a.stats(), b0 = b.stats();

  {  // producer on a: writes x
    sluice::Op op(a, {}, {x});
    EXPECT_TRUE(op.active());
    EXPECT_EQ(op.stream(), a.ref());
    a.host_callback([&] {
      sleep_ms(100);
      value = 42;
    });
  }
  EXPECT_EQ(a.stats().waits, a0.waits) << "a had nothing to wait for";
  EXPECT_EQ(x.info().has_writer, true);

  {  // consumer on b: reads x; b waits on a's op_end event, on the device
    sluice::Op op(b, {x}, {});
    b.host_callback([&] { seen = value; });
  }
  EXPECT_EQ(b.stats().waits, b0.waits + 1);
  EXPECT_EQ(x.info().reader_count, 1u);

  {  // a second read on b: b's reader entry already follows the writer
    sluice::Op op(b, {x}, {});
  }
  EXPECT_EQ(b.stats().waits, b0.waits + 1);
  b.synchronize();
  EXPECT_EQ(seen, 42);

  {  // a writes again: waits for b's read (write-after-read), readers cleared
    sluice::Op op(a, {}, {x});
    a.host_callback([&] { value = 43; });
  }
  a.synchronize();
  EXPECT_EQ(value, 43);
  sluice::SyncInfo after = x.info();
  EXPECT_TRUE(after.has_writer);
  EXPECT_EQ(after.reader_count, 0u);

  {  // same-stream order is free: no wait
    const auto waits = a.stats().waits;
    sluice::Op op(a, {x}, {x});
    op.end();
    EXPECT_EQ(a.stats().waits, waits);
  }
}

TEST_F(SluiceTest, WriteAfterReadWaitsForTheReader) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  std::vector<int> data{1, 2, 3};
  int sum = 0;
  {  // a slow reader on b
    sluice::Op op(b, {x}, {});
    b.host_callback([&] {
      sleep_ms(100);
      for (int v : data) sum += v;
    });
  }
  const auto a_waits = a.stats().waits;
  {  // a writer on a must not overwrite before the read finished
    sluice::Op op(a, {}, {x});
    a.host_callback([&] { data.assign(3, 100); });
  }
  EXPECT_EQ(a.stats().waits, a_waits + 1);
  a.synchronize();
  b.synchronize();
  EXPECT_EQ(sum, 6);
  EXPECT_EQ(data[0], 100);
}

TEST_F(SluiceTest, HostWaitsOnSyncObjects) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  std::atomic<int> value{0};
  {
    sluice::Op op(a, {}, {x});
    a.host_callback([&] {
      sleep_ms(50);
      value = 7;
    });
  }
  x.wait_read();  // the host waits for the writer, no stream sync
  EXPECT_EQ(value.load(), 7);
  x.wait_write();
}

TEST_F(SluiceTest, OpEndReportsErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  sluice::Op op(s, {x}, {});
  op.end();
  EXPECT_FALSE(op.active());
  EXPECT_SLUICE_THROW(op.end(), ErrorCode::invalid_handle);
  auto r = op.end(std::nothrow);
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(contains(r.error().message(), "sluice_op_end")) << r.error().message();
}

TEST_F(SluiceTest, OpBeginErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  sluice::SyncRef stale = x;
  x.close();

  auto r = sluice::Op::begin(std::nothrow, s, {stale}, {});
  EXPECT_EQ(r.code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(contains(r.error().message(), "reads[0]")) << r.error().message();
  EXPECT_SLUICE_THROW(sluice::Op(s, {}, {stale}), ErrorCode::invalid_handle);

  sluice::SyncObject y = sluice::SyncObject::create();
  EXPECT_EQ(sluice::Op::begin(std::nothrow, sluice::StreamRef(), {}, {y}).code(),
            ErrorCode::invalid_handle);
}

TEST_F(SluiceTest, OpKeepsWorkingWhenItsStreamHandleIsDestroyed) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  sluice::Op op(s, {}, {x});
  s.close();
  op.end();  // the op holds the stream itself
  EXPECT_TRUE(x.info().has_writer);
  x.wait_write();
}

TEST_F(SluiceTest, SyncListsOfEverySize) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::vector<sluice::SyncObject> objs;
  for (int i = 0; i < 12; ++i) objs.push_back(sluice::SyncObject::create());

  sluice::SyncList empty;
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.data(), nullptr);

  sluice::SyncList small{objs[0], objs[1]};
  EXPECT_EQ(small.size(), 2u);
  EXPECT_EQ(small.data()[1].bits, objs[1].raw().bits);

  sluice::SyncList big(objs);  // 12 > 8 inline slots
  ASSERT_EQ(big.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(big.data()[i].bits, objs[i].raw().bits);

  sluice::SyncList copy = big;
  sluice::SyncList moved = std::move(big);
  EXPECT_EQ(copy.size(), 12u);
  EXPECT_EQ(moved.size(), 12u);
  EXPECT_EQ(moved.data()[11].bits, objs[11].raw().bits);
  copy = small;
  EXPECT_EQ(copy.size(), 2u);

  std::vector<sluice::SyncRef> refs(objs.begin(), objs.begin() + 9);
  { sluice::Op op(s, refs, moved); }
  for (const auto& o : objs) EXPECT_TRUE(o.info().has_writer);
}

TEST_F(SluiceTest, BufferSyncObjects) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::Buffer buf = sluice::Buffer::alloc(a, 64);
  sluice::SyncObject bs = buf.sync();
  EXPECT_EQ(bs.info().id, buf.sync().info().id) << "one sync object per buffer";
  std::vector<std::uint8_t> v(64, 3);
  sluice::copy_from_host(a, buf, 0, v);  // a library op: publishes a writer
  EXPECT_TRUE(bs.info().has_writer);
  const auto waits = b.stats().waits;
  { sluice::Op op(b, {bs}, {}); }  // a foreign reader on b orders after the copy
  EXPECT_LE(b.stats().waits, waits + 1);
  bs.wait_write();
}

// After b's host sync, b's reader entry is known complete, and so is a's writer
// that it followed: the next read on b needs no wait at all.
TEST_F(SluiceTest, NoRedundantWaitAfterHostSync) {
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::SyncObject x = sluice::SyncObject::create();
  { sluice::Op op(a, {}, {x}); }
  { sluice::Op op(b, {x}, {}); }
  const auto waits = b.stats().waits;
  b.synchronize();
  { sluice::Op op(b, {x}, {}); }
  EXPECT_EQ(b.stats().waits, waits);
}
