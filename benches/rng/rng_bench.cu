// RNG benchmark (issue 13), on the GPU, one process: sluice's generation against
// cuRAND's host API (curandGenerateUniform, Philox) and cuRAND's per-state device
// API, with the memset write limit; save against a raw D2D copy; serialize into
// pinned memory against a raw pinned D2H copy (the goal), and into pageable memory
// (information only); and DALI's per-state copy loop against one bulk copy.
// Prints a markdown table with PASS/FAIL per goal. Build and run: benches/rng/run.sh.
#include <cuda_runtime.h>
#include <curand.h>
#include <curand_kernel.h>
#include <sluice.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#define SK(x)                                                                        \
  do {                                                                               \
    sluice_error_t* e_ = (x);                                                        \
    if (e_) {                                                                        \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, sluice_error_message(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#define RK(x)                                                                        \
  do {                                                                               \
    curandStatus_t e_ = (x);                                                         \
    if (e_ != CURAND_STATUS_SUCCESS) {                                               \
      fprintf(stderr, "%s:%d %s: curand status %d\n", __FILE__, __LINE__, #x, (int)e_); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static int reps = 20;
static int fails = 0;

__global__ void curand_init_states(curandStatePhilox4_32_10_t* st, size_t n, unsigned long long seed) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) curand_init(seed, i, 0, &st[i]);
}

// cuRAND's per-state device API, sample-major output (as sluice's default layout).
__global__ void curand_per_state(curandStatePhilox4_32_10_t* st, size_t n, float* out, size_t count) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  curandStatePhilox4_32_10_t s = st[i];
  for (size_t j = 0; j < count; ++j) out[j * n + i] = curand_uniform(&s);
  st[i] = s;
}

// The same with curand_uniform4 (four draws per Philox block), the faster idiom.
__global__ void curand_per_state4(curandStatePhilox4_32_10_t* st, size_t n, float* out, size_t count) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  curandStatePhilox4_32_10_t s = st[i];
  for (size_t j = 0; j + 4 <= count; j += 4) {
    float4 v = curand_uniform4(&s);
    out[j * n + i] = v.x;
    out[(j + 1) * n + i] = v.y;
    out[(j + 2) * n + i] = v.z;
    out[(j + 3) * n + i] = v.w;
  }
  st[i] = s;
}

// Median milliseconds of `reps` runs of f on stream s, timed with events.
template <class F>
static double time_ms(cudaStream_t s, F f) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm-up
  CK(cudaStreamSynchronize(s));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a, s));
    f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median wall milliseconds of `reps` runs of a blocking f.
template <class F>
static double wall_ms(F f, int n = -1) {
  if (n < 0) n = reps;
  f();
  std::vector<double> t;
  for (int r = 0; r < n; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static void row(const char* what, double gbs, double base, double goal, const char* vs) {
  double ratio = gbs / base;
  bool pass = ratio >= goal;
  if (goal > 0 && !pass) fails++;
  printf("| %s | %.0f GB/s | %s %.0f GB/s | %.3f | %s |\n", what, gbs, vs, base, ratio,
         goal > 0 ? (pass ? (goal >= 1.0 ? "PASS (>= 1.0x)" : "PASS (>= 0.9x)") : "FAIL") : "-");
}

int main(int argc, char** argv) {
  if (getenv("SLUICE_BENCH_REPS")) reps = atoi(getenv("SLUICE_BENCH_REPS"));
  sluice_device_t dev;
  sluice_stream_t ss;
  SK(sluice_device_open(SLUICE_BACKEND_CUDA, 0, &dev));
  SK(sluice_stream_create(dev, SLUICE_STREAM_NON_BLOCKING, 0, &ss));
  void* raw = nullptr;
  SK(sluice_stream_raw(ss, &raw));
  cudaStream_t s = (cudaStream_t)raw;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("# RNG benchmark on %s (%d reps, median)\n\n", prop.name, reps);

  const size_t total = 256ull << 20;  // floats per generation call: 1 GiB
  float* out;
  CK(cudaMalloc(&out, total * 4));
  sluice_buffer_t sout;
  SK(sluice_buffer_alloc(ss, total * 4, &sout));
  curandGenerator_t gen;
  RK(curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  RK(curandSetStream(gen, s));
  RK(curandSetPseudoRandomGeneratorSeed(gen, 1234));
  double host_api = total * 4 / 1e6 / time_ms(s, [&] { RK(curandGenerateUniform(gen, out, total)); });
  double memset_lim = total * 4 / 1e6 / time_ms(s, [&] { CK(cudaMemsetAsync(out, 1, total * 4, s)); });
  printf("Anchors: curandGenerateUniform (Philox) %.0f GB/s; memset write limit %.0f GB/s.\n\n",
         host_api, memset_lim);
  printf("## Generation (uniform floats, 1 GiB per call, sample-major)\n\n");
  printf("| states | sluice_rng_generate | cuRAND per-state (curand_uniform) | per-state (curand_uniform4) | "
         "cuRAND host API | vs per-state | vs host API | sluice incl. state traffic | goal |\n|---|---|---|---|---|---|---|---|---|\n");
  for (size_t n : {64ull << 10, 1ull << 20, 4ull << 20}) {
    size_t count = total / n;
    sluice_rng_t rng;
    SK(sluice_rng_create(ss, 42, n, &rng));
    double sl = total * 4 / 1e6 / time_ms(s, [&] {
      SK(sluice_rng_generate(ss, rng, SLUICE_RNG_UNIFORM, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, sout, 0, count));
    });
    curandStatePhilox4_32_10_t* st;
    CK(cudaMalloc(&st, n * 64));
    curand_init_states<<<(n + 255) / 256, 256, 0, s>>>(st, n, 42);
    double ps = total * 4 / 1e6 / time_ms(s, [&] {
      curand_per_state<<<(n + 255) / 256, 256, 0, s>>>(st, n, out, count);
    });
    double ps4 = total * 4 / 1e6 / time_ms(s, [&] {
      curand_per_state4<<<(n + 255) / 256, 256, 0, s>>>(st, n, out, count);
    });
    double best_ps = std::max(ps, ps4);
    bool pass = sl >= best_ps && sl >= host_api;
    if (!pass) fails++;
    // Each call also reads and writes every 64-byte state once.
    double with_states = sl * (total * 4 + 2.0 * 64 * n) / (total * 4);
    printf("| %zuK | %.0f GB/s | %.0f GB/s | %.0f GB/s | %.0f GB/s | %.3f | %.3f | %.0f GB/s | %s |\n", n >> 10,
           sl, ps, ps4, host_api, sl / best_ps, sl / host_api, with_states,
           pass ? "PASS (>= 1.0x both)" : "FAIL (>= 1.0x both)");
    CK(cudaStreamSynchronize(s));
    cudaFree(st);
    SK(sluice_rng_destroy(rng));
  }

  printf("\n## Checkpoints\n\n| what | sluice | raw | baseline | ratio | goal |\n|---|---|---|---|---|---|\n");
  for (size_t n : {64ull << 10, 1ull << 20, 4ull << 20}) {
    size_t bytes = n * 64;
    sluice_rng_t rng;
    sluice_rng_checkpoint_t ck;
    SK(sluice_rng_create(ss, 7, n, &rng));
    SK(sluice_rng_checkpoint_create(ss, rng, &ck));
    void* dst;
    CK(cudaMalloc(&dst, bytes));
    sluice_buffer_t states;
    sluice_buffer_info_t info;
    SK(sluice_rng_states(rng, &states));
    SK(sluice_buffer_info(states, &info));
    double save = bytes / 1e6 / time_ms(s, [&] { SK(sluice_rng_save(ss, rng, ck)); });
    double d2d = bytes / 1e6 / time_ms(s, [&] {
      CK(cudaMemcpyAsync(dst, (void*)info.device_ptr, bytes, cudaMemcpyDeviceToDevice, s));
    });
    char what[64];
    snprintf(what, sizeof what, "save, %zuK states (%zu MiB)", n >> 10, bytes >> 20);
    row(what, save, d2d, 0.9, "cudaMemcpyAsync D2D");
    size_t len = 0;
    SK(sluice_rng_checkpoint_serialize(ck, nullptr, 0, &len));
    std::vector<uint8_t> blob(len);
    CK(cudaStreamSynchronize(s));
    // Into pageable memory (a reused std::vector): staged through the library's
    // pinned slots. Information only.
    double ser = bytes / 1e6 / wall_ms([&] { SK(sluice_rng_checkpoint_serialize(ck, blob.data(), len, &len)); });
    // Into page-locked memory (cudaMallocHost): the direct path. The goal row.
    uint8_t* pinned_blob;
    CK(cudaMallocHost((void**)&pinned_blob, len));
    double ser_pinned =
        bytes / 1e6 / wall_ms([&] { SK(sluice_rng_checkpoint_serialize(ck, pinned_blob, len, &len)); });
    if (memcmp(pinned_blob, blob.data(), len) != 0) {
      printf("| serialize, %zuK states: pinned and pageable bytes differ | - | - | - | - | FAIL |\n", n >> 10);
      fails++;
    }
    void* pinned;
    CK(cudaMallocHost(&pinned, bytes));
    double d2h = bytes / 1e6 / wall_ms([&] {
      CK(cudaMemcpyAsync(pinned, (void*)info.device_ptr, bytes, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
    });
    snprintf(what, sizeof what, "serialize into pinned, %zuK states (%zu MiB)", n >> 10, bytes >> 20);
    row(what, ser_pinned, d2h, 0.9, "pinned D2H");
    snprintf(what, sizeof what, "serialize into pageable, %zuK states (%zu MiB)", n >> 10, bytes >> 20);
    row(what, ser, d2h, 0, "pinned D2H");
    if (n == (64ull << 10)) {
      // DALI's way: one small D2H copy per state, into pinned memory.
      double loop = bytes / 1e6 / wall_ms([&] {
        for (size_t i = 0; i < n; ++i)
          CK(cudaMemcpyAsync((char*)pinned + i * 64, (char*)info.device_ptr + i * 64, 64,
                             cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
      }, 3);
      snprintf(what, sizeof what, "per-state copy loop (DALI), %zuK states", n >> 10);
      printf("| %s | %.2f GB/s | one bulk D2H %.0f GB/s | - | %.4f | - |\n", what, loop, d2h, loop / d2h);
      printf("| serialize into pinned vs DALI's loop, %zuK states | %.0f GB/s | %.2f GB/s | - | %.0fx | - |\n",
             n >> 10, ser_pinned, loop, ser_pinned / loop);
    }
    cudaFreeHost(pinned);
    cudaFreeHost(pinned_blob);
    cudaFree(dst);
    SK(sluice_buffer_free(states));
    SK(sluice_rng_checkpoint_destroy(ck));
    SK(sluice_rng_destroy(rng));
  }
  CK(cudaStreamSynchronize(s));
  curandDestroyGenerator(gen);
  cudaFree(out);
  SK(sluice_buffer_free(sout));
  SK(sluice_stream_destroy(ss));
  printf("\nRESULT goals_failed=%d\n", fails);
  return 0;
}
