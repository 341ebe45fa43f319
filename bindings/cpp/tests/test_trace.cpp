// Traces, counters and logs (sluice/trace.hpp, issue 15).
//
// All three are process-wide, so every test here is in the one suite `Trace`, whose
// fixture puts the process back as it found it (no trace, counting off, logging
// off, stderr as the receiver). ctest runs each test in a process of its own
// (gtest_discover_tests), and the trace files carry the process id, so these tests
// neither see nor disturb the others, also under `ctest -j`.
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>

#include "sluice_test.hpp"

using sluice::ErrorCode;
using sluice::log::Level;

namespace {

static_assert(!std::is_copy_constructible<sluice::trace::Session>::value, "Session is move-only");
static_assert(std::is_nothrow_move_constructible<sluice::trace::Session>::value, "Session");
static_assert(std::is_nothrow_move_assignable<sluice::trace::Session>::value, "Session");
static_assert(std::is_nothrow_destructible<sluice::trace::Session>::value, "Session");
static_assert(std::is_nothrow_default_constructible<sluice::trace::Session>::value, "Session");
static_assert(std::is_same<sluice::Counters, sluice_counters_t>::value, "Counters is the C struct");
static_assert(static_cast<std::uint32_t>(Level::debug) == SLUICE_LOG_DEBUG, "log levels");

// --- a minimal JSON parser: enough to prove the trace is one complete JSON value --------

struct Json {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool b = false;
  double num = 0;
  std::string text;  ///< a string's value, or a number's digits as written
  std::vector<Json> items;
  std::vector<std::string> keys;  ///< an object's keys, parallel to `items`

  /// The member `key` of an object, or nullptr.
  const Json* get(const std::string& key) const {
    if (kind != Kind::object) return nullptr;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &items[i];
    }
    return nullptr;
  }
  /// The string member `key`, or "" when absent or not a string.
  std::string str(const std::string& key) const {
    const Json* v = get(key);
    return v != nullptr && v->kind == Kind::string ? v->text : std::string();
  }
};

/// Recursive descent over RFC 8259; throws std::runtime_error with the offset.
class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}

  /// The one value the whole text holds (whitespace around it allowed).
  Json document() {
    Json v = value(0);
    ws();
    if (i_ != s_.size()) fail("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at offset " + std::to_string(i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) {
      ++i_;
    }
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(const char* word) {
    for (const char* p = word; *p != '\0'; ++p, ++i_) {
      if (i_ >= s_.size() || s_[i_] != *p) fail(std::string("bad literal, expected ") + word);
    }
  }

  Json value(int depth) {
    if (depth > 64) fail("nested too deep");
    Json v;
    switch (peek()) {
      case '[':
        v.kind = Json::Kind::array;
        ++i_;
        if (peek() == ']') {
          ++i_;
          return v;
        }
        for (;;) {
          v.items.push_back(value(depth + 1));
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect(']');
          return v;
        }
      case '{':
        v.kind = Json::Kind::object;
        ++i_;
        if (peek() == '}') {
          ++i_;
          return v;
        }
        for (;;) {
          if (peek() != '"') fail("expected a key");
          v.keys.push_back(parse_string());
          expect(':');
          v.items.push_back(value(depth + 1));
          if (peek() == ',') {
            ++i_;
            continue;
          }
          expect('}');
          return v;
        }
      case '"':
        v.kind = Json::Kind::string;
        v.text = parse_string();
        return v;
      case 't':
        literal("true");
        v.kind = Json::Kind::boolean;
        v.b = true;
        return v;
      case 'f':
        literal("false");
        v.kind = Json::Kind::boolean;
        return v;
      case 'n':
        literal("null");
        return v;
      default:
        return number();
    }
  }

  std::string parse_string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) fail("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) fail("short \\u escape");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad \\u escape");
            cp = cp * 16 + static_cast<unsigned>(std::isdigit(static_cast<unsigned char>(h))
                                                      ? h - '0'
                                                      : (std::tolower(h) - 'a' + 10));
          }
          // Enough for the checks here: ASCII as is, anything else as '?'.
          out += cp < 0x80 ? static_cast<char>(cp) : '?';
          break;
        }
        default:
          fail("bad escape");
      }
    }
  }

  Json number() {
    const std::size_t start = i_;
    auto digits = [&] {
      const std::size_t d = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (i_ == d) fail("expected a digit");
    };
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else {
      digits();
    }
    if (i_ < s_.size() && s_[i_] == '.') {
      ++i_;
      digits();
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      digits();
    }
    Json v;
    v.kind = Json::Kind::number;
    v.text = s_.substr(start, i_ - start);
    v.num = std::strtod(v.text.c_str(), nullptr);
    return v;
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// A trace path private to this process and test.
std::string trace_path(const char* tag) {
  return ::testing::TempDir() + "sluice-cpp-" + tag + "-" + std::to_string(::getpid()) + ".json";
}

/// Removes the file when the test ends, also when it fails.
struct RemoveFile {
  std::string path;
  ~RemoveFile() { std::remove(path.c_str()); }
};

/// Parses a stopped trace: a complete JSON array of event objects, each with the
/// fields every trace event has. Adds a gtest failure and returns {} otherwise.
std::vector<Json> parse_trace(const std::string& text) {
  Json doc;
  try {
    doc = JsonParser(text).document();
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what() << "; the trace starts with: " << text.substr(0, 200);
    return {};
  }
  EXPECT_EQ(doc.kind, Json::Kind::array);
  for (const Json& ev : doc.items) {
    EXPECT_EQ(ev.kind, Json::Kind::object);
    for (const char* k : {"ph", "name", "pid", "tid", "ts"}) {
      EXPECT_NE(ev.get(k), nullptr) << "an event without \"" << k << "\"";
    }
  }
  return doc.items;
}

/// A stale stream view: its stream was destroyed. Using it gives invalid_handle
/// and, at debug level, the log message "stale handle used".
sluice::StreamRef stale_stream(sluice::DeviceRef dev) {
  sluice::Stream s = sluice::Stream::create(dev);
  return s.ref();
}

/// A small two-stream pipeline: a producer stream fills a device buffer from the
/// host, a consumer stream copies it (waiting on the producer on the device) and
/// overwrites part of the copy, and the producer reads the result back (waiting on
/// the consumer). Temporary buffers on a stream with block caching off make the
/// library log at debug level. Returns what was read back.
std::vector<std::uint8_t> run_pipeline(sluice::DeviceRef dev, std::size_t n) {
  sluice::Stream a = sluice::Stream::create(dev);
  sluice::Stream b = sluice::Stream::create(dev);
  a.set_label("producer");
  b.set_label("consumer");
  a.set_block_cache_limit(0);
  std::vector<std::uint8_t> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::uint8_t>(i * 7 + 3);
  sluice::Buffer src = sluice::Buffer::alloc(a, n);
  sluice::Buffer dst = sluice::Buffer::alloc(b, n);
  sluice::copy_from_host(a, src, 0, in);
  sluice::copy(b, dst, 0, src, 0, n);
  sluice::memset(b, dst, 0, 0xab, n / 4);
  {
    sluice::Buffer scratch = sluice::Buffer::alloc(a, n);  // freed on a, not cached
    sluice::copy(a, scratch, 0, dst, 0, n);
  }
  std::vector<std::uint8_t> out = sluice::read_vector<std::uint8_t>(a, dst, 0, n);
  b.synchronize();
  return out;
}

std::vector<std::uint8_t> expected_pipeline(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<std::uint8_t>(i < n / 4 ? 0xab : i * 7 + 3);
  }
  return v;
}

/// One received log message.
struct Message {
  Level level;
  std::string text;
};

/// A thread-safe collector of log messages. Its destructor sends the messages back
/// to stderr, so the callback never outlives it (also when a test fails early).
struct Collector {
  Collector() = default;
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;
  ~Collector() { (void)sluice::log::set_callback(std::nothrow, {}); }

  std::mutex mutex;
  std::vector<Message> messages;

  sluice::log::Callback callback() {
    return [this](Level level, std::string_view text) {
      std::lock_guard<std::mutex> lock(mutex);
      messages.push_back({level, std::string(text)});
    };
  }
  /// How many messages of `level` contain `needle`.
  std::size_t count(Level level, const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex);
    std::size_t n = 0;
    for (const Message& m : messages) n += m.level == level && contains(m.text, needle);
    return n;
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mutex);
    return messages.size();
  }
};

}  // namespace

/// The process-wide state these tests change, put back after each test.
class Trace : public SluiceTest {
 protected:
  void TearDown() override {
    EXPECT_TRUE(sluice::trace::stop(std::nothrow).ok());
    EXPECT_TRUE(sluice::log::set_level(std::nothrow, Level::off).ok());
    EXPECT_TRUE(sluice::log::set_callback(std::nothrow, {}).ok());
    EXPECT_TRUE(sluice::set_counters_enabled(std::nothrow, false).ok());
    SluiceTest::TearDown();
  }
};

// --- traces ----------------------------------------------------------------------------

TEST_F(Trace, TwoStreamPipelineGivesACompleteTraceWithTracksAndWaitArrows) {
  const std::string path = trace_path("pipeline");
  RemoveFile cleanup{path};
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  a.set_label("producer");
  b.set_label("consumer");
  sluice::SyncObject x = sluice::SyncObject::create();
  int value = 0;
  int seen = -1;

  sluice::trace::start(path);
  // The producer's op is still running when the consumer's is enqueued, so the
  // engine makes b wait on it: an arrow from a's op to b's.
  a.host_callback(
      [&] {
        sleep_ms(20);
        value = 42;
      },
      {}, {x});
  b.host_callback([&] { seen = value; }, {x}, {});
  b.synchronize();
  EXPECT_EQ(seen, 42);
  sluice::trace::flush();

  const std::string prefix = read_file(path);
  ASSERT_FALSE(prefix.empty());
  EXPECT_EQ(prefix[0], '[');
  EXPECT_FALSE(ends_with(prefix, "]\n")) << "still open before stop: a prefix the viewers accept";
  EXPECT_THROW(JsonParser(prefix).document(), std::runtime_error);

  sluice::trace::stop();
  const std::string text = read_file(path);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text[0], '[');
  EXPECT_TRUE(ends_with(text, "\n]\n"));
  const std::vector<Json> events = parse_trace(text);
  ASSERT_FALSE(events.empty());

  // Tracks: (pid, tid) -> name, from the thread_name metadata events.
  std::map<std::pair<std::string, std::string>, std::string> tracks;
  for (const Json& ev : events) {
    if (ev.str("ph") == "M" && ev.str("name") == "thread_name") {
      const Json* args = ev.get("args");
      ASSERT_NE(args, nullptr);
      tracks[{ev.get("pid")->text, ev.get("tid")->text}] = args->str("name");
    }
  }
  auto track_of = [&](const Json& ev) -> std::string {
    auto it = tracks.find({ev.get("pid")->text, ev.get("tid")->text});
    return it == tracks.end() ? std::string("(unnamed)") : it->second;
  };
  const std::string a_track = "producer (stream #" + std::to_string(a.stats().id) + ")";
  const std::string b_track = "consumer (stream #" + std::to_string(b.stats().id) + ")";
  bool have_a = false, have_b = false;
  for (const auto& t : tracks) {
    have_a |= t.second == a_track;
    have_b |= t.second == b_track;
  }
  EXPECT_TRUE(have_a) << "no thread_name event \"" << a_track << "\"";
  EXPECT_TRUE(have_b) << "no thread_name event \"" << b_track << "\"";

  // Spans: a "host fn" span on each stream's track.
  std::size_t spans_a = 0, spans_b = 0;
  for (const Json& ev : events) {
    if (ev.str("ph") == "X" && ev.str("name") == "host fn") {
      spans_a += track_of(ev) == a_track;
      spans_b += track_of(ev) == b_track;
    }
  }
  EXPECT_EQ(spans_a, 1u);
  EXPECT_EQ(spans_b, 1u);

  // Flows: every start has its end (same id), and one goes from a's track to b's.
  std::map<std::string, const Json*> starts, finishes;
  for (const Json& ev : events) {
    const std::string ph = ev.str("ph");
    if (ph != "s" && ph != "f") continue;
    const Json* id = ev.get("id");
    ASSERT_NE(id, nullptr) << "a flow event without an id";
    (ph == "s" ? starts : finishes)[id->text] = &ev;
  }
  EXPECT_EQ(starts.size(), finishes.size());
  std::size_t a_to_b = 0;
  for (const auto& s : starts) {
    auto f = finishes.find(s.first);
    ASSERT_NE(f, finishes.end()) << "flow " << s.first << " has no end";
    a_to_b += track_of(*s.second) == a_track && track_of(*f->second) == b_track;
  }
  EXPECT_EQ(a_to_b, 1u) << "the wait b made on a is one arrow from a's track to b's";
}

TEST_F(Trace, SessionStopsTheTraceWhenItEnds) {
  const std::string path = trace_path("session");
  RemoveFile cleanup{path};
  sluice::Stream s = sluice::Stream::create(dev_);
  s.set_label("session");
  {
    sluice::trace::Session tracing(path);
    EXPECT_TRUE(tracing.active());
    EXPECT_TRUE(static_cast<bool>(tracing));
    sluice::Buffer buf = sluice::Buffer::alloc(s, 256);
    sluice::memset(s, buf, 0, 1, 256);
    s.synchronize();
    tracing.flush();
    EXPECT_FALSE(ends_with(read_file(path), "]\n"));
  }
  const std::string text = read_file(path);
  EXPECT_TRUE(ends_with(text, "\n]\n")) << "the destructor stopped the trace";
  const std::vector<Json> events = parse_trace(text);
  EXPECT_FALSE(events.empty());
  bool named = false;
  for (const Json& ev : events) {
    const Json* args = ev.get("args");
    named |= ev.str("name") == "thread_name" && args != nullptr &&
             contains(args->str("name"), "session (stream #");
  }
  EXPECT_TRUE(named);
  // No trace is written now: a new one can start.
  sluice::trace::start(path);
  sluice::trace::stop();
}

TEST_F(Trace, SessionMovesStopEarlyAndRelease) {
  const std::string path = trace_path("session-moves");
  RemoveFile cleanup{path};

  sluice::trace::Session idle;
  EXPECT_FALSE(idle.active());
  EXPECT_TRUE(idle.stop(std::nothrow).ok()) << "stopping an inactive scope does nothing";

  sluice::Result<sluice::trace::Session> r = sluice::trace::Session::begin(std::nothrow, path);
  ASSERT_TRUE(r.ok()) << r.error().what();
  sluice::trace::Session first = std::move(r).value();
  EXPECT_TRUE(first.active());

  // Moving hands the trace over; the moved-from scope's end stops nothing.
  {
    sluice::trace::Session second(std::move(first));
    EXPECT_FALSE(first.active());  // NOLINT(bugprone-use-after-move)
    EXPECT_TRUE(second.active());
    first = std::move(second);
  }
  EXPECT_TRUE(first.active());
  EXPECT_EQ(sluice::trace::start(std::nothrow, path).code(), ErrorCode::invalid_state)
      << "the trace goes on";

  // A second scope cannot start while a trace is written, and stops nothing.
  EXPECT_EQ(sluice::trace::Session::begin(std::nothrow, trace_path("other")).code(),
            ErrorCode::invalid_state);
  EXPECT_SLUICE_THROW(sluice::trace::Session nested(trace_path("other")), ErrorCode::invalid_state);
  EXPECT_EQ(sluice::trace::start(std::nothrow, path).code(), ErrorCode::invalid_state);

  // stop() ends it early, reports, and leaves the scope inactive; twice is fine.
  EXPECT_TRUE(first.stop(std::nothrow).ok());
  EXPECT_FALSE(first.active());
  first.stop();
  EXPECT_TRUE(ends_with(read_file(path), "\n]\n"));

  // Move-assigning over an active scope stops its trace.
  first = sluice::trace::Session(path);
  EXPECT_TRUE(first.active());
  first = sluice::trace::Session();
  EXPECT_FALSE(first.active());
  EXPECT_TRUE(ends_with(read_file(path), "\n]\n"));

  // release() gives the scope up without stopping the trace.
  {
    sluice::trace::Session s(path);
    s.release();
    EXPECT_FALSE(s.active());
  }
  EXPECT_EQ(sluice::trace::start(std::nothrow, path).code(), ErrorCode::invalid_state);
  sluice::trace::stop();
  EXPECT_TRUE(ends_with(read_file(path), "\n]\n"));
}

TEST_F(Trace, BadArgumentsAndStartTwice) {
  const std::string path = trace_path("bad");
  RemoveFile cleanup{path};
  // Stop and flush with no trace do nothing.
  EXPECT_TRUE(sluice::trace::stop(std::nothrow).ok());
  EXPECT_TRUE(sluice::trace::flush(std::nothrow).ok());
  sluice::trace::stop();
  sluice::trace::flush();

  EXPECT_EQ(sluice::trace::start(std::nothrow, nullptr).code(), ErrorCode::null_argument);
  EXPECT_EQ(sluice::trace::start(std::nothrow, "").code(), ErrorCode::invalid_argument);
  EXPECT_EQ(sluice::trace::start(std::nothrow, std::string()).code(), ErrorCode::invalid_argument);
  sluice::Result<void> missing = sluice::trace::start(std::nothrow, "/nonexistent-dir/t.json");
  EXPECT_EQ(missing.code(), ErrorCode::invalid_argument);
  if (!missing) {
    EXPECT_TRUE(contains(missing.error().what(), "nonexistent-dir"));
  }
  EXPECT_EQ(sluice::trace::Session::begin(std::nothrow, nullptr).code(), ErrorCode::null_argument);
  EXPECT_EQ(sluice::trace::Session::begin(std::nothrow, std::string()).code(),
            ErrorCode::invalid_argument);
  EXPECT_SLUICE_THROW(sluice::trace::start(nullptr), ErrorCode::null_argument);
  EXPECT_SLUICE_THROW(sluice::trace::start(std::string()), ErrorCode::invalid_argument);
  EXPECT_SLUICE_THROW(sluice::trace::Session s(""), ErrorCode::invalid_argument);

  // Start twice: the second fails and the first goes on.
  ASSERT_TRUE(sluice::trace::start(std::nothrow, path).ok());
  sluice::Result<void> again = sluice::trace::start(std::nothrow, path);
  EXPECT_EQ(again.code(), ErrorCode::invalid_state);
  EXPECT_SLUICE_THROW(sluice::trace::start(path), ErrorCode::invalid_state);
  EXPECT_TRUE(sluice::trace::flush(std::nothrow).ok());
  EXPECT_TRUE(sluice::trace::stop(std::nothrow).ok());
  EXPECT_TRUE(sluice::trace::stop(std::nothrow).ok()) << "twice is fine";
  EXPECT_TRUE(ends_with(read_file(path), "\n]\n"));

  // Counters and log levels.
  EXPECT_EQ(sluice::counters(std::nothrow, sluice::DeviceRef()).code(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::counters(sluice::DeviceRef()), ErrorCode::invalid_handle);
  sluice::DeviceRef stale;
  {
    sluice::Device d = sluice::Device::open(sluice::Backend::host, 0);
    stale = d;
  }
  EXPECT_EQ(sluice::counters(std::nothrow, stale).code(), ErrorCode::invalid_handle);
  EXPECT_TRUE(sluice::counters(std::nothrow).ok());
  EXPECT_EQ(sluice::log::set_level(std::nothrow, static_cast<Level>(5)).code(),
            ErrorCode::invalid_argument);
  EXPECT_SLUICE_THROW(sluice::log::set_level(static_cast<Level>(UINT32_MAX)),
                      ErrorCode::invalid_argument);
}

// --- counters ----------------------------------------------------------------------------

TEST_F(Trace, CountersOfAScriptedSequence) {
  dev_.pinned_trim();
  sluice::set_counters_enabled(true);
  sluice::Stream a = sluice::Stream::create(dev_);
  sluice::Stream b = sluice::Stream::create(dev_);
  sluice::Buffer x = sluice::Buffer::alloc(a, 4096);
  sluice::Buffer p = sluice::Buffer::alloc_pinned(dev_, 4096);

  const sluice::Counters before = sluice::counters(dev_);
  const sluice::Counters process_before = sluice::counters();
  EXPECT_GE(before.streams, 2u);
  sluice::copy(a, x, 0, p, 0, 4096);  // H2D, no wait
  sluice::copy(b, p, 0, x, 0, 4096);  // D2H: waits on a (one wait, one merged)
  sluice::copy(a, x, 0, p, 0, 4096);  // waits on b; a's own write is stream order
  sluice::Buffer q = sluice::Buffer::alloc_pinned(dev_, 4096);  // one more pinned block
  const sluice::Counters after = sluice::counters(dev_);
  const sluice::Counters process_after = sluice::counters();

  EXPECT_EQ(after.waits_inserted - before.waits_inserted, 2u);
  EXPECT_EQ(after.waits_deduplicated - before.waits_deduplicated, 2u);
  EXPECT_EQ(after.waits_skipped_same_stream - before.waits_skipped_same_stream, 1u);
  EXPECT_EQ(after.events_recorded - before.events_recorded, 3u);
  EXPECT_EQ(after.bytes_h2d - before.bytes_h2d, 8192u);
  EXPECT_EQ(after.bytes_d2h - before.bytes_d2h, 4096u);
  EXPECT_EQ(after.bytes_d2d - before.bytes_d2d, 0u);
  EXPECT_EQ(after.bytes_h2h - before.bytes_h2h, 0u);
  EXPECT_EQ((after.pinned_alloc_hits + after.pinned_alloc_misses) -
                (before.pinned_alloc_hits + before.pinned_alloc_misses),
            1u);
  EXPECT_EQ(after.pinned_bytes_in_use - before.pinned_bytes_in_use, 4096u);
  EXPECT_EQ(after.streams, before.streams);
  // Only this device worked meanwhile: the process saw the same.
  EXPECT_EQ(process_after.waits_inserted - process_before.waits_inserted, 2u);
  EXPECT_EQ(process_after.events_recorded - process_before.events_recorded, 3u);
  EXPECT_EQ(process_after.bytes_h2d - process_before.bytes_h2d, 8192u);

  // Off: the per-op counters stop, the others go on.
  sluice::set_counters_enabled(false);
  sluice::copy(a, x, 0, p, 0, 4096);
  const sluice::Counters off = sluice::counters(dev_);
  EXPECT_EQ(off.bytes_h2d, after.bytes_h2d);
  EXPECT_EQ(off.events_recorded - after.events_recorded, 1u);

  a.synchronize();
  b.synchronize();
  x = sluice::Buffer();  // x's free is ordered on a: it keeps a's stream alive
  p = sluice::Buffer();
  q = sluice::Buffer();
  const std::uint64_t streams_before_destroy = sluice::counters(dev_).streams;
  a = sluice::Stream();
  b = sluice::Stream();
  const sluice::Counters gone = sluice::counters(dev_);
  EXPECT_EQ(streams_before_destroy - gone.streams, 2u);
  EXPECT_EQ(gone.pinned_bytes_in_use, before.pinned_bytes_in_use - 4096);
  // Destroyed streams keep counting in their device.
  EXPECT_GE(gone.events_recorded, off.events_recorded);
  EXPECT_GE(gone.waits_inserted, off.waits_inserted);
}

// --- logs ------------------------------------------------------------------------------

TEST_F(Trace, LogCallbackReceivesKnownMessagesAtTheirLevels) {
  Collector got;
  sluice::log::set_callback(got.callback());
  sluice::StreamRef stale = stale_stream(dev_);

  // Off: nothing reaches the callback.
  sluice::log::set_level(Level::off);
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  EXPECT_EQ(got.size(), 0u);

  // Debug: a stale handle is logged.
  sluice::log::set_level(Level::debug);
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  EXPECT_EQ(got.count(Level::debug, "stale handle used"), 1u);

  // Warn: no debug messages, but a capture aborted by a host sync is logged.
  sluice::log::set_level(Level::warn);
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  EXPECT_EQ(got.count(Level::debug, "stale handle used"), 1u);
  sluice::Stream s = sluice::Stream::create(dev_);
  {
    sluice::Capture cap(s);
    EXPECT_SLUICE_THROW(s.synchronize(), ErrorCode::capture_unsupported);
    EXPECT_SLUICE_THROW(cap.end(), ErrorCode::capture_failed);
  }
  EXPECT_EQ(got.count(Level::warn, "poisoned: stream synchronize"), 1u);

  // Info: starting and stopping a trace.
  const std::string path = trace_path("log");
  RemoveFile cleanup{path};
  sluice::log::set_level(Level::info);
  sluice::trace::start(path);
  sluice::trace::stop();
  EXPECT_EQ(got.count(Level::info, "trace started: " + path), 1u);
  EXPECT_EQ(got.count(Level::info, "trace stopped: " + path), 1u);

  // Back to stderr: the callback hears nothing more.
  const std::size_t heard = got.size();
  sluice::log::set_callback({});
  sluice::log::set_level(Level::debug);
  ::testing::internal::CaptureStderr();
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "sluice [debug] stale handle used")) << err;
  EXPECT_EQ(got.size(), heard);
}

TEST_F(Trace, LoggingAndTracingChangeNoResult) {
  const std::size_t n = 1 << 16;
  const std::vector<std::uint8_t> expected = expected_pipeline(n);

  sluice::log::set_level(Level::off);
  EXPECT_EQ(run_pipeline(dev_, n), expected) << "logging off";

  Collector got;
  sluice::log::set_callback(got.callback());
  sluice::log::set_level(Level::debug);
  EXPECT_EQ(run_pipeline(dev_, n), expected) << "logging at debug to a callback";
  EXPECT_GE(got.count(Level::debug, "block cache full"), 1u) << "the run was logged";

  const std::string path = trace_path("result");
  RemoveFile cleanup{path};
  {
    sluice::trace::Session tracing(path);
    sluice::set_counters_enabled(true);
    EXPECT_EQ(run_pipeline(dev_, n), expected) << "logging, tracing and counting";
  }
  EXPECT_FALSE(parse_trace(read_file(path)).empty());

  sluice::log::set_level(Level::off);
  sluice::set_counters_enabled(false);
  EXPECT_EQ(run_pipeline(dev_, n), expected) << "all off again";
}

TEST_F(Trace, LogCallbackLifetimeAndExceptions) {
  // A replaced callable is destroyed once the replacement returns; the current one lives.
  auto token1 = std::make_shared<int>(1);
  auto token2 = std::make_shared<int>(2);
  std::weak_ptr<int> w1 = token1, w2 = token2;
  std::atomic<int> calls1{0}, calls2{0};
  sluice::log::set_callback([&calls1, t = std::move(token1)](Level, std::string_view) { ++calls1; });
  sluice::log::set_level(Level::debug);
  sluice::StreamRef stale = stale_stream(dev_);
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  EXPECT_EQ(calls1.load(), 1);
  EXPECT_FALSE(w1.expired());

  sluice::log::set_callback([&calls2, t = std::move(token2)](Level, std::string_view) { ++calls2; });
  EXPECT_TRUE(w1.expired()) << "the replaced callable is destroyed";
  EXPECT_FALSE(w2.expired());
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  EXPECT_EQ(calls1.load(), 1);
  EXPECT_EQ(calls2.load(), 1);

  // A callable that throws: the exception stays in the trampoline.
  std::atomic<int> threw{0};
  sluice::log::set_callback([&threw](Level, std::string_view) {
    ++threw;
    throw std::runtime_error("from the log callback");
  });
  EXPECT_TRUE(w2.expired());
  EXPECT_SLUICE_THROW(stale.synchronize(), ErrorCode::invalid_handle);
  EXPECT_EQ(threw.load(), 1);

  // The nothrow form, and back to stderr.
  std::atomic<int> calls3{0};
  EXPECT_TRUE(sluice::log::set_callback(std::nothrow, [&calls3](Level, std::string_view) {
                ++calls3;
              }).ok());
  EXPECT_EQ(stale.synchronize(std::nothrow).code(), ErrorCode::invalid_handle);
  EXPECT_EQ(calls3.load(), 1);
  sluice::log::set_level(Level::off);
  EXPECT_TRUE(sluice::log::set_callback(std::nothrow, {}).ok());
}

TEST_F(Trace, ReplacingTheLogCallbackWhileThreadsLog) {
  // Every callable owns a heap object it touches on every call: a call of a
  // destroyed callable is a use after free (ASan in the sanitizer build).
  std::atomic<std::uint64_t> calls{0};
  std::atomic<int> callables_called{0};
  std::atomic<bool> done{false};
  auto make = [&](int i) {
    auto owned = std::make_shared<std::vector<int>>(64, i);
    auto first = std::make_shared<std::atomic<bool>>(false);
    return [&calls, &callables_called, owned, first](Level, std::string_view text) {
      (*owned)[text.size() % owned->size()] += 1;
      if (!first->exchange(true)) callables_called.fetch_add(1);
      calls.fetch_add(1, std::memory_order_relaxed);
    };
  };
  sluice::log::set_callback(make(0));
  sluice::log::set_level(Level::debug);
  sluice::StreamRef stale = stale_stream(dev_);

  std::vector<std::thread> loggers;
  for (int t = 0; t < 4; ++t) {
    loggers.emplace_back([&] {
      while (!done.load()) {
        if (stale.synchronize(std::nothrow).code() != ErrorCode::invalid_handle) std::abort();
      }
    });
  }
  for (int spin = 0; calls.load() < 100 && spin < 5000; ++spin) sleep_ms(1);
  for (int i = 1; i <= 300; ++i) {
    sluice::log::set_callback(make(i));
    if (i % 30 == 0) {  // let the loggers reach this callable now and then
      const std::uint64_t seen = calls.load();
      for (int spin = 0; calls.load() == seen && spin < 200; ++spin) sleep_ms(1);
    }
  }
  done = true;
  for (std::thread& t : loggers) t.join();
  EXPECT_GE(calls.load(), 300u);
  EXPECT_GE(callables_called.load(), 2) << "the replacements raced with the loggers";
  sluice::log::set_level(Level::off);
  sluice::log::set_callback({});
}
