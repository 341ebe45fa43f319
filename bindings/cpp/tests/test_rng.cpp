// sluice::Rng and sluice::RngCheckpoint, mirroring tests/rng_ops.rs: cuRAND's
// recorded draws, save/run/restore/run, checkpoints through bytes and across
// processes, corruption, bad arguments, and draws inside a captured graph.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sluice_test.hpp"

#ifndef SLUICE_TEST_DATA_DIR
#error "SLUICE_TEST_DATA_DIR (the repository's tests/data) must be defined"
#endif

using sluice::ErrorCode;
using sluice::RngDistribution;
using sluice::RngLayout;

namespace {

constexpr RngDistribution kDists[3] = {RngDistribution::u32, RngDistribution::uniform,
                                       RngDistribution::normal};

const char* name(RngDistribution d) {
  switch (d) {
    case RngDistribution::u32:
      return "u32";
    case RngDistribution::uniform:
      return "uniform";
    case RngDistribution::normal:
      return "normal";
  }
  return "?";
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(f),
                                    std::istreambuf_iterator<char>());
}

void write_file(const std::string& path, const void* data, std::size_t len) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(len));
}

std::uint32_t word_at(const std::uint8_t* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

float float_of(std::uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}

std::vector<std::uint32_t> words(const std::vector<std::uint8_t>& b) {
  std::vector<std::uint32_t> out(b.size() / 4);
  std::memcpy(out.data(), b.data(), out.size() * 4);
  return out;
}

/// The reference file: `count` raw, uniform and normal draws of `n` states
/// (sample-major, each block drawn after the one before), then the final states.
struct Reference {
  std::uint64_t seed = 0;
  std::size_t n = 0;
  std::size_t count = 0;
  std::array<std::vector<std::uint32_t>, 3> draws;
  std::vector<std::vector<std::uint8_t>> states;
};

Reference reference(const std::vector<std::uint8_t>& b, std::uint64_t seed, std::size_t n,
                    std::size_t count) {
  const std::size_t m = n * count;
  Reference r;
  r.seed = seed;
  r.n = n;
  r.count = count;
  EXPECT_EQ(b.size(), 3 * m * 4 + n * sluice::kRngStateBytes) << "reference file size";
  if (b.size() != 3 * m * 4 + n * sluice::kRngStateBytes) return r;
  for (std::size_t k = 0; k < 3; ++k) {
    for (std::size_t i = 0; i < m; ++i) r.draws[k].push_back(word_at(&b[(k * m + i) * 4]));
  }
  for (std::size_t i = 0; i < n; ++i) {
    auto first = b.begin() + static_cast<std::ptrdiff_t>(3 * m * 4 + i * sluice::kRngStateBytes);
    r.states.emplace_back(first, first + static_cast<std::ptrdiff_t>(sluice::kRngStateBytes));
  }
  return r;
}

/// Draws against cuRAND's: bit for bit, except normals on the host backend (within
/// 1e-5: the host's Box-Muller uses libm).
void check_draws(const std::string& what, bool cuda, const std::vector<std::uint32_t>& got,
                 const std::vector<std::uint32_t>& want, RngDistribution dist) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (dist == RngDistribution::normal && !cuda) {
      ASSERT_LE(std::fabs(float_of(got[i]) - float_of(want[i])), 1e-5f)
          << what << " normal " << i << ": " << float_of(got[i]) << " vs cuRAND "
          << float_of(want[i]);
    } else {
      ASSERT_EQ(got[i], want[i]) << what << " " << name(dist) << " draw " << i;
    }
  }
}

std::vector<std::uint8_t> read_states(sluice::StreamRef s, sluice::RngRef rng) {
  sluice::Buffer st = rng.states();
  return sluice::read_vector<std::uint8_t>(s, st, 0, st.size());
}

class RngTest : public SluiceTest {
 protected:
  bool cuda() const { return dev_.props().backend == sluice::Backend::cuda; }

  void check_against(const Reference& r, RngLayout layout) {
    sluice::Stream s = sluice::Stream::create(dev_);
    sluice::Rng rng = sluice::Rng::create(s, r.seed, r.n);
    EXPECT_EQ(rng.n_states(), r.n);
    EXPECT_EQ(rng.seed(), r.seed);
    sluice::Buffer out = sluice::Buffer::alloc(s, r.n * r.count * 4);
    const std::string what = layout == RngLayout::sample_major ? "sample-major" : "state-major";
    for (std::size_t k = 0; k < 3; ++k) {
      rng.generate(s, kDists[k], layout, out, 0, r.count);
      std::vector<std::uint32_t> got = sluice::read_vector<std::uint32_t>(s, out, 0, r.n * r.count);
      if (layout == RngLayout::state_major) {
        std::vector<std::uint32_t> t = got;
        for (std::size_t i = 0; i < r.n; ++i) {
          for (std::size_t j = 0; j < r.count; ++j) got[j * r.n + i] = t[i * r.count + j];
        }
      }
      check_draws(what, cuda(), got, r.draws[k], kDists[k]);
    }
    std::vector<std::uint8_t> states = read_states(s, rng);
    ASSERT_EQ(states.size(), r.n * sluice::kRngStateBytes);
    for (std::size_t i = 0; i < r.n; ++i) {
      const std::uint8_t* g = &states[i * sluice::kRngStateBytes];
      const std::uint8_t* w = r.states[i].data();
      if (cuda()) {
        EXPECT_EQ(std::memcmp(g, w, sluice::kRngStateBytes), 0) << "final state " << i;
      } else {  // boxmuller_extra (word 13) within 1e-5, the rest exactly
        EXPECT_LE(std::fabs(float_of(word_at(g + 52)) - float_of(word_at(w + 52))), 1e-5f);
        EXPECT_EQ(std::memcmp(g, w, 52), 0) << "final state " << i;
        EXPECT_EQ(std::memcmp(g + 56, w + 56, 8), 0) << "final state " << i;
      }
    }
  }

  /// draw() of tests/rng_ops.rs: per step, three blocks of `count` draws (the
  /// step's distribution, raw, normal) into `out`, read back after each step.
  static std::vector<std::uint32_t> draw(sluice::StreamRef s, sluice::RngRef rng,
                                         sluice::BufferRef out, std::size_t steps) {
    const std::size_t n = rng.n_states();
    const std::size_t words_total = out.size() / 4;
    const std::size_t count = words_total / n / 3;
    std::vector<std::uint32_t> all;
    for (std::size_t step = 0; step < steps; ++step) {
      const RngDistribution parts[3] = {kDists[step % 3], RngDistribution::u32,
                                        RngDistribution::normal};
      for (std::size_t p = 0; p < 3; ++p) {
        rng.generate(s, parts[p], RngLayout::sample_major, out, p * n * count * 4, count);
      }
      std::vector<std::uint32_t> w = sluice::read_vector<std::uint32_t>(s, out, 0, words_total);
      all.insert(all.end(), w.begin(), w.end());
    }
    return all;
  }
};

}  // namespace

TEST_F(RngTest, DrawsEqualCurandsRecordedDraws) {
  Reference r = reference(read_file(SLUICE_TEST_DATA_DIR "/curand_philox_8x9.bin"),
                          0x243F6A8885A308D3ull, 8, 9);
  ASSERT_EQ(r.states.size(), 8u);
  check_against(r, RngLayout::sample_major);
  check_against(r, RngLayout::state_major);
}

TEST_F(RngTest, SaveRunRestoreRun) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Rng rng = sluice::Rng::create(s, 7, 257);
  sluice::Buffer out = sluice::Buffer::alloc(s, 257 * 5 * 3 * 4);
  draw(s, rng, out, 4);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, rng);
  EXPECT_EQ(ckpt.n_states(), 257u);
  rng.save(s, ckpt);
  auto first = draw(s, rng, out, 6);
  rng.restore(s, ckpt);
  EXPECT_EQ(draw(s, rng, out, 6), first);
  // Restoring on another stream is ordered after the draws on the first.
  sluice::Stream t = sluice::Stream::create(dev_);
  rng.restore(t, ckpt);
  EXPECT_EQ(draw(t, rng, out, 6), first);
}

TEST_F(RngTest, CheckpointSurvivesSerializeAndDeserialize) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Rng rng = sluice::Rng::create(s, 0xfeed, 33);
  sluice::Buffer out = sluice::Buffer::alloc(s, 33 * 7 * 3 * 4);
  draw(s, rng, out, 2);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, rng);
  rng.save(s, ckpt);
  std::vector<std::uint8_t> bytes = ckpt.serialize();
  EXPECT_EQ(ckpt.serialized_size(), bytes.size());
  ASSERT_GE(bytes.size(), 8u);
  EXPECT_EQ(std::memcmp(bytes.data(), "SLRNGCK\0", 8), 0);
  auto want = draw(s, rng, out, 3);

  sluice::RngCheckpoint back = sluice::RngCheckpoint::deserialize(dev_, bytes);
  sluice::RngInfo info = back.info();
  EXPECT_EQ(info.n_states, 33u);
  EXPECT_EQ(info.seed, 0xfeedu);
  sluice::Rng other = sluice::Rng::create(s, 1, 33);
  other.restore(s, back);
  EXPECT_EQ(other.seed(), 0xfeedu);
  EXPECT_EQ(draw(s, other, out, 3), want);
  // The same bytes a second time, through every form.
  EXPECT_EQ(back.serialize(), bytes);
  std::vector<std::uint8_t> big(bytes.size() + 10, 0);
  EXPECT_EQ(back.serialize_into(big), bytes.size());
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), big.begin()));
  sluice::Result<std::vector<std::uint8_t>> r = sluice::RngCheckpointRef(back).serialize(std::nothrow);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, bytes);
  sluice::RngCheckpoint raw = sluice::RngCheckpoint::deserialize(dev_, bytes.data(), bytes.size());
  EXPECT_EQ(raw.serialize(), bytes);
}

// The child half of CheckpointResumesInAnotherProcess.
TEST_F(RngTest, ChildResumeFromFile) {
  const char* path = std::getenv("SLUICE_RNG_CHILD");
  if (!path) GTEST_SKIP() << "the child of CheckpointResumesInAnotherProcess";
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::deserialize(dev_, read_file(path));
  sluice::Rng rng = sluice::Rng::create(s, 12345, ckpt.n_states());
  rng.restore(s, ckpt);
  sluice::Buffer out = sluice::Buffer::alloc(s, ckpt.n_states() * 4 * 3 * 4);
  auto got = draw(s, rng, out, 5);
  write_file(std::string(path) + ".draws", got.data(), got.size() * 4);
}

TEST_F(RngTest, CheckpointResumesInAnotherProcess) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Rng rng = sluice::Rng::create(s, 31337, 64);
  sluice::Buffer out = sluice::Buffer::alloc(s, 64 * 4 * 3 * 4);
  draw(s, rng, out, 3);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, rng);
  rng.save(s, ckpt);
  std::vector<std::uint8_t> bytes = ckpt.serialize();
  auto want = draw(s, rng, out, 5);

  char self[4096] = {};
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(len, 0);
  char dir_template[] = "/tmp/sluice-rng-cpp.XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/ckpt.bin";
  write_file(path, bytes.data(), bytes.size());
  const std::string cmd = "SLUICE_RNG_CHILD='" + path + "' '" + std::string(self) +
                          "' --gtest_filter=RngTest.ChildResumeFromFile >'" + dir +
                          "/child.log' 2>&1";
  const int status = std::system(cmd.c_str());
  const std::vector<std::uint8_t> raw = read_file(path + ".draws");
  EXPECT_EQ(status, 0) << "child process failed; log in " << dir;
  EXPECT_EQ(words(raw), want) << "the other process drew something else";
  if (status == 0) {
    std::remove((path + ".draws").c_str());
    std::remove(path.c_str());
    std::remove((dir + "/child.log").c_str());
    rmdir(dir.c_str());
  }
}

// serialize waits for the save, not for later work on its stream: the bytes hold
// the save point while a long host callback and further draws follow it.
TEST_F(RngTest, SerializeHoldsTheSavePointWhileTheStreamGoesOn) {
  sluice::Stream s = sluice::Stream::create(dev_);
  const std::size_t n = 1024;
  sluice::Rng rng = sluice::Rng::create(s, 5, n);
  sluice::Buffer out = sluice::Buffer::alloc(s, n * 8 * 4);
  rng.generate(s, RngDistribution::uniform, RngLayout::sample_major, out, 0, 8);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, rng);
  rng.save(s, ckpt);
  const std::vector<std::uint8_t> saved = read_states(s, rng);
  const auto spin = std::chrono::milliseconds(400);
  s.host_callback([spin] { std::this_thread::sleep_for(spin); });
  rng.generate(s, RngDistribution::normal, RngLayout::sample_major, out, 0, 8);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint8_t> bytes = ckpt.serialize();
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(took, spin / 2) << "serialize waited for later work on the stream";
  EXPECT_NE(std::search(bytes.begin(), bytes.end(), saved.begin(), saved.end()), bytes.end())
      << "the bytes do not hold the save point";
  sluice::RngCheckpoint back = sluice::RngCheckpoint::deserialize(dev_, bytes);
  sluice::Rng fresh = sluice::Rng::create(s, 1, n);
  fresh.restore(s, back);
  EXPECT_EQ(read_states(s, fresh), saved);
  EXPECT_NE(read_states(s, rng), saved) << "the draws after the save changed nothing";
}

TEST_F(RngTest, EveryBitFlipAndTruncationIsRefused) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Rng rng = sluice::Rng::create(s, 11, 2);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, rng);
  rng.save(s, ckpt);
  const std::vector<std::uint8_t> bytes = ckpt.serialize();
  const std::uint64_t live = sluice::live_handles();
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned bit = 0; bit < 8; ++bit) {
      std::vector<std::uint8_t> b = bytes;
      b[i] = static_cast<std::uint8_t>(b[i] ^ (1u << bit));
      sluice::Result<sluice::RngCheckpoint> r =
          sluice::RngCheckpoint::deserialize(std::nothrow, dev_, b);
      ASSERT_FALSE(r.ok()) << "byte " << i << " bit " << bit << " was accepted";
      ASSERT_EQ(r.code(), ErrorCode::corrupt_data) << "byte " << i << " bit " << bit;
      ASSERT_NE(std::string(r.error().message()), "");
    }
  }
  for (std::size_t len = 0; len < bytes.size(); ++len) {
    sluice::Result<sluice::RngCheckpoint> r =
        sluice::RngCheckpoint::deserialize(std::nothrow, dev_, bytes.data(), len);
    ASSERT_EQ(r.code(), ErrorCode::corrupt_data) << "truncated to " << len;
  }
  EXPECT_EQ(sluice::live_handles(), live) << "refused deserializations left handles";
  EXPECT_SLUICE_THROW(sluice::RngCheckpoint::deserialize(dev_, nullptr, 0),
                      ErrorCode::corrupt_data);
  EXPECT_TRUE(sluice::RngCheckpoint::deserialize(std::nothrow, dev_, bytes).ok());
}

// A graph that draws (and saves), replayed 3 times, gives 3 different draws equal
// to 3 eager draws, and each replay refreshes the checkpoint.
TEST_F(RngTest, ReplayedGraphDrawsAnewLikeEagerDraws) {
  sluice::Stream s = sluice::Stream::create(dev_);
  const std::size_t n = 300, count = 6;
  sluice::Rng eager = sluice::Rng::create(s, 2024, n);
  sluice::Rng graphed = sluice::Rng::create(s, 2024, n);
  sluice::Buffer out = sluice::Buffer::alloc(s, n * count * 4);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, graphed);
  std::vector<std::vector<std::uint32_t>> want;
  for (int i = 0; i < 3; ++i) {
    for (RngDistribution d : kDists) {
      eager.generate(s, d, RngLayout::sample_major, out, 0, count);
      want.push_back(sluice::read_vector<std::uint32_t>(s, out, 0, n * count));
    }
  }
  sluice::Buffer g_out = sluice::Buffer::alloc(s, n * count * 3 * 4);
  sluice::GraphExec exec;
  {
    sluice::Capture cap(s);
    for (std::size_t p = 0; p < 3; ++p) {
      graphed.generate(s, kDists[p], RngLayout::sample_major, g_out, p * n * count * 4, count);
    }
    graphed.save(s, ckpt);
    exec = cap.end().instantiate();
  }
  std::vector<std::vector<std::uint32_t>> got;
  std::vector<std::vector<std::uint8_t>> saves;
  for (int i = 0; i < 3; ++i) {
    exec.launch(s);
    auto all = sluice::read_vector<std::uint32_t>(s, g_out, 0, 3 * n * count);
    for (std::size_t p = 0; p < 3; ++p) {
      got.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(p * n * count),
                       all.begin() + static_cast<std::ptrdiff_t>((p + 1) * n * count));
    }
    saves.push_back(ckpt.serialize());
  }
  EXPECT_EQ(got, want) << "3 replays must equal 3 eager draws";
  EXPECT_NE(got[0], got[3]) << "a replay repeated the previous draw";
  EXPECT_NE(saves[0], saves[1]) << "the captured save did not refresh";
  sluice::RngCheckpoint eager_ckpt = sluice::RngCheckpoint::create(s, eager);
  eager.save(s, eager_ckpt);
  EXPECT_EQ(saves[2], eager_ckpt.serialize());
}

TEST_F(RngTest, BadArgumentsGetClearErrors) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Result<sluice::Rng> none = sluice::Rng::create(std::nothrow, s, 1, 0);
  ASSERT_EQ(none.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(none.error().message(), "at least one state")) << none.error().message();

  sluice::Rng rng = sluice::Rng::create(s, 1, 10);
  sluice::Buffer small = sluice::Buffer::alloc(s, 10 * 3 * 4);
  EXPECT_SLUICE_THROW(rng.generate(s, RngDistribution::u32, RngLayout::sample_major, small, 0, 4),
                      ErrorCode::out_of_range);
  sluice::Result<void> r =
      rng.generate(std::nothrow, s, RngDistribution::u32, RngLayout::sample_major, small, 2, 1);
  ASSERT_EQ(r.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(r.error().message(), "multiple of 4")) << r.error().message();
  EXPECT_EQ(rng.generate(std::nothrow, s, static_cast<RngDistribution>(9),
                         RngLayout::sample_major, small, 0, 1)
                .code(),
            ErrorCode::invalid_argument);
  EXPECT_EQ(rng.generate(std::nothrow, s, RngDistribution::u32, static_cast<RngLayout>(0), small,
                         0, 1)
                .code(),
            ErrorCode::invalid_argument);
  sluice::Buffer pinned = sluice::Buffer::alloc_pinned(dev_, 400);
  r = rng.generate(std::nothrow, s, RngDistribution::u32, RngLayout::sample_major, pinned, 0, 1);
  ASSERT_EQ(r.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(r.error().message(), "device buffer")) << r.error().message();

  sluice::Rng other = sluice::Rng::create(s, 1, 11);
  sluice::RngCheckpoint ckpt = sluice::RngCheckpoint::create(s, other);
  r = rng.save(std::nothrow, s, ckpt);
  ASSERT_EQ(r.code(), ErrorCode::invalid_argument);
  EXPECT_TRUE(contains(r.error().message(), "11 states")) << r.error().message();
  EXPECT_SLUICE_THROW(rng.restore(s, ckpt), ErrorCode::invalid_argument);
  std::vector<std::uint8_t> wrong(3);
  EXPECT_SLUICE_THROW(ckpt.serialize_into(wrong), ErrorCode::out_of_range);
  EXPECT_SLUICE_THROW(ckpt.serialize_into(nullptr, 0), ErrorCode::out_of_range);
  // NULL holds no bytes, whatever the capacity says (it wrote into a local once).
  EXPECT_SLUICE_THROW(ckpt.serialize_into(nullptr, 4096), ErrorCode::out_of_range);

  // Nothing was drawn by the refused calls: the draws are a fresh generator's.
  sluice::Rng fresh = sluice::Rng::create(s, 1, 10);
  sluice::Buffer a = sluice::Buffer::alloc(s, 40);
  sluice::Buffer b = sluice::Buffer::alloc(s, 40);
  rng.generate(s, RngDistribution::u32, RngLayout::sample_major, a, 0, 1);
  fresh.generate(s, RngDistribution::u32, RngLayout::sample_major, b, 0, 1);
  EXPECT_EQ(sluice::read_vector<std::uint32_t>(s, a, 0, 10),
            sluice::read_vector<std::uint32_t>(s, b, 0, 10));

  // Generators and checkpoints allocate, so they cannot be made during a capture;
  // the capture then fails.
  {
    sluice::Capture cap(s);
    EXPECT_SLUICE_THROW(sluice::RngCheckpoint::create(s, rng), ErrorCode::capture_unsupported);
    EXPECT_EQ(cap.end(std::nothrow).code(), ErrorCode::capture_failed);
  }
  {
    sluice::Capture cap(s);
    EXPECT_SLUICE_THROW(sluice::Rng::create(s, 1, 1), ErrorCode::capture_unsupported);
    EXPECT_EQ(cap.end(std::nothrow).code(), ErrorCode::capture_failed);
  }
}

// Owners: moves, release/adopt, idempotent close, views, and stale handles.
TEST_F(RngTest, OwnershipAndStaleHandles) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Rng a = sluice::Rng::create(s, 3, 4);
  sluice::RngRef view = a;
  sluice::Rng b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from owners are empty
  EXPECT_TRUE(b);
  EXPECT_EQ(view.raw().bits, b.raw().bits);
  EXPECT_EQ(view.n_states(), 4u);
  sluice::Rng c = sluice::Rng::adopt(b.release());
  EXPECT_FALSE(b);
  sluice::RngCheckpoint ck = sluice::RngCheckpoint::create(s, c);
  sluice::RngCheckpointRef ck_view = ck;
  sluice::RngCheckpoint ck2 = std::move(ck);
  EXPECT_EQ(ck_view.n_states(), 4u);
  c.save(s, ck2);

  c.close();
  c.close();  // idempotent
  ck2.close();
  EXPECT_SLUICE_THROW(view.info(), ErrorCode::invalid_handle);
  sluice::Buffer out = sluice::Buffer::alloc(s, 64);
  EXPECT_SLUICE_THROW(view.generate(s, RngDistribution::u32, RngLayout::sample_major, out, 0, 1),
                      ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(view.states(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(ck_view.serialize(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(ck_view.serialized_size(), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(ck_view.info(), ErrorCode::invalid_handle);
  sluice::Rng live = sluice::Rng::create(s, 3, 4);
  EXPECT_SLUICE_THROW(live.save(s, ck_view), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(live.restore(s, ck_view), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::RngCheckpoint::create(s, view), ErrorCode::invalid_handle);
  EXPECT_SLUICE_THROW(sluice::Rng::create(s, 1, 1).save(s, sluice::RngCheckpointRef()),
                      ErrorCode::invalid_handle);
}

// The states buffer is the generator's: a new handle each time, seen changing by
// draws, and still readable after the generator is destroyed.
TEST_F(RngTest, StatesBuffer) {
  sluice::Stream s = sluice::Stream::create(dev_);
  sluice::Rng rng = sluice::Rng::create(s, 77, 5);
  sluice::Buffer st = rng.states();
  sluice::BufferInfo info = st.info();
  EXPECT_EQ(info.kind, sluice::BufferKind::device);
  EXPECT_EQ(info.size, 5 * sluice::kRngStateBytes);
  auto before = sluice::read_vector<std::uint8_t>(s, st, 0, st.size());
  for (std::size_t i = 0; i < 5; ++i) {  // key words 8..9 hold the seed
    std::uint64_t key;
    std::memcpy(&key, &before[i * sluice::kRngStateBytes + 32], 8);
    EXPECT_EQ(key, 77u) << "state " << i;
  }
  sluice::Buffer out = sluice::Buffer::alloc(s, 5 * 4);
  rng.generate(s, RngDistribution::u32, RngLayout::sample_major, out, 0, 1);
  auto after = sluice::read_vector<std::uint8_t>(s, st, 0, st.size());
  EXPECT_NE(before, after);
  rng.close();
  EXPECT_EQ(sluice::read_vector<std::uint8_t>(s, st, 0, st.size()), after);
}
