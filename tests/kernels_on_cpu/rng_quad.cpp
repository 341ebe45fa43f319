// kernels/rng.cu on the CPU (g++ with cuda_stub.h, threads run one at a time):
// the four-states-per-thread kernels (generate_quad) and their advance must give
// the same draws and states as the one-thread-per-state kernels, for states on and
// off a Philox block boundary, every kind, and one to three parts per group.
#include <cstdio>
#include <cstring>
#include <vector>
#include <cstdlib>
dim3 blockIdx, blockDim, threadIdx, gridDim;
#include "../../kernels/rng.cu"
template <class F> void launch(unsigned grid, unsigned block, F f) {
  gridDim = {grid, 1, 1}; blockDim = {block, 1, 1};
  for (unsigned b = 0; b < grid; ++b) for (unsigned t = 0; t < block; ++t) {
    blockIdx = {b, 0, 0}; threadIdx = {t, 0, 0}; f();
  }
}
typedef void (*Draw)(sluice_rng_state*, u64, float*, u64, u32);
typedef void (*Quad)(sluice_rng_state*, u64, float*, u64, u64, u64, u32);
typedef void (*Adv)(sluice_rng_state*, u64, u64);
typedef void (*Split)(const sluice_rng_state*, u64, float*, u64, u32, u64, u64);
int main() {
  int bad = 0;
  Draw draws[3] = {(Draw)sluice_rng_kernel_u32, sluice_rng_kernel_uniform, sluice_rng_kernel_normal};
  Quad quads[3] = {(Quad)sluice_rng_kernel_u32_quad, sluice_rng_kernel_uniform_quad, sluice_rng_kernel_normal_quad};
  Adv advs[3] = {sluice_rng_kernel_u32_advance, sluice_rng_kernel_uniform_advance, sluice_rng_kernel_normal_advance};
  for (int kind = 0; kind < 3; ++kind)
  for (u64 n : {4ull, 8ull, 64ull})
  for (u64 pre : {0ull, 1ull, 3ull, 4ull})
  for (u64 count : {1ull, 3ull, 4ull, 7ull, 16ull, 33ull})
  for (u64 parts : {1ull, 2ull, 3ull}) {
    std::vector<sluice_rng_state> a(n), b;
    launch((n + 255) / 256, 256, [&] { sluice_rng_kernel_init(a.data(), n, 1234, 0); });
    std::vector<float> junk(n * 8);
    // a prefix of `pre` draws (states off the block boundary when pre % 4 != 0)
    if (pre) launch((n + 255) / 256, 256, [&] { draws[kind](a.data(), n, junk.data(), pre, 0); });
    // also make one state unaligned alone, in some cases
    if (count == 7 && n >= 8) { std::vector<float> j1(1); sluice_rng_next(&a[5]); }
    b = a;
    std::vector<float> want(n * count), got(n * count, -1);
    launch((n + 255) / 256, 256, [&] { draws[kind](a.data(), n, want.data(), count, 0); });
    u64 per = (count + parts - 1) / parts; per = (per + 3) / 4 * 4;
    u64 p2 = (count + per - 1) / per;
    u64 threads = n / 4 * p2;
    launch((threads + 255) / 256, 256, [&] { quads[kind](b.data(), n, got.data(), count, p2, per, p2 == 1); });
    if (p2 != 1) launch((n + 255) / 256, 256, [&] { advs[kind](b.data(), n, count); });
    if (memcmp(want.data(), got.data(), want.size() * 4)) { bad++; printf("draws differ kind=%d n=%llu pre=%llu count=%llu parts=%llu\n", kind, n, pre, count, p2); }
    if (memcmp(a.data(), b.data(), n * sizeof(sluice_rng_state))) { bad++; printf("states differ kind=%d n=%llu pre=%llu count=%llu parts=%llu\n", kind, n, pre, count, p2); }
  }
  // States at a position past 3 (written by a user: curand never leaves one) draw
  // output.x with no refresh until the position wraps, as curand() does: the quad
  // and split kernels, and their advance, give the one-thread-per-state kernels'
  // draws and states.
  Split splits[3] = {(Split)sluice_rng_kernel_u32_split, sluice_rng_kernel_uniform_split, sluice_rng_kernel_normal_split};
  for (int kind = 0; kind < 3; ++kind)
  for (unsigned pos : {4u, 5u, 100u, 0xFFFFFFFDu, 0xFFFFFFFFu})
  for (u64 count : {1ull, 3ull, 7ull, 16ull})
  for (u64 parts : {1ull, 2ull, 3ull})
  for (int split = 0; split < 2; ++split) {
    const u64 n = 8;
    std::vector<sluice_rng_state> a(n), b;
    launch(1, 256, [&] { sluice_rng_kernel_init(a.data(), n, 99, 0); });
    a[1].position = pos;
    a[6].position = pos + 1;
    b = a;
    std::vector<float> want(n * count), got(n * count, -1);
    launch(1, 256, [&] { draws[kind](a.data(), n, want.data(), count, 0); });
    u64 per = (count + parts - 1) / parts; per = (per + 3) / 4 * 4;
    u64 p2 = (count + per - 1) / per;
    if (split) {
      launch(1, 256, [&] { splits[kind](b.data(), n, got.data(), count, 0, p2, per); });
      launch(1, 256, [&] { advs[kind](b.data(), n, count); });
    } else {
      launch(1, 256, [&] { quads[kind](b.data(), n, got.data(), count, p2, per, p2 == 1); });
      if (p2 != 1) launch(1, 256, [&] { advs[kind](b.data(), n, count); });
    }
    if (memcmp(want.data(), got.data(), want.size() * 4)) { bad++; printf("draws differ past position 3: kind=%d pos=%u count=%llu parts=%llu %s\n", kind, pos, count, p2, split ? "split" : "quad"); }
    if (memcmp(a.data(), b.data(), n * sizeof(sluice_rng_state))) { bad++; printf("states differ past position 3: kind=%d pos=%u count=%llu parts=%llu %s\n", kind, pos, count, p2, split ? "split" : "quad"); }
  }
  // A position out of 0..3 (a corrupt state) reads output.x and counts on, as
  // cuRAND's curand() does (`switch (STATE++) { default: x; ... case 3: w; }`)
  // and the host's Philox (src/rng/philox.rs) too.
  for (unsigned pos : {0u, 1u, 2u, 3u, 4u, 5u, 0xFFFFFFFFu}) {
    sluice_rng_state s = {};
    for (int i = 0; i < 4; ++i) s.output[i] = 0xA0 + i;
    s.position = pos;
    unsigned want = pos <= 3 ? 0xA0 + pos : 0xA0, got = sluice_rng_next(&s);
    unsigned next = pos == 3 ? 0 : pos + 1;
    if (got != want || s.position != next) {
      bad++;
      printf("position %u: drew %#x (want %#x), position then %u (want %u)\n", pos, got, want, s.position, next);
    }
  }
  printf("%s: %d mismatches\n", bad ? "FAIL" : "PASS", bad);
  return bad != 0;
}
