// How fast each of the RNG's generation kernels draws at a range of state counts
// (1 GiB of uniform floats, sample-major), against curandGenerateUniform: the quad
// kernel at several splits, one thread per state, and a one-Philox-block-per-step
// split (v_block, not in the library). Each variant's bits are checked against
// the per-state kernel's. It chose src/rng/device.rs's dispatch (runs 93, 94):
//   nvcc -O3 -std=c++17 -arch=sm_90 -I include benches/rng/kernel_sweep.cu -lcurand -o /tmp/sweep && /tmp/sweep
#include "../../kernels/rng.cu"
#include <curand.h>
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cstring>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

// One Philox block per iteration: thread t takes state t % n and blocks
// b = t / n, t / n + stride, ... (stride = threads / n); 4 coalesced row stores,
// streaming (__stcs) or plain.
template <bool STREAMING>
__global__ void __launch_bounds__(256) v_block(const sluice_rng_state* states, u64 n, u32* out, u64 count, u64 per_state) {
  const u64 t = blockIdx.x * (u64)blockDim.x + threadIdx.x;
  if (t >= n * per_state) return;
  const u64 i = t % n, b0 = t / n;
  const sluice_rng_state* p = states + i;
  unsigned c[4] = {p->ctr[0], p->ctr[1], p->ctr[2], p->ctr[3]};
  const unsigned key[2] = {p->key[0], p->key[1]};
  const u64 blocks = count / 4;
  counter_add(c, b0);
  for (u64 b = b0; b < blocks; b += per_state) {
    unsigned r[4];
    sluice_philox4x32_10(c, key, r);
    counter_add(c, per_state);
    u32* o = out + 4 * b * n + i;
#pragma unroll
    for (int d = 0; d < 4; ++d) {
      const u32 v = __float_as_uint(sluice_rng_u32_to_uniform(r[d]));
      if (STREAMING) __stcs(o + d * n, v);
      else o[d * n] = v;
    }
  }
}

template <class F>
static double time_ms(cudaStream_t s, F f, int reps = 15) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();
  CK(cudaStreamSynchronize(s));
  std::vector<float> v;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    v.push_back(ms);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

#ifndef SIZES
#define SIZES {8ull << 10, 16ull << 10, 32ull << 10, 64ull << 10, 256ull << 10, 1ull << 20, 4ull << 20}
#endif
int main() {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t total = 256ull << 20;
  u32 *out, *ref;
  CK(cudaMalloc(&out, total * 4));
  CK(cudaMalloc(&ref, total * 4));
  curandGenerator_t gen;
  curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10);
  curandSetStream(gen, s);
  curandSetPseudoRandomGeneratorSeed(gen, 1234);
  double host = total * 4 / 1e6 / time_ms(s, [&] { curandGenerateUniform(gen, (float*)out, total); });
  double mset = total * 4 / 1e6 / time_ms(s, [&] { cudaMemsetAsync(out, 1, total * 4, s); });
  printf("curandGenerateUniform %.0f GB/s, memset %.0f GB/s\n", host, mset);
  std::vector<u32> a(1 << 20), bvec(1 << 20);
  for (size_t n : SIZES) {
    const u64 count = total / n;
    sluice_rng_state* st;
    CK(cudaMalloc(&st, n * 64));
    sluice_rng_kernel_init<<<(n + 255) / 256, 256, 0, s>>>(st, n, 42, 0);
    // Reference: the per-state kernel on a copy of the states.
    sluice_rng_state* st2;
    CK(cudaMalloc(&st2, n * 64));
    CK(cudaMemcpyAsync(st2, st, n * 64, cudaMemcpyDeviceToDevice, s));
    sluice_rng_kernel_uniform<<<(n + 255) / 256, 256, 0, s>>>(st2, n, (float*)ref, count, 0);
    CK(cudaStreamSynchronize(s));
    auto check = [&](const char* what) {
      CK(cudaStreamSynchronize(s));
      // Sizes here divide 1 GiB evenly, so the last chunk is drawn too.
      size_t off[3] = {0, total / 2, total - (1 << 20)};
      for (size_t o : off) {
        CK(cudaMemcpy(a.data(), out + o, 4 << 20, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(bvec.data(), ref + o, 4 << 20, cudaMemcpyDeviceToHost));
        if (memcmp(a.data(), bvec.data(), 4 << 20) != 0) { printf("  %s: MISMATCH at chunk %zu\n", what, o); return; }
      }
    };
    auto gbs = [&](double ms) { return total * 4 / 1e6 / ms; };
    printf("\n%zuK states, %llu draws each\n", n >> 10, count);
    // Current quad dispatch: parts as in src/rng/device.rs.
    if (n < (512u << 10)) {
      for (u64 want : {8ull, 16ull, 32ull, 64ull, 128ull}) {
        u64 groups = n / 4;
        u64 per = ((count + want - 1) / want + 3) / 4 * 4;
        u64 parts = (count + per - 1) / per;
        CK(cudaMemsetAsync(out, 0, total * 4, s));
        sluice_rng_kernel_uniform_quad<<<(groups * parts + 255) / 256, 256, 0, s>>>(st, n, (float*)out, count, parts, per, 0);
        char w[64]; snprintf(w, 64, "quad parts %llu", parts); check(w);
        double ms = time_ms(s, [&] {
          sluice_rng_kernel_uniform_quad<<<(groups * parts + 255) / 256, 256, 0, s>>>(st, n, (float*)out, count, parts, per, 0);
        });
        printf("  quad parts %3llu (%7llu threads): %.0f GB/s (%.3f of host API)\n", parts, groups * parts, gbs(ms), gbs(ms) / host);
      }
    }
    for (u64 per_state : {1ull, 4ull, 16ull}) {
      if (n * per_state > (64ull << 20) || per_state > count / 4) continue;
      CK(cudaMemsetAsync(out, 0, total * 4, s));
      v_block<true><<<(n * per_state + 255) / 256, 256, 0, s>>>(st, n, out, count, per_state);
      char w[64]; snprintf(w, 64, "block %llu", per_state); check(w);
      double ms = time_ms(s, [&] { v_block<true><<<(n * per_state + 255) / 256, 256, 0, s>>>(st, n, out, count, per_state); });
      double ms2 = time_ms(s, [&] { v_block<false><<<(n * per_state + 255) / 256, 256, 0, s>>>(st, n, out, count, per_state); });
      double adv = time_ms(s, [&] { sluice_rng_kernel_uniform_advance<<<(n + 255) / 256, 256, 0, s>>>(st2, n, count); });
      printf("  block per_state %3llu (%8llu threads): streaming %.0f GB/s (%.3f), plain %.0f GB/s (%.3f); advance alone %.1f us\n",
             per_state, n * per_state, gbs(ms), gbs(ms) / host, gbs(ms2), gbs(ms2) / host, adv * 1e3);
    }
    double ms = time_ms(s, [&] { sluice_rng_kernel_uniform<<<(n + 255) / 256, 256, 0, s>>>(st2, n, (float*)ref, count, 0); });
    printf("  per-state kernel: %.0f GB/s (%.3f)\n", gbs(ms), gbs(ms) / host);
    cudaFree(st);
    cudaFree(st2);
  }
  return 0;
}
