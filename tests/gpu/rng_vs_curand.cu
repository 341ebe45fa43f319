// Checks sluice's RNG device code against cuRAND's own, on the GPU (built with nvcc
// by scripts/gpu-suite.sh, part `rng`).
//
//   rng_vs_curand check                 include/sluice/rng.cuh and kernels/rng.cu
//                                       against cuRAND: states, random call mixes,
//                                       both output layouts; exit 1 on any mismatch
//   rng_vs_curand vectors SEED N COUNT FILE
//                                       cuRAND's reference draws for sluice's tests:
//                                       curand_init(SEED, i, 0) for i < N, then COUNT
//                                       curand, COUNT curand_uniform and COUNT
//                                       curand_normal per state (sample-major), then
//                                       the N final states (64 bytes each)
#include <curand_kernel.h>
#include <sluice/rng.cuh>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../../kernels/rng.cu"

static_assert(sizeof(sluice_rng_state) == sizeof(curandStatePhilox4_32_10_t), "state size");

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                  \
              cudaGetErrorString(e_));                                           \
      exit(2);                                                                   \
    }                                                                            \
  } while (0)

__device__ unsigned long long mix(unsigned long long x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

__device__ bool same_state(const sluice_rng_state* a, const curandStatePhilox4_32_10_t* b) {
  const unsigned int* x = (const unsigned int*)a;
  const unsigned int* y = (const unsigned int*)b;
  for (int k = 0; k < 16; ++k)
    if (x[k] != y[k]) return false;
  return true;
}

struct Report {
  unsigned long long checks;
  unsigned int mismatches;
  int first_thread, first_step, first_op;
  unsigned int got, want;
};

// Each thread: a different (seed, subsequence, offset), then 300 random calls of
// next / uniform / normal / skipahead / skipahead_sequence on both states.
__global__ void mixed_calls(Report* r, int threads) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  unsigned long long seed = mix(t / 64 + 1);
  if (t % 7 == 0) seed = 0;
  unsigned long long sub = (t % 3 == 0) ? mix(t) : (unsigned long long)t;
  unsigned long long off = (t % 5 == 0) ? mix(t + 99) >> 20 : (unsigned long long)(t % 11);
  curandStatePhilox4_32_10_t c;
  sluice_rng_state s;
  curand_init(seed, sub, off, &c);
  sluice_rng_init(seed, sub, off, &s);
  auto fail = [&](int step, int op, unsigned got, unsigned want) {
    if (atomicAdd(&r->mismatches, 1u) == 0) {
      r->first_thread = t;
      r->first_step = step;
      r->first_op = op;
      r->got = got;
      r->want = want;
    }
  };
  if (!same_state(&s, &c)) fail(-1, -1, 0, 0);
  for (int step = 0; step < 300; ++step) {
    unsigned long long h = mix(((unsigned long long)t << 20) ^ step);
    int op = h % 8;
    unsigned got = 0, want = 0;
    switch (op) {
      case 0: case 1:
        got = sluice_rng_next(&s);
        want = curand(&c);
        break;
      case 2: case 3:
        got = __float_as_uint(sluice_rng_uniform(&s));
        want = __float_as_uint(curand_uniform(&c));
        break;
      case 4: case 5:
        got = __float_as_uint(sluice_rng_normal(&s));
        want = __float_as_uint(curand_normal(&c));
        break;
      case 6: {
        unsigned long long k = (h >> 8) % 1000;
        if ((h >> 40) % 16 == 0) k = h >> 24;
        sluice_rng_skipahead(k, &s);
        skipahead(k, &c);
        break;
      }
      default: {
        unsigned long long k = (h >> 8) % 5;
        sluice_rng_skipahead_sequence(k, &s);
        skipahead_sequence(k, &c);
        break;
      }
    }
    atomicAdd(&r->checks, 1ull);
    if (got != want || !same_state(&s, &c)) fail(step, op, got, want);
  }
}

// cuRAND's reference: init, then count raw, count uniform, count normal per state.
__global__ void reference(curandStatePhilox4_32_10_t* st, unsigned long long seed,
                          unsigned long long n, unsigned long long count, unsigned* raw,
                          float* uni, float* nor) {
  unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  if (i >= n) return;
  curandStatePhilox4_32_10_t s;
  curand_init(seed, i, 0, &s);
  for (unsigned long long j = 0; j < count; ++j) raw[j * n + i] = curand(&s);
  for (unsigned long long j = 0; j < count; ++j) uni[j * n + i] = curand_uniform(&s);
  for (unsigned long long j = 0; j < count; ++j) nor[j * n + i] = curand_normal(&s);
  st[i] = s;
}

struct Draws {
  std::vector<unsigned> raw, uni, nor;
  std::vector<unsigned char> states;
};

static Draws run_reference(unsigned long long seed, unsigned long long n,
                           unsigned long long count) {
  curandStatePhilox4_32_10_t* st;
  unsigned *raw, *uni, *nor;
  size_t m = n * count;
  CK(cudaMalloc(&st, n * 64));
  CK(cudaMalloc(&raw, m * 4 + 4));
  CK(cudaMalloc(&uni, m * 4 + 4));
  CK(cudaMalloc(&nor, m * 4 + 4));
  reference<<<(n + 127) / 128, 128>>>(st, seed, n, count, raw, (float*)uni, (float*)nor);
  CK(cudaDeviceSynchronize());
  Draws d{std::vector<unsigned>(m), std::vector<unsigned>(m), std::vector<unsigned>(m),
          std::vector<unsigned char>(n * 64)};
  CK(cudaMemcpy(d.raw.data(), raw, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.uni.data(), uni, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.nor.data(), nor, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.states.data(), st, n * 64, cudaMemcpyDeviceToHost));
  cudaFree(st);
  cudaFree(raw);
  cudaFree(uni);
  cudaFree(nor);
  return d;
}

// The library's kernels (kernels/rng.cu), in one layout, from a given grid size.
static Draws run_sluice(unsigned long long seed, unsigned long long n, unsigned long long count,
                        unsigned layout, unsigned grid) {
  sluice_rng_state* st;
  unsigned *raw, *uni, *nor;
  size_t m = n * count;
  CK(cudaMalloc(&st, n * 64));
  CK(cudaMalloc(&raw, m * 4 + 4));
  CK(cudaMalloc(&uni, m * 4 + 4));
  CK(cudaMalloc(&nor, m * 4 + 4));
  sluice_rng_kernel_init<<<grid, 128>>>(st, n, seed, 0);
  sluice_rng_kernel_u32<<<grid, 128>>>(st, n, raw, count, layout);
  sluice_rng_kernel_uniform<<<grid, 128>>>(st, n, (float*)uni, count, layout);
  sluice_rng_kernel_normal<<<grid, 128>>>(st, n, (float*)nor, count, layout);
  CK(cudaDeviceSynchronize());
  Draws d{std::vector<unsigned>(m), std::vector<unsigned>(m), std::vector<unsigned>(m),
          std::vector<unsigned char>(n * 64)};
  CK(cudaMemcpy(d.raw.data(), raw, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.uni.data(), uni, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.nor.data(), nor, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.states.data(), st, n * 64, cudaMemcpyDeviceToHost));
  cudaFree(st);
  cudaFree(raw);
  cudaFree(uni);
  cudaFree(nor);
  if (layout == 1) {  // state-major -> sample-major, to compare
    Draws t = d;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < count; ++j) {
        t.raw[j * n + i] = d.raw[i * count + j];
        t.uni[j * n + i] = d.uni[i * count + j];
        t.nor[j * n + i] = d.nor[i * count + j];
      }
    return t;
  }
  return d;
}

// The split kernels (several threads per state), sample-major; normals in two
// calls so that the second starts with a pending second normal when c1 is odd.
static Draws run_split(unsigned long long seed, unsigned long long n, unsigned long long count,
                       unsigned long long parts, unsigned long long c1) {
  sluice_rng_state* st;
  unsigned *raw, *uni, *nor;
  size_t m = n * count;
  CK(cudaMalloc(&st, n * 64));
  CK(cudaMalloc(&raw, m * 4 + 4));
  CK(cudaMalloc(&uni, m * 4 + 4));
  CK(cudaMalloc(&nor, m * 4 + 4));
  auto per = [&](unsigned long long c) { return (c + parts - 1) / parts; };
  unsigned grid = (unsigned)((n * parts + 127) / 128);
  sluice_rng_kernel_init<<<(n + 127) / 128, 128>>>(st, n, seed, 0);
  sluice_rng_kernel_u32_split<<<grid, 128>>>(st, n, raw, count, 0, parts, per(count));
  sluice_rng_kernel_u32_advance<<<(n + 127) / 128, 128>>>(st, n, count);
  sluice_rng_kernel_uniform_split<<<grid, 128>>>(st, n, (float*)uni, count, 0, parts, per(count));
  sluice_rng_kernel_uniform_advance<<<(n + 127) / 128, 128>>>(st, n, count);
  sluice_rng_kernel_normal_split<<<grid, 128>>>(st, n, (float*)nor, c1, 0, parts, per(c1));
  sluice_rng_kernel_normal_advance<<<(n + 127) / 128, 128>>>(st, n, c1);
  sluice_rng_kernel_normal_split<<<grid, 128>>>(st, n, (float*)nor + c1 * n, count - c1, 0, parts,
                                                per(count - c1));
  sluice_rng_kernel_normal_advance<<<(n + 127) / 128, 128>>>(st, n, count - c1);
  CK(cudaDeviceSynchronize());
  Draws d{std::vector<unsigned>(m), std::vector<unsigned>(m), std::vector<unsigned>(m),
          std::vector<unsigned char>(n * 64)};
  CK(cudaMemcpy(d.raw.data(), raw, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.uni.data(), uni, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.nor.data(), nor, m * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(d.states.data(), st, n * 64, cudaMemcpyDeviceToHost));
  cudaFree(st);
  cudaFree(raw);
  cudaFree(uni);
  cudaFree(nor);
  return d;
}

static int compare(const char* what, const Draws& a, const Draws& b) {
  int bad = 0;
  const std::vector<unsigned>* xs[] = {&a.raw, &a.uni, &a.nor};
  const std::vector<unsigned>* ys[] = {&b.raw, &b.uni, &b.nor};
  const char* names[] = {"curand", "curand_uniform", "curand_normal"};
  for (int k = 0; k < 3; ++k) {
    size_t diff = 0;
    for (size_t i = 0; i < xs[k]->size(); ++i) diff += (*xs[k])[i] != (*ys[k])[i];
    printf("  %-32s %-15s %zu of %zu differ\n", what, names[k], diff, xs[k]->size());
    bad += diff != 0;
  }
  size_t sd = 0;
  for (size_t i = 0; i < a.states.size(); i += 64) sd += memcmp(&a.states[i], &b.states[i], 64) != 0;
  printf("  %-32s %-15s %zu of %zu differ\n", what, "final states", sd, a.states.size() / 64);
  return bad + (sd != 0);
}

int main(int argc, char** argv) {
  if (argc >= 2 && !strcmp(argv[1], "check")) {
    int bad = 0;
    Report* r;
    CK(cudaMallocManaged(&r, sizeof(Report)));
    memset(r, 0, sizeof(Report));
    int threads = 1 << 16;
    mixed_calls<<<threads / 128, 128>>>(r, threads);
    CK(cudaDeviceSynchronize());
    printf("rng.cuh vs cuRAND, random call mixes: %llu checks, %u mismatches\n", r->checks,
           r->mismatches);
    if (r->mismatches) {
      printf("  first: thread %d step %d op %d got %08x want %08x\n", r->first_thread,
             r->first_step, r->first_op, r->got, r->want);
      bad++;
    }
    struct Case { unsigned long long seed, n, count; unsigned grid; } cases[] = {
        {0x0123456789abcdefull, 1000, 37, 3},  // odd count: pending normal at the end
        {42, 4096, 64, 32},
        {0, 65536, 8, 512},
        {0xffffffffffffffffull, 333, 5, 1},
    };
    for (auto& c : cases) {
      Draws ref = run_reference(c.seed, c.n, c.count);
      for (unsigned layout = 0; layout < 2; ++layout) {
        char what[96];
        snprintf(what, sizeof what, "kernels seed %llx n %llu c %llu L%u", c.seed, c.n, c.count,
                 layout);
        bad += compare(what, run_sluice(c.seed, c.n, c.count, layout, c.grid), ref);
      }
      for (unsigned long long parts : {2ull, 3ull, 7ull}) {
        for (unsigned long long c1 : {c.count / 2 | 1, c.count / 2 & ~1ull}) {
          if (c1 > c.count) continue;
          char what[96];
          snprintf(what, sizeof what, "split n %llu c %llu parts %llu c1 %llu", c.n, c.count,
                   parts, c1);
          bad += compare(what, run_split(c.seed, c.n, c.count, parts, c1), ref);
        }
      }
    }
    printf(bad ? "FAIL\n" : "PASS\n");
    return bad ? 1 : 0;
  }
  if (argc == 6 && !strcmp(argv[1], "vectors")) {
    unsigned long long seed = strtoull(argv[2], 0, 0), n = strtoull(argv[3], 0, 0),
                       count = strtoull(argv[4], 0, 0);
    Draws d = run_reference(seed, n, count);
    FILE* f = fopen(argv[5], "wb");
    if (!f) return 2;
    fwrite(d.raw.data(), 4, d.raw.size(), f);
    fwrite(d.uni.data(), 4, d.uni.size(), f);
    fwrite(d.nor.data(), 4, d.nor.size(), f);
    fwrite(d.states.data(), 1, d.states.size(), f);
    fclose(f);
    return 0;
  }
  fprintf(stderr, "usage: rng_vs_curand check | vectors SEED N COUNT FILE\n");
  return 2;
}
