// sluice::Prefetcher: push, zero-copy acquire, pull-mode fill, next (leases) and
// next_into, end of data, timeouts, producer errors, destroy at any moment.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "sluice_test.hpp"

using sluice::Batch;
using sluice::BatchInfo;
using sluice::ByteView;
using sluice::ErrorCode;
using sluice::Fill;
using sluice::FillResult;
using sluice::Prefetcher;
using sluice::PrefetcherConfig;
using sluice::PrefetcherRef;
using std::chrono::milliseconds;

namespace {

// The content of batch `seq`, segment `seg`: a length that varies from 0 to the
// capacity, and bytes that differ from batch to batch.
std::size_t seg_len(std::uint64_t seq, std::size_t seg, std::size_t cap) {
  return static_cast<std::size_t>((seq * 37u + seg * 11u + 5u) % (cap + 1));
}

std::byte pattern_byte(std::uint64_t seq, std::size_t seg, std::size_t k) {
  std::uint64_t x = seq * 0x9e3779b97f4a7c15ull + seg * 0x632be59bd9b4e019ull + k * 0x94d049bbull;
  return static_cast<std::byte>((x >> 29) & 0xffu);
}

void write_pattern(std::uint64_t seq, std::size_t seg, std::byte* out, std::size_t len) {
  for (std::size_t k = 0; k < len; ++k) out[k] = pattern_byte(seq, seg, k);
}

// FNV-1a over bytes.
std::uint64_t checksum(const std::byte* p, std::size_t len) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t k = 0; k < len; ++k) {
    h ^= static_cast<std::uint64_t>(p[k]);
    h *= 0x100000001b3ull;
  }
  return h;
}

std::uint64_t expected_checksum(std::uint64_t seq, std::size_t seg, std::size_t len) {
  std::vector<std::byte> v(len);
  write_pattern(seq, seg, v.data(), len);
  return checksum(v.data(), len);
}

// A pull-mode fill of batch fill.seq() with the pattern.
FillResult fill_pattern(Fill& f) {
  for (std::size_t i = 0; i < f.segments(); ++i) {
    std::size_t n = seg_len(f.seq(), i, f.capacity(i));
    write_pattern(f.seq(), i, f.segment(i).data(), n);
    if (!f.set_len(std::nothrow, i, n)) return FillResult::failed;
  }
  return FillResult::ready;
}

// Reads back a batch that next_into() copied into `dst` and checks it against the
// pattern of its sequence number.
void expect_pattern(sluice::StreamRef s, const BatchInfo& info,
                    const std::vector<sluice::BufferRef>& dst) {
  for (std::size_t i = 0; i < info.segments(); ++i) {
    std::vector<std::byte> host(info.len(i));
    if (!host.empty()) sluice::copy_to_host(s, host, dst[i], 0);
    ASSERT_EQ(checksum(host.data(), host.size()),
              expected_checksum(info.seq(), i, info.len(i)))
        << "batch " << info.seq() << " segment " << i;
  }
}

std::vector<std::byte> bytes(std::size_t n, std::uint8_t value) {
  return std::vector<std::byte>(n, static_cast<std::byte>(value));
}

constexpr std::uint64_t kBatches = 10000;

// Avoids -Wself-move while still moving an object into itself.
template <class T>
T& same(T& t) {
  return t;
}

}  // namespace

// --- order and content over many batches, at every depth from 1 to 8 ---------------

class PrefetcherDepth : public SluiceTest, public ::testing::WithParamInterface<std::uint32_t> {};

// Push mode from a producer thread; the consumer copies each batch into its own
// device buffers (next_into) and reads them back.
TEST_P(PrefetcherDepth, PushNextIntoKeepsOrderAndContent) {
  const std::uint32_t depth = GetParam();
  const std::vector<std::size_t> caps{512, 64};
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {depth, caps});
  sluice::Buffer d0 = sluice::Buffer::alloc(s, caps[0]);
  sluice::Buffer d1 = sluice::Buffer::alloc(s, caps[1]);

  std::thread producer([in = pf.ref(), &caps] {
    std::vector<std::byte> a(caps[0]), b(caps[1]);
    for (std::uint64_t i = 0; i < kBatches; ++i) {
      std::size_t la = seg_len(i, 0, caps[0]), lb = seg_len(i, 1, caps[1]);
      write_pattern(i, 0, a.data(), la);
      write_pattern(i, 1, b.data(), lb);
      sluice::Result<std::uint64_t> seq =
          in.push(std::nothrow, {ByteView(a.data(), la), ByteView(b.data(), lb)});
      if (!seq || *seq != i) {
        ADD_FAILURE() << "push " << i << ": " << (seq ? "seq " + std::to_string(*seq)
                                                      : std::string(seq.error().what()));
        break;
      }
    }
    EXPECT_TRUE(in.close_input(std::nothrow));
  });

  const std::vector<sluice::BufferRef> dst{d0, d1};
  std::uint64_t expect = 0;
  std::uint64_t bytes_in = 0;
  while (std::optional<BatchInfo> info = pf.next_into(s, dst)) {
    ASSERT_EQ(info->seq(), expect);
    ASSERT_EQ(info->segments(), 2u);
    ASSERT_EQ(info->len(0), seg_len(expect, 0, caps[0]));
    ASSERT_EQ(info->len(1), seg_len(expect, 1, caps[1]));
    ASSERT_NO_FATAL_FAILURE(expect_pattern(s, *info, dst));
    bytes_in += info->len(0) + info->len(1);
    ++expect;
  }
  producer.join();
  EXPECT_EQ(expect, kBatches);
  EXPECT_FALSE(pf.next_into(s, dst)) << "end of data again";

  sluice::PrefetcherStats st = pf.stats();
  EXPECT_EQ(st.batches, kBatches);
  EXPECT_EQ(st.bytes, bytes_in);
  EXPECT_EQ(st.pinned_bytes, std::uint64_t{depth} * (caps[0] + caps[1]));
}

// Pull mode on 1 to 4 producer threads; the consumer leases each batch (next) and
// reads its device memory in a host callback ordered by the batch's sync objects,
// holding up to depth - 1 leases at once.
TEST_P(PrefetcherDepth, PullModeLeasesKeepOrderAndContent) {
  const std::uint32_t depth = GetParam();
  const std::uint32_t threads = 1 + depth % 4;
  const std::vector<std::size_t> caps{256, 16, 1};
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<std::uint64_t> calls{0};
  Prefetcher pf = Prefetcher::create(
      dev_, {depth, caps,
             [&calls](Fill& f) {
               ++calls;
               return f.seq() >= kBatches ? FillResult::end : fill_pattern(f);
             },
             threads});

  std::vector<std::uint64_t> sums(kBatches * caps.size(), 0);
  std::vector<std::size_t> lens(kBatches * caps.size(), ~std::size_t{0});
  std::deque<Batch> window;
  const std::size_t max_window = depth - 1 < 3 ? depth - 1 : 3;
  std::uint64_t expect = 0;
  while (std::optional<Batch> b = pf.next(s)) {
    ASSERT_TRUE(*b);
    ASSERT_EQ(b->seq(), expect);
    ASSERT_EQ(b->segments(), caps.size());
    for (std::size_t i = 0; i < caps.size(); ++i) {
      ASSERT_NE(b->device_ptr(i), 0u);
      ASSERT_TRUE(b->sync(i));
    }
    // On the host backend device memory is host memory: read it in stream order,
    // after the batch's H2D copy, as a kernel naming b->syncs() would.
    std::uint64_t seq = b->seq();
    std::vector<std::pair<std::uint64_t, std::size_t>> segs;
    for (std::size_t i = 0; i < caps.size(); ++i) segs.emplace_back(b->device_ptr(i), b->len(i));
    s.host_callback(
        [&sums, &lens, seq, segs] {
          for (std::size_t i = 0; i < segs.size(); ++i) {
            const auto* p = reinterpret_cast<const std::byte*>(segs[i].first);
            sums[seq * segs.size() + i] = checksum(p, segs[i].second);
            lens[seq * segs.size() + i] = segs[i].second;
          }
        },
        b->syncs(), {});
    if (seq % 97 == 0) {  // and, now and then, through the copy API
      for (std::size_t i = 0; i < caps.size(); ++i) {
        std::vector<std::byte> host(b->len(i));
        if (!host.empty()) sluice::copy_to_host(s, host, b->buffer(i), 0);
        ASSERT_EQ(checksum(host.data(), host.size()), expected_checksum(seq, i, b->len(i)));
      }
    }
    window.push_back(std::move(*b));
    if (window.size() > max_window) window.pop_front();  // released in stream order
    ++expect;
  }
  window.clear();
  s.synchronize();
  ASSERT_EQ(expect, kBatches);
  for (std::uint64_t q = 0; q < kBatches; ++q) {
    for (std::size_t i = 0; i < caps.size(); ++i) {
      std::size_t n = seg_len(q, i, caps[i]);
      ASSERT_EQ(lens[q * caps.size() + i], n) << "batch " << q << " segment " << i;
      ASSERT_EQ(sums[q * caps.size() + i], expected_checksum(q, i, n))
          << "batch " << q << " segment " << i;
    }
  }
  EXPECT_FALSE(pf.next(s)) << "end of data again";
  EXPECT_GE(calls.load(), kBatches + 1);
  EXPECT_EQ(pf.stats().batches, kBatches);
}

INSTANTIATE_TEST_SUITE_P(Depths1To8, PrefetcherDepth, ::testing::Range(1u, 9u),
                         [](const ::testing::TestParamInfo<std::uint32_t>& p) {
                           return "depth" + std::to_string(p.param);
                         });

// --- leases -------------------------------------------------------------------------

TEST_F(SluiceTest, BatchIsReleasedAtScopeExit) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {2, {16}});
  std::vector<std::byte> x = bytes(16, 1);
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}), 0u);
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}), 1u);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}, milliseconds(30)), ErrorCode::timeout);
  std::atomic<bool> pushed{false};
  std::uint64_t blocked_seq = 0;
  std::thread producer;
  {
    std::optional<Batch> b = pf.next(s);
    ASSERT_TRUE(b && *b);
    EXPECT_EQ(b->seq(), 0u);
    EXPECT_EQ(b->len(0), 16u);
    // Leased is not free: a push times out, and one without a timeout blocks.
    EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}, milliseconds(30)), ErrorCode::timeout);
    producer = std::thread([&, in = pf.ref()] {
      blocked_seq = in.push({sluice::as_bytes(x)});
      pushed = true;
    });
    sleep_ms(50);
    EXPECT_FALSE(pushed.load()) << "the push waits for the leased slot";
  }  // released here, in stream order: the blocked push goes through
  producer.join();
  EXPECT_TRUE(pushed.load());
  EXPECT_EQ(blocked_seq, 2u);
  EXPECT_EQ(pf.next(s)->seq(), 1u);  // and released at once (a temporary)
  EXPECT_EQ(pf.next(s)->seq(), 2u);

  // close() releases early and reports; the accessors still describe the batch.
  const auto ten_s = std::chrono::seconds(10);
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}), 3u);
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}), 4u);
  std::optional<Batch> b1 = pf.next(s);
  ASSERT_TRUE(b1);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}, milliseconds(0)), ErrorCode::timeout);
  b1->close();
  EXPECT_FALSE(*b1);
  EXPECT_EQ(b1->seq(), 3u);
  EXPECT_TRUE(b1->close(std::nothrow)) << "closing an empty Batch does nothing";
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}, ten_s), 5u);

  // Move assignment releases the lease it replaces; so does assigning an empty Batch.
  Batch a = std::move(*pf.next(s));
  EXPECT_EQ(a.seq(), 4u);
  Batch c = std::move(*pf.next(s));
  EXPECT_EQ(c.seq(), 5u);
  a = std::move(c);
  EXPECT_FALSE(c);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(a.seq(), 5u);
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}, ten_s), 6u);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}, milliseconds(20)), ErrorCode::timeout);
  a = Batch();
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}, ten_s), 7u);

  // release() hands the C handle over without releasing; adopt() takes it back.
  std::optional<Batch> b4 = pf.next(s);
  ASSERT_TRUE(b4);
  sluice_batch_view_t v = b4->view();
  sluice_batch_t raw = b4->release();
  EXPECT_FALSE(*b4);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}, milliseconds(20)), ErrorCode::timeout);
  {
    Batch back = Batch::adopt(raw, v);
    EXPECT_EQ(back.seq(), 6u);
  }
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}, ten_s), 8u);
}

TEST_F(SluiceTest, BatchSyncsOrderOpScopesAndCopies) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {2, {64, 8}});
  std::vector<std::byte> a(64), b(8);
  write_pattern(0, 0, a.data(), a.size());
  write_pattern(0, 1, b.data(), b.size());
  pf.push({sluice::as_bytes(a), sluice::as_bytes(b)});
  std::optional<Batch> batch = pf.next(s);
  ASSERT_TRUE(batch);
  // An Op scope over the batch's syncs (foreign work would run on s.native_handle()).
  { sluice::Op op(s, batch->syncs(), {}); }
  std::uint64_t seen = 0;
  s.host_callback(
      [&seen, p = batch->device_ptr(0), n = batch->len(0)] {
        seen = checksum(reinterpret_cast<const std::byte*>(p), n);
      },
      {batch->sync(0)}, {});
  s.synchronize();
  EXPECT_EQ(seen, checksum(a.data(), a.size()));
  // A tracked copy from the batch's buffer, then a read-back, with the copy API.
  sluice::Buffer mine = sluice::Buffer::alloc(s, 64);
  sluice::copy(s, mine, 0, batch->buffer(0), 0, batch->len(0));
  EXPECT_EQ(sluice::read_vector<std::byte>(s, mine, 0, 64), a);
  EXPECT_EQ(sluice::read_vector<std::byte>(s, batch->buffer(1), 0, 8), b);
  EXPECT_EQ(batch->buffer(0).size(), 64u);
  EXPECT_EQ(batch->buffer(0).info().device_ptr, batch->device_ptr(0));
  EXPECT_FALSE(batch->buffer(2));
  EXPECT_FALSE(batch->sync(2));
  EXPECT_EQ(batch->device_ptr(2), 0u);
  EXPECT_EQ(batch->len(2), 0u);
  sluice::SyncInfo si = batch->sync(0).info();
  EXPECT_NE(si.id, 0u) << "a live sync object of the prefetcher's";
}

// --- back-pressure, timeouts ---------------------------------------------------------

TEST_F(SluiceTest, BackPressureTimesOut) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {3, {8}});
  std::vector<std::byte> x = bytes(8, 7);
  for (std::uint64_t i = 0; i < 3; ++i) EXPECT_EQ(pf.push({sluice::as_bytes(x)}), i);

  auto t0 = std::chrono::steady_clock::now();
  sluice::Result<std::uint64_t> r = pf.push(std::nothrow, {sluice::as_bytes(x)}, milliseconds(100));
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.code(), ErrorCode::timeout);
  EXPECT_TRUE(contains(r.error().message(), "timed out")) << r.error().message();
  EXPECT_GE(waited, milliseconds(90));
  EXPECT_LT(waited, std::chrono::seconds(10));
  EXPECT_SLUICE_THROW(pf.acquire(milliseconds(0)), ErrorCode::timeout);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}, milliseconds(-5)), ErrorCode::timeout);

  // The consumer side times out on an empty prefetcher.
  Prefetcher empty = Prefetcher::create(dev_, {1, {8}});
  sluice::Buffer d = sluice::Buffer::alloc(s, 8);
  EXPECT_EQ(empty.next(std::nothrow, s, milliseconds(30)).code(), ErrorCode::timeout);
  EXPECT_SLUICE_THROW(empty.next_into(s, {d}, milliseconds(30)), ErrorCode::timeout);
  EXPECT_GT(empty.stats().consumer_wait_ns, 0u);

  // A timeout changed nothing: the three batches come out, then a push fits.
  for (std::uint64_t i = 0; i < 3; ++i) {
    std::optional<BatchInfo> info = pf.next_into(s, {d}, milliseconds(1000));
    ASSERT_TRUE(info);
    EXPECT_EQ(info->seq(), i);
  }
  EXPECT_EQ(pf.push({sluice::as_bytes(x)}, milliseconds(5000)), 3u);
}

TEST(Prefetcher, TimeoutConversion) {
  using sluice::detail::timeout_ms;
  EXPECT_EQ(timeout_ms(milliseconds(0)), 0u);
  EXPECT_EQ(timeout_ms(milliseconds(-1)), 0u);
  EXPECT_EQ(timeout_ms(milliseconds(250)), 250u);
  EXPECT_EQ(timeout_ms(std::chrono::seconds(2)), 2000u);
  EXPECT_EQ(timeout_ms(sluice::kWaitForever), static_cast<std::uint32_t>(SLUICE_WAIT_FOREVER));
  EXPECT_EQ(timeout_ms(std::chrono::hours(24 * 60)), static_cast<std::uint32_t>(SLUICE_WAIT_FOREVER));
  EXPECT_EQ(timeout_ms(milliseconds(0xfffffffell)), 0xfffffffeu);
}

// --- end of data -----------------------------------------------------------------------

TEST_F(SluiceTest, CloseInputEarlyThenEndOfData) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {8, {32}});
  for (std::uint64_t i = 0; i < 3; ++i) {
    std::vector<std::byte> x(seg_len(i, 0, 32));
    write_pattern(i, 0, x.data(), x.size());
    EXPECT_EQ(pf.push({sluice::as_bytes(x)}), i);
  }
  pf.close_input();
  pf.close_input();  // again: nothing more happens
  std::vector<std::byte> more = bytes(4, 9);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(more)}), ErrorCode::invalid_state);
  EXPECT_EQ(pf.acquire(std::nothrow).code(), ErrorCode::invalid_state);

  sluice::Buffer d = sluice::Buffer::alloc(s, 32);
  std::optional<BatchInfo> first = pf.next_into(s, {d});
  ASSERT_TRUE(first);
  EXPECT_EQ(first->seq(), 0u);
  ASSERT_NO_FATAL_FAILURE(expect_pattern(s, *first, {d}));
  for (std::uint64_t i = 1; i < 3; ++i) {
    std::optional<Batch> b = pf.next(s, milliseconds(1000));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->seq(), i);
  }
  // End of data: an empty optional, from every form, every time, without waiting.
  EXPECT_FALSE(pf.next(s));
  EXPECT_FALSE(pf.next(s, milliseconds(0)));
  sluice::Result<std::optional<Batch>> r = pf.next(std::nothrow, s);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE(pf.next_into(s, {d}));
  EXPECT_EQ(pf.stats().batches, 3u);
}

TEST_F(SluiceTest, CloseInputWakesABlockedConsumer) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {2, {8}});
  std::atomic<bool> done{false};
  std::optional<sluice::Result<std::optional<Batch>>> got;
  std::thread consumer([&] {
    got.emplace(PrefetcherRef(pf.raw()).next(std::nothrow, s));
    done = true;
  });
  sleep_ms(50);
  EXPECT_FALSE(done.load());
  pf.close_input();
  consumer.join();
  ASSERT_TRUE(got && got->ok());
  EXPECT_FALSE((*got)->has_value());
}

// --- producer errors --------------------------------------------------------------------

TEST_F(SluiceTest, FillErrorIsDeliveredAtItsSeq) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Buffer d0 = sluice::Buffer::alloc(s, 64);
  constexpr std::uint64_t kEnd = 12;
  for (bool leases : {true, false}) {
    SCOPED_TRACE(leases ? "next" : "next_into");
    Prefetcher pf = Prefetcher::create(dev_, {3, {64}, [](Fill& f) -> FillResult {
                                                if (f.seq() == 5) return FillResult::failed;
                                                if (f.seq() == 8) throw std::runtime_error("bad");
                                                if (f.seq() == 10) {
                                                  // Over the capacity: refused here.
                                                  if (f.set_len(std::nothrow, 0, 65)) {
                                                    return FillResult::ready;
                                                  }
                                                  return static_cast<FillResult>(42);
                                                }
                                                if (f.seq() >= kEnd) return FillResult::end;
                                                return fill_pattern(f);
                                              }});
    for (std::uint64_t seq = 0; seq < kEnd; ++seq) {
      std::uint64_t failed = ~std::uint64_t{0};
      std::optional<std::uint64_t> got;
      sluice::Result<void> err;
      if (leases) {
        sluice::Result<std::optional<Batch>> r = pf.next(std::nothrow, s, sluice::kWaitForever, &failed);
        if (r) {
          ASSERT_TRUE(r->has_value());
          got = (*r)->seq();
        } else {
          err = r.error();
        }
      } else {
        sluice::Result<std::optional<BatchInfo>> r =
            pf.next_into(std::nothrow, s, {d0}, sluice::kWaitForever, &failed);
        if (r) {
          ASSERT_TRUE(r->has_value());
          got = (*r)->seq();
          ASSERT_NO_FATAL_FAILURE(expect_pattern(s, **r, {d0}));
        } else {
          err = r.error();
        }
      }
      if (seq == 5 || seq == 8 || seq == 10) {
        ASSERT_FALSE(got) << "batch " << seq << " should have failed";
        EXPECT_EQ(err.code(), ErrorCode::callback_failed) << err.error().what();
        EXPECT_EQ(failed, seq);
        std::string rc = seq == 5 ? "returned 2" : seq == 8 ? "returned -1" : "returned 42";
        EXPECT_TRUE(contains(err.error().what(), rc)) << err.error().what();
        EXPECT_TRUE(contains(err.error().what(), "batch " + std::to_string(seq)))
            << err.error().what();
      } else {
        ASSERT_TRUE(got) << "batch " << seq << ": " << err.error().what();
        EXPECT_EQ(*got, seq);
        EXPECT_EQ(failed, ~std::uint64_t{0}) << "untouched on success";
      }
    }
    // The throwing form: end of data is not an exception.
    EXPECT_FALSE(pf.next(s));
    EXPECT_EQ(pf.stats().batches, kEnd - 3);
  }
}

TEST_F(SluiceTest, FillErrorThroughTheThrowingNext) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(
      dev_, {2, {8}, [](Fill& f) { return f.seq() == 0 ? FillResult::failed : FillResult::end; }});
  std::uint64_t failed = 99;
  EXPECT_SLUICE_THROW(pf.next(s, sluice::kWaitForever, &failed), ErrorCode::callback_failed);
  EXPECT_EQ(failed, 0u);
  EXPECT_FALSE(pf.next(s));
}

// --- several producers ---------------------------------------------------------------------

TEST_F(SluiceTest, SeveralThreadsPush) {
  constexpr std::uint64_t kThreads = 4, kEach = 2500;
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {4, {16, 128}});
  // Segment 0: {thread, counter}; segment 1: the pattern of thread * kEach + counter.
  std::vector<std::vector<std::uint64_t>> pushed(kThreads);
  std::vector<std::thread> producers;
  for (std::uint64_t t = 0; t < kThreads; ++t) {
    producers.emplace_back([in = pf.ref(), t, &pushed] {
      std::vector<std::byte> body(128);
      for (std::uint64_t k = 0; k < kEach; ++k) {
        std::uint64_t head[2] = {t, k};
        std::uint64_t id = t * kEach + k;
        std::size_t n = seg_len(id, 1, 128);
        write_pattern(id, 1, body.data(), n);
        sluice::Result<std::uint64_t> seq =
            in.push(std::nothrow, {sluice::as_bytes(head), ByteView(body.data(), n)});
        if (!seq) {
          ADD_FAILURE() << seq.error().what();
          return;
        }
        pushed[t].push_back(*seq);
      }
    });
  }
  std::thread closer([&producers, in = pf.ref()] {
    for (std::thread& p : producers) p.join();
    EXPECT_TRUE(in.close_input(std::nothrow));
  });

  sluice::Buffer d0 = sluice::Buffer::alloc(s, 16);
  sluice::Buffer d1 = sluice::Buffer::alloc(s, 128);
  std::vector<std::uint64_t> next_k(kThreads, 0);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> by_seq;  // (thread, counter)
  std::uint64_t expect = 0;
  while (std::optional<BatchInfo> info = pf.next_into(s, {d0, d1})) {
    ASSERT_EQ(info->seq(), expect++);
    ASSERT_EQ(info->len(0), 16u);
    std::uint64_t head[2] = {};
    sluice::copy_to_host(s, head, d0, 0);
    ASSERT_LT(head[0], kThreads);
    ASSERT_EQ(head[1], next_k[head[0]]++) << "a thread's batches arrive in its push order";
    std::uint64_t id = head[0] * kEach + head[1];
    std::size_t n = seg_len(id, 1, 128);
    ASSERT_EQ(info->len(1), n);
    std::vector<std::byte> body(n);
    if (n) sluice::copy_to_host(s, body, d1, 0);
    ASSERT_EQ(checksum(body.data(), n), expected_checksum(id, 1, n)) << "batch " << info->seq();
    by_seq.emplace_back(head[0], head[1]);
  }
  closer.join();
  ASSERT_EQ(expect, kThreads * kEach);
  for (std::uint64_t t = 0; t < kThreads; ++t) {
    ASSERT_EQ(pushed[t].size(), kEach);
    for (std::uint64_t k = 0; k < kEach; ++k) {
      std::uint64_t seq = pushed[t][k];
      ASSERT_EQ(by_seq[seq], std::make_pair(t, k)) << "push() returned the batch's seq";
    }
  }
}

// --- zero-copy acquire ---------------------------------------------------------------------

TEST_F(SluiceTest, AcquireSubmitCancel) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {4, {32, 8}});

  Fill f = pf.acquire();
  ASSERT_TRUE(f);
  EXPECT_EQ(f.seq(), 0u);
  EXPECT_EQ(f.segments(), 2u);
  EXPECT_EQ(f.capacity(0), 32u);
  EXPECT_EQ(f.capacity(1), 8u);
  EXPECT_EQ(f.segment(0).size(), 32u);
  EXPECT_TRUE(f.segment(2).empty());
  write_pattern(0, 0, f.segment(0).data(), 5);
  write_pattern(0, 1, f.segment(1).data(), 8);
  f.set_len(0, 5);
  f.set_len(1, 8);
  EXPECT_SLUICE_THROW(f.set_len(1, 9), ErrorCode::out_of_range);
  EXPECT_SLUICE_THROW(f.set_len(2, 0), ErrorCode::out_of_range);
  EXPECT_EQ(f.len(1), 8u) << "a refused set_len changes nothing";
  f.submit();
  EXPECT_FALSE(f);
  EXPECT_SLUICE_THROW(f.submit(), ErrorCode::invalid_argument);  // not an open fill

  { Fill g = pf.acquire(); EXPECT_EQ(g.seq(), 1u); }  // cancelled by its destructor
  Fill h = pf.acquire();
  EXPECT_EQ(h.seq(), 2u);
  h.cancel();
  EXPECT_FALSE(h);

  Fill k = pf.acquire();
  EXPECT_EQ(k.seq(), 3u);
  write_pattern(3, 0, k.segment(0).data(), 32);
  k.set_len(0, 32);
  Fill moved = std::move(k);
  EXPECT_FALSE(k);
  EXPECT_EQ(k.submit(std::nothrow).code(), ErrorCode::invalid_handle) << "moved from";
  moved.submit();

  Fill m = pf.acquire();
  EXPECT_EQ(m.seq(), 4u);
  m = pf.acquire();  // the replaced fill (4) is cancelled
  EXPECT_EQ(m.seq(), 5u);
  m.set_len(1, 1);
  write_pattern(5, 1, m.segment(1).data(), 1);
  // release(): submitted through the C API.
  sluice_prefetch_fill_t raw = m.release();
  EXPECT_FALSE(m);
  ASSERT_EQ(sluice_prefetcher_submit(pf.raw(), &raw), nullptr);
  pf.close_input();

  sluice::Buffer d0 = sluice::Buffer::alloc(s, 32);
  sluice::Buffer d1 = sluice::Buffer::alloc(s, 8);
  std::vector<std::uint64_t> seqs;
  while (std::optional<BatchInfo> info = pf.next_into(s, {d0, d1})) {
    seqs.push_back(info->seq());
    ASSERT_NO_FATAL_FAILURE(expect_pattern(s, *info, {d0, d1}));
  }
  EXPECT_EQ(seqs, (std::vector<std::uint64_t>{0, 3, 5})) << "cancelled seqs are skipped";
}

TEST_F(SluiceTest, GatherRowsIntoAFill) {
  constexpr std::size_t kRow = 784, kSrcRows = 40;
  std::vector<std::byte> src(kRow * kSrcRows);
  for (std::size_t k = 0; k < src.size(); ++k) src[k] = pattern_byte(k / kRow, 0, k % kRow);
  const std::vector<std::int64_t> rows = {39, 0, 7, 7, 12, 1};
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {2, {kRow * rows.size(), 8}});

  Fill f = pf.acquire();
  f.set_len(0, 3);
  const std::vector<std::int64_t> bad = {0, kSrcRows};
  EXPECT_SLUICE_THROW(f.gather_rows(0, src, kRow, bad), ErrorCode::out_of_range);
  EXPECT_SLUICE_THROW(f.gather_rows(1, src, kRow, rows), ErrorCode::out_of_range);  // 8 bytes
  EXPECT_SLUICE_THROW(f.gather_rows(2, src, kRow, rows), ErrorCode::out_of_range);  // no segment 2
  EXPECT_SLUICE_THROW(f.gather_rows(0, src, 0, rows), ErrorCode::invalid_argument);
  EXPECT_EQ(f.len(0), 3u) << "a refused gather keeps the length";
  f.gather_rows(0, src, kRow, rows);
  EXPECT_EQ(f.len(0), kRow * rows.size());
  f.submit();
  pf.close_input();

  sluice::Buffer d0 = sluice::Buffer::alloc(s, kRow * rows.size());
  sluice::Buffer d1 = sluice::Buffer::alloc(s, 8);
  std::optional<BatchInfo> info = pf.next_into(s, {d0, d1});
  ASSERT_TRUE(info);
  std::vector<std::byte> got(kRow * rows.size());
  sluice::copy_to_host(s, got, d0, 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_TRUE(std::equal(got.begin() + static_cast<std::ptrdiff_t>(i * kRow),
                           got.begin() + static_cast<std::ptrdiff_t>((i + 1) * kRow),
                           src.begin() + static_cast<std::ptrdiff_t>(rows[i]) * static_cast<std::ptrdiff_t>(kRow)))
        << "row " << i;
  }

  // The free function: overlapping ranges are refused.
  EXPECT_EQ(sluice::gather_rows(std::nothrow, sluice::MutableByteView(src.data() + kRow, kRow),
                                src, kRow, rows)
                .code(),
            ErrorCode::invalid_argument);
}

TEST_F(SluiceTest, PullModeFillRefusesSubmitAndCancel) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::atomic<int> submit_code{-1}, cancel_code{-1};
  Prefetcher pf = Prefetcher::create(dev_, {1, {4}, [&](Fill& f) {
                                          if (f.seq() > 0) return FillResult::end;
                                          submit_code = static_cast<int>(f.submit(std::nothrow).code());
                                          cancel_code = static_cast<int>(f.cancel(std::nothrow).code());
                                          EXPECT_TRUE(f.active());
                                          f.set_len(0, 4);
                                          return FillResult::ready;
                                        }});
  std::optional<Batch> b = pf.next(s);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->len(0), 4u);
  EXPECT_EQ(submit_code.load(), static_cast<int>(ErrorCode::invalid_state));
  EXPECT_EQ(cancel_code.load(), static_cast<int>(ErrorCode::invalid_state));
}

// The lengths follow the Fill wherever the callable moves it: into another Fill,
// into a lambda it calls, into an object kept past the call (which the call's end
// makes inactive), or into one destroyed before the call returns. A moved-from
// Fill's set_len no longer reaches the batch.
TEST_F(SluiceTest, PullModeFillMovedByTheCallableKeepsItsLengths) {
  sluice::Stream s = sluice::Stream::create(dev_);
  std::optional<Fill> kept;  // touched only on the (one) producer thread
  std::atomic<int> kept_active_after_return{-1};
  Prefetcher pf = Prefetcher::create(
      dev_, {1, {64, 8}, [&](Fill& f) {
               switch (f.seq()) {
                 case 0: {  // into another Fill
                   Fill g = std::move(f);
                   EXPECT_FALSE(f.active());
                   EXPECT_TRUE(g.active());
                   g.set_len(0, 11);
                   g.set_len(1, 3);
                   f.set_len(0, 1);  // the moved-from object: not the batch's
                   EXPECT_EQ(g.len(0), 11u);
                   return FillResult::ready;
                 }
                 case 1: {  // into a lambda that sets them
                   auto body = [h = std::move(f)]() mutable {
                     h.set_len(0, 22);
                     std::vector<std::int64_t> rows{0, 0};
                     std::byte src[2] = {};
                     h.gather_rows(1, ByteView(src, 2), 1, rows);
                   };
                   body();
                   return FillResult::ready;
                 }
                 case 2:  // into an object that outlives the call
                   kept.emplace(std::move(f));
                   kept->set_len(0, 33);
                   kept->set_len(1, 8);
                   return FillResult::ready;
                 case 3: {  // into one destroyed before the call returns
                   kept_active_after_return = kept->active() ? 1 : 0;
                   kept.reset();
                   { Fill g = std::move(f); g.set_len(0, 44); }
                   Fill back;
                   back = std::move(f);  // an inactive fill: nothing to take over
                   return FillResult::ready;
                 }
                 default:
                   return FillResult::end;
               }
             }});
  const std::vector<std::pair<std::size_t, std::size_t>> want{{11, 3}, {22, 2}, {33, 8}, {44, 0}};
  for (std::uint64_t q = 0; q < want.size(); ++q) {
    std::optional<Batch> b = pf.next(s);
    ASSERT_TRUE(b);
    EXPECT_EQ(b->seq(), q);
    EXPECT_EQ(b->len(0), want[q].first) << "batch " << q;
    EXPECT_EQ(b->len(1), want[q].second) << "batch " << q;
  }
  EXPECT_FALSE(pf.next(s));
  EXPECT_EQ(kept_active_after_return.load(), 0) << "the call's end ends a moved-to Fill";
}

// --- errors and ownership ------------------------------------------------------------------

TEST_F(SluiceTest, PrefetcherArgumentErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  EXPECT_EQ(Prefetcher::create(std::nothrow, dev_, {65, {8}}).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(Prefetcher::create(std::nothrow, dev_, {2, {}}).code(), ErrorCode::invalid_argument);
  EXPECT_EQ(Prefetcher::create(std::nothrow, dev_, {2, std::vector<std::size_t>(9, 8)}).code(),
            ErrorCode::invalid_argument);
  EXPECT_EQ(Prefetcher::create(std::nothrow, dev_, {2, {8, 0}}).code(),
            ErrorCode::invalid_argument);
  EXPECT_SLUICE_THROW(Prefetcher::create(sluice::DeviceRef(), {2, {8}}), ErrorCode::invalid_handle);
  Prefetcher dflt = Prefetcher::create(dev_, {0, {8}});
  EXPECT_EQ(dflt.stats().pinned_bytes, 16u) << "depth 0 means 2";

  Prefetcher pf = Prefetcher::create(dev_, {2, {8, 4}});
  std::vector<std::byte> x = bytes(8, 1), y = bytes(5, 2);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x)}), ErrorCode::invalid_argument);
  EXPECT_SLUICE_THROW(pf.push({sluice::as_bytes(x), sluice::as_bytes(y)}), ErrorCode::out_of_range);
  std::vector<ByteView> nine(9, sluice::as_bytes(x));
  EXPECT_SLUICE_THROW(pf.push(nine), ErrorCode::invalid_argument);
  EXPECT_EQ(pf.push({sluice::as_bytes(x), ByteView()}), 0u) << "nothing was queued by the errors";

  sluice::Buffer d8 = sluice::Buffer::alloc(s, 8);
  sluice::Buffer d3 = sluice::Buffer::alloc(s, 3);
  EXPECT_SLUICE_THROW(pf.next_into(s, {d8}), ErrorCode::invalid_argument);
  EXPECT_SLUICE_THROW(pf.next_into(s, {d8, d3}), ErrorCode::out_of_range);
  EXPECT_SLUICE_THROW(pf.next(sluice::StreamRef()), ErrorCode::invalid_handle);
  std::optional<BatchInfo> info = pf.next_into(s, {d8, d8});
  ASSERT_TRUE(info);
  EXPECT_EQ(info->seq(), 0u);
  EXPECT_EQ(info->len(1), 0u);
}

TEST_F(SluiceTest, PrefetcherOwnership) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher a = Prefetcher::create(dev_, {2, {8}});
  PrefetcherRef view = a;
  EXPECT_EQ(view.raw().bits, a.raw().bits);
  Prefetcher b = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_TRUE(b);
  EXPECT_EQ(a.stats(std::nothrow).code(), ErrorCode::invalid_handle);
  EXPECT_EQ(view.stats().pinned_bytes, 16u);

  // release() and adopt().
  sluice_prefetcher_t raw = b.release();
  EXPECT_FALSE(b);
  Prefetcher c = Prefetcher::adopt(raw);
  EXPECT_TRUE(c);
  a = std::move(c);
  a = std::move(same(a));  // self-move keeps it
  EXPECT_TRUE(a);

  // close() destroys now; views go stale, never UB.
  a.close();
  EXPECT_FALSE(a);
  EXPECT_TRUE(a.close(std::nothrow)) << "closing an empty Prefetcher does nothing";
  EXPECT_SLUICE_THROW(view.stats(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(view.push({}), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(view.next(s), ErrorCode::invalid_handle);
  EXPECT_EQ(Prefetcher().close_input(std::nothrow).code(), ErrorCode::invalid_handle);

  // Move assignment destroys the pull-mode prefetcher it replaces, then its callable.
  auto token = std::make_shared<int>(1);
  std::weak_ptr<int> watch = token;
  Prefetcher p = Prefetcher::create(
      dev_, {2, {8}, [t = std::move(token)](Fill&) { return FillResult::end; }});
  EXPECT_FALSE(watch.expired());
  p = Prefetcher::create(dev_, {1, {8}});
  EXPECT_TRUE(watch.expired());
}

// --- destroy at any moment -------------------------------------------------------------------

TEST_F(SluiceTest, DestroyWhileAThreadIsBlockedInPush) {
  sluice::Stream s = sluice::Stream::create(dev_);
  Prefetcher pf = Prefetcher::create(dev_, {1, {8}});
  std::vector<std::byte> x = bytes(8, 3);
  pf.push({sluice::as_bytes(x)});
  std::optional<Batch> leased = pf.next(s);  // the only slot, leased
  ASSERT_TRUE(leased);

  std::atomic<int> returned{0};
  ErrorCode push_code = ErrorCode::ok, next_code = ErrorCode::ok;
  std::thread producer([&, in = pf.ref()] {
    push_code = in.push(std::nothrow, {sluice::as_bytes(x)}).code();  // blocks: no free slot
    ++returned;
  });
  std::thread consumer([&, out = pf.ref()] {
    next_code = out.next(std::nothrow, s).code();  // blocks: nothing can come
    ++returned;
  });
  sleep_ms(100);
  EXPECT_EQ(returned.load(), 0) << "both threads are blocked";
  pf.close();  // destroy, while they wait
  producer.join();
  consumer.join();
  EXPECT_EQ(push_code, ErrorCode::invalid_handle);
  EXPECT_EQ(next_code, ErrorCode::invalid_handle);
  // The lease was ended by the destroy.
  EXPECT_EQ(leased->close(std::nothrow).code(), ErrorCode::invalid_handle);
  s.synchronize();
}

TEST_F(SluiceTest, DestroyWaitsForRunningFillsThenFreesTheCallable) {
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> watch = token;
  std::atomic<int> running{0}, calls{0};
  {
    Prefetcher pf = Prefetcher::create(dev_, {2, {64},
                                              [&running, &calls, t = std::move(token)](Fill& f) {
                                                ++running;
                                                ++calls;
                                                sleep_ms(20);
                                                f.set_len(0, 64);
                                                --running;
                                                return FillResult::ready;
                                              },
                                              3});
    // Wait until fills run (or the producers are blocked on the full slots).
    for (int i = 0; i < 500 && calls.load() < 1; ++i) sleep_ms(10);
    EXPECT_GE(calls.load(), 1);
  }  // destroyed here, with no consumer
  EXPECT_EQ(running.load(), 0) << "the destructor waited for running fills";
  EXPECT_TRUE(watch.expired()) << "and then destroyed the callable";
}

// The std::nothrow / Result forms (no_exceptions.cpp uses them under -fno-exceptions).
TEST_F(SluiceTest, PrefetcherResultApi) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Result<Prefetcher> pf = Prefetcher::create(std::nothrow, dev_, {2, {4}});
  ASSERT_TRUE(pf);
  std::uint32_t word[1] = {0xdeadbeef};
  sluice::Result<std::uint64_t> seq = pf->push(std::nothrow, {sluice::as_bytes(word)});
  ASSERT_TRUE(seq);
  EXPECT_EQ(*seq, 0u);
  sluice::Result<Fill> f = pf->acquire(std::nothrow, milliseconds(100));
  ASSERT_TRUE(f);
  EXPECT_TRUE(f->cancel(std::nothrow));
  EXPECT_TRUE(pf->close_input(std::nothrow));
  sluice::Result<std::optional<Batch>> b = pf->next(std::nothrow, s, milliseconds(1000));
  ASSERT_TRUE(b && b->has_value());
  EXPECT_EQ((*b)->len(0), 4u);
  EXPECT_TRUE((*b)->close(std::nothrow));
  sluice::Result<std::optional<Batch>> end = pf->next(std::nothrow, s);
  ASSERT_TRUE(end);
  EXPECT_FALSE(end->has_value());
  sluice::Result<sluice::PrefetcherStats> st = pf->stats(std::nothrow);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->batches, 1u);
  EXPECT_EQ(st->bytes, 4u);
}
