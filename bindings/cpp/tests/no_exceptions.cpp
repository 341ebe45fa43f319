// Built with -fno-exceptions: only the std::nothrow / Result API exists.
// Exit 0 when every check passed. With --unhandled it calls value() on an error,
// which must print the error and abort (the test expects failure).
#include <sluice/sluice.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#error "this test must be built with -fno-exceptions"
#endif
static_assert(SLUICE_CPP_EXCEPTIONS == 0, "the throwing API is compiled out");

// The throwing overloads do not exist.
template <class T, class = void>
struct has_throwing_create : std::false_type {};
template <class T>
struct has_throwing_create<T, std::void_t<decltype(T::create(std::declval<sluice::DeviceRef>()))>>
    : std::true_type {};
static_assert(!has_throwing_create<sluice::Stream>::value, "Stream::create(dev) is compiled out");

template <class T, class = void>
struct has_throwing_sync : std::false_type {};
template <class T>
struct has_throwing_sync<T, std::void_t<decltype(std::declval<T&>().synchronize())>>
    : std::true_type {};
static_assert(!has_throwing_sync<sluice::StreamRef>::value, "synchronize() is compiled out");
static_assert(!std::is_constructible<sluice::Op, sluice::StreamRef, sluice::SyncList,
                                     sluice::SyncList>::value,
              "the throwing Op constructor is compiled out");

template <class T, class = void>
struct has_throwing_next : std::false_type {};
template <class T>
struct has_throwing_next<T, std::void_t<decltype(std::declval<T&>().next(
                                std::declval<sluice::StreamRef>()))>> : std::true_type {};
static_assert(!has_throwing_next<sluice::PrefetcherRef>::value, "next(stream) is compiled out");

template <class T, class = void>
struct has_throwing_session : std::false_type {};
template <class T>
struct has_throwing_session<T, std::void_t<decltype(T(std::declval<const char*>()))>>
    : std::true_type {};
static_assert(!has_throwing_session<sluice::trace::Session>::value,
              "the throwing Session constructor is compiled out");
static_assert(std::is_same<decltype(sluice::trace::stop(std::nothrow)), sluice::Result<void>>::value,
              "trace::stop(std::nothrow) returns a Result");

static int failures = 0;

#define CHECK(cond)                                                \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                  \
    }                                                              \
  } while (0)

int main(int argc, char** argv) {
  sluice::Result<sluice::Device> dev = sluice::Device::open(std::nothrow, sluice::Backend::host, 0);
  CHECK(dev.ok());
  if (!dev) return 1;

  if (argc > 1 && std::strcmp(argv[1], "--unhandled") == 0) {
    sluice::Result<sluice::Stream> bad = sluice::Stream::create(std::nothrow, sluice::DeviceRef());
    sluice::Stream s = std::move(bad).value();  // prints and aborts
    std::printf("NOT ABORTED\n");
    return s ? 0 : 0;
  }

  sluice::Result<sluice::Stream> a = sluice::Stream::create(std::nothrow, *dev);
  sluice::Result<sluice::Stream> b = sluice::Stream::create(std::nothrow, *dev);
  CHECK(a && b);
  if (!a || !b) return 1;

  sluice::Result<sluice::Buffer> buf = sluice::Buffer::alloc(std::nothrow, *a, 256);
  CHECK(buf.ok());
  if (!buf) return 1;
  std::vector<unsigned char> in(256);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i ^ 0x5a);
  CHECK(sluice::copy_from_host(std::nothrow, *a, *buf, 0, in).ok());

  // Order a consumer on b after a producer on a, with an Op scope and a callback.
  sluice::Result<sluice::SyncObject> x = sluice::SyncObject::create(std::nothrow);
  CHECK(x.ok());
  int value = 0, seen = -1;
  {
    sluice::Result<sluice::Op> op = sluice::Op::begin(std::nothrow, *a, {}, {*x});
    CHECK(op.ok());
    CHECK(a->host_callback(std::nothrow, [&value] { value = 9; }).ok());
    CHECK(op->end(std::nothrow).ok());
  }
  CHECK(b->host_callback(std::nothrow, [&] { seen = value; }, {*x}, {}).ok());
  CHECK(b->synchronize(std::nothrow).ok());
  CHECK(seen == 9);

  sluice::Result<std::vector<unsigned char>> out =
      sluice::read_vector<unsigned char>(std::nothrow, *b, *buf, 0, 256);
  CHECK(out.ok() && *out == in);

  // Errors come back as values.
  sluice::Result<void> oob = sluice::copy_from_host(std::nothrow, *a, *buf, 1, in);
  CHECK(oob.code() == sluice::ErrorCode::out_of_range);
  CHECK(std::strstr(oob.error().message(), "sluice_stream_copy_from_host") != nullptr);
  sluice::Result<int> cb_rc = 0;
  CHECK(a->host_callback(std::nothrow, [] { return 3; }).ok());
  CHECK(a->synchronize(std::nothrow).code() == sluice::ErrorCode::callback_failed);
  CHECK(cb_rc.value_or(1) == 0);

  // Graphs through the Result API: a Capture scope, launches, and a graph cache
  // whose body reports success or failure as a Result.
  {
    int runs = 0;
    sluice::Result<sluice::Capture> cap = sluice::Capture::begin(std::nothrow, *b);
    CHECK(cap.ok() && cap->active());
    CHECK(b->host_callback(std::nothrow, [&runs] { ++runs; }).ok());
    sluice::Result<sluice::Graph> g = cap->end(std::nothrow);
    CHECK(g.ok() && !cap->active());
    CHECK(cap->end(std::nothrow).code() == sluice::ErrorCode::invalid_handle);
    sluice::Result<sluice::GraphExec> exec = g->instantiate(std::nothrow);
    CHECK(exec.ok());
    CHECK(exec->launch(std::nothrow, *b).ok());
    CHECK(exec->launch(std::nothrow, *a).ok());
    CHECK(a->synchronize(std::nothrow).ok() && b->synchronize(std::nothrow).ok());
    CHECK(runs == 2);

    sluice::Result<sluice::GraphCache> cache = sluice::GraphCache::create(std::nothrow, *dev);
    CHECK(cache.ok());
    int calls = 0;
    for (int i = 0; i < 3; ++i) {
      CHECK(cache
                ->run(std::nothrow, 1, *b,
                      [&](sluice::StreamRef s) {
                        ++calls;
                        return s.host_callback(std::nothrow, [&runs] { ++runs; });
                      })
                .ok());
    }
    CHECK(b->synchronize(std::nothrow).ok());
    CHECK(calls == 2 && runs == 5);
    sluice::Result<sluice::GraphCacheStats> st = cache->stats(std::nothrow);
    CHECK(st.ok() && st->eager == 1 && st->captured == 1 && st->replayed == 1);
    CHECK(cache->set_max_entries(std::nothrow, 4).ok());
    sluice::Result<void> failed = cache->run(std::nothrow, 2, *b, [](sluice::StreamRef s) {
      return sluice::copy(std::nothrow, s, sluice::BufferRef(), 0, sluice::BufferRef(), 0, 1);
    });
    CHECK(failed.code() == sluice::ErrorCode::callback_failed);
    CHECK(std::strstr(failed.error().message(), "SLUICE_ERROR_INVALID_HANDLE") != nullptr);
    CHECK(cache->run(std::nothrow, 3, *b, [](sluice::StreamRef) { return 4; }).code() ==
          sluice::ErrorCode::callback_failed);
  }

  // The prefetcher through the Result API: push, zero-copy acquire, a lease,
  // next_into, back-pressure, end of data, and a pull-mode fill.
  {
    sluice::Result<sluice::Prefetcher> pf =
        sluice::Prefetcher::create(std::nothrow, *dev, {2, {16}});
    CHECK(pf.ok());
    if (!pf) return 1;
    std::vector<unsigned char> payload(16, 7);
    sluice::Result<std::uint64_t> seq = pf->push(std::nothrow, {sluice::as_bytes(payload)});
    CHECK(seq.ok() && *seq == 0);
    sluice::Result<sluice::Fill> fill = pf->acquire(std::nothrow);
    CHECK(fill.ok() && fill->seq() == 1);
    if (!fill) return 1;
    CHECK(fill->set_len(std::nothrow, 0, 17).code() == sluice::ErrorCode::out_of_range);
    std::memcpy(fill->segment(0).data(), "abc", 3);
    CHECK(fill->set_len(std::nothrow, 0, 3).ok());
    CHECK(fill->submit(std::nothrow).ok());
    CHECK(pf->push(std::nothrow, {sluice::as_bytes(payload)}, std::chrono::milliseconds(10))
              .code() == sluice::ErrorCode::timeout);
    {
      sluice::Result<std::optional<sluice::Batch>> lease = pf->next(std::nothrow, *a);
      CHECK(lease.ok() && lease->has_value() && (*lease)->seq() == 0 && (*lease)->len(0) == 16);
    }  // released here
    CHECK(pf->close_input(std::nothrow).ok());
    sluice::Result<sluice::Buffer> dst = sluice::Buffer::alloc(std::nothrow, *a, 16);
    CHECK(dst.ok());
    if (!dst) return 1;
    sluice::Result<std::optional<sluice::BatchInfo>> info = pf->next_into(std::nothrow, *a, {*dst});
    CHECK(info.ok() && info->has_value() && (*info)->seq() == 1 && (*info)->len(0) == 3);
    sluice::Result<std::vector<char>> abc = sluice::read_vector<char>(std::nothrow, *a, *dst, 0, 3);
    CHECK(abc.ok() && std::memcmp(abc->data(), "abc", 3) == 0);
    sluice::Result<std::optional<sluice::BatchInfo>> end = pf->next_into(std::nothrow, *a, {*dst});
    CHECK(end.ok() && !end->has_value());

    sluice::Result<sluice::Prefetcher> pull = sluice::Prefetcher::create(
        std::nothrow, *dev, {2, {8}, [](sluice::Fill& f) {
          if (f.seq() == 1) return sluice::FillResult::failed;
          if (f.seq() >= 3) return sluice::FillResult::end;
          sluice::Fill moved = std::move(f);  // the length follows the moved-to Fill
          return moved.set_len(std::nothrow, 0, 8).ok() ? sluice::FillResult::ready
                                                        : sluice::FillResult::failed;
        }});
    CHECK(pull.ok());
    if (!pull) return 1;
    int got = 0, failed = 0;
    std::uint64_t failed_seq = 0;
    for (;;) {
      sluice::Result<std::optional<sluice::Batch>> r =
          pull->next(std::nothrow, *a, sluice::kWaitForever, &failed_seq);
      if (!r) {
        CHECK(r.code() == sluice::ErrorCode::callback_failed && failed_seq == 1);
        ++failed;
        continue;
      }
      if (!r->has_value()) break;
      CHECK((*r)->len(0) == 8);
      ++got;
    }
    CHECK(got == 2 && failed == 1);
  }

  // Traces, counters and logs through the Result API.
  {
    char path[256];
    const char* tmp = std::getenv("TMPDIR");
    std::snprintf(path, sizeof path, "%s/sluice-noexcept-%d.json", tmp && *tmp ? tmp : "/tmp",
                  static_cast<int>(getpid()));
    CHECK(sluice::trace::start(std::nothrow, nullptr).code() == sluice::ErrorCode::null_argument);
    CHECK(sluice::trace::start(std::nothrow, "").code() == sluice::ErrorCode::invalid_argument);
    CHECK(sluice::set_counters_enabled(std::nothrow, true).ok());
    sluice::Result<sluice::Counters> c0 = sluice::counters(std::nothrow, *dev);
    CHECK(c0.ok());
    int logged = 0;
    CHECK(sluice::log::set_callback(std::nothrow, [&logged](sluice::log::Level level,
                                                            std::string_view text) {
            if (level == sluice::log::Level::info && text.find("trace started") == 0) ++logged;
          }).ok());
    CHECK(sluice::log::set_level(std::nothrow, sluice::log::Level::info).ok());
    {
      sluice::Result<sluice::trace::Session> session = sluice::trace::Session::begin(std::nothrow, path);
      CHECK(session.ok() && session->active());
      CHECK(sluice::trace::Session::begin(std::nothrow, path).code() ==
            sluice::ErrorCode::invalid_state);
      CHECK(sluice::copy_from_host(std::nothrow, *a, *buf, 0, in).ok());
      CHECK(a->synchronize(std::nothrow).ok());
      CHECK(sluice::trace::flush(std::nothrow).ok());
    }  // the Session stops the trace
    CHECK(logged == 1);
    CHECK(sluice::log::set_level(std::nothrow, sluice::log::Level::off).ok());
    CHECK(sluice::log::set_callback(std::nothrow, {}).ok());
    CHECK(sluice::trace::start(std::nothrow, path).ok());
    CHECK(sluice::trace::stop(std::nothrow).ok());
    std::remove(path);
    sluice::Result<sluice::Counters> c1 = sluice::counters(std::nothrow, *dev);
    CHECK(c1.ok() && c0.ok() && c1->bytes_h2d - c0->bytes_h2d == 256);
    CHECK(sluice::counters(std::nothrow).ok());
    CHECK(sluice::counters(std::nothrow, sluice::DeviceRef()).code() ==
          sluice::ErrorCode::invalid_handle);
    CHECK(sluice::set_counters_enabled(std::nothrow, false).ok());
  }

  // The RNG through the Result API: draws, save, serialize, deserialize, restore,
  // and corrupt bytes refused.
  {
    sluice::Result<sluice::Rng> rng = sluice::Rng::create(std::nothrow, *a, 42, 16);
    CHECK(rng.ok());
    sluice::Result<sluice::Buffer> draws = sluice::Buffer::alloc(std::nothrow, *a, 16 * 4 * 4);
    CHECK(draws.ok());
    sluice::Result<sluice::RngCheckpoint> ck = sluice::RngCheckpoint::create(std::nothrow, *a, *rng);
    CHECK(ck.ok() && rng->save(std::nothrow, *a, *ck).ok());
    CHECK(rng->generate(std::nothrow, *a, sluice::RngDistribution::normal,
                        sluice::RngLayout::state_major, *draws, 0, 4)
              .ok());
    sluice::Result<std::vector<std::uint32_t>> first =
        sluice::read_vector<std::uint32_t>(std::nothrow, *a, *draws, 0, 64);
    sluice::Result<std::vector<std::uint8_t>> bytes = ck->serialize(std::nothrow);
    CHECK(first.ok() && bytes.ok());
    sluice::Result<sluice::RngCheckpoint> back =
        sluice::RngCheckpoint::deserialize(std::nothrow, *dev, *bytes);
    CHECK(back.ok() && rng->restore(std::nothrow, *a, *back).ok());
    CHECK(rng->generate(std::nothrow, *a, sluice::RngDistribution::normal,
                        sluice::RngLayout::state_major, *draws, 0, 4)
              .ok());
    sluice::Result<std::vector<std::uint32_t>> again =
        sluice::read_vector<std::uint32_t>(std::nothrow, *a, *draws, 0, 64);
    CHECK(again.ok() && first.ok() && *again == *first);
    std::vector<std::uint8_t> corrupt = *bytes;
    corrupt[corrupt.size() / 2] ^= 1;
    CHECK(sluice::RngCheckpoint::deserialize(std::nothrow, *dev, corrupt).code() ==
          sluice::ErrorCode::corrupt_data);
    CHECK(rng->generate(std::nothrow, *a, sluice::RngDistribution::u32,
                        sluice::RngLayout::sample_major, *draws, 2, 1)
              .code() == sluice::ErrorCode::invalid_argument);
  }

  sluice::StreamRef stale = *a;
  CHECK(a->close(std::nothrow).ok());
  CHECK(stale.query(std::nothrow).code() == sluice::ErrorCode::invalid_handle);

  std::printf("no-exceptions: %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
  return failures ? 1 : 0;
}
