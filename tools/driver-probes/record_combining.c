/* Would sluice's many-thread record rate gain from flat combining? T threads
 * each record an event on its own stream, with W ns of host work between
 * records: raw (each thread calls cuEventRecord) against combined (the thread
 * that takes a combiner lock issues every pending thread's record back to
 * back, its own included, as a flat-combining op_end would). Runs 289 and 291
 * in docs/gpu-runs.md: 0.68 to 0.84 of raw at 2 to 16 threads on one host, 1.50
 * on another, where the driver's rate collapses with threads (docs/decisions.md).
 * Build: cc -O2 -pthread -I$CUDA/include -o record_combining record_combining.c -lcuda -lm
 * Run: ./record_combining [records per thread, default 200000] */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#define MAXT 32
#define CK(x) do { CUresult r_ = (x); if (r_) { printf("%s = %d\n", #x, r_); exit(1); } } while (0)

static CUcontext ctx;
static int T, W, MODE, N;
static double spin_per_ns;

typedef struct {
  _Alignas(64) atomic_int state; // 0 idle, 1 pending, 2 done
  CUevent ev;
  CUstream s;
  CUresult r;
} slot_t;
static slot_t slots[MAXT];
static _Alignas(64) atomic_int comb_lock;
static _Alignas(64) atomic_int go_flag;
static _Alignas(64) atomic_int ready;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static volatile unsigned long sink;
static void work(long iters) { unsigned long x = 1; for (long i = 0; i < iters; i++) x = x * 6364136223846793005UL + 1; sink = x; }

static void combine_serve(void) {
  for (int pass = 0; pass < 2; pass++) {
    for (int j = 0; j < T; j++) {
      if (atomic_load_explicit(&slots[j].state, memory_order_acquire) == 1) {
        slots[j].r = cuEventRecord(slots[j].ev, slots[j].s);
        atomic_store_explicit(&slots[j].state, 2, memory_order_release);
      }
    }
  }
}

static void record_combined(int me, CUevent e, CUstream s) {
  slot_t *sl = &slots[me];
  sl->ev = e; sl->s = s;
  atomic_store_explicit(&sl->state, 1, memory_order_release);
  for (;;) {
    if (atomic_load_explicit(&sl->state, memory_order_acquire) == 2) break;
    if (atomic_load_explicit(&comb_lock, memory_order_relaxed) == 0 &&
        atomic_exchange_explicit(&comb_lock, 1, memory_order_acquire) == 0) {
      combine_serve();
      atomic_store_explicit(&comb_lock, 0, memory_order_release);
      continue;
    }
    __builtin_ia32_pause();
  }
  atomic_store_explicit(&sl->state, 0, memory_order_relaxed);
  if (sl->r) { printf("record failed %d\n", sl->r); exit(1); }
}

static double tstart[MAXT], tend[MAXT];

static void *thr(void *arg) {
  int me = (int)(long)arg;
  CK(cuCtxSetCurrent(ctx));
  CUstream s; CUevent e;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  long iters = (long)(W * spin_per_ns);
  for (int i = 0; i < 1000; i++) { CK(cuEventRecord(e, s)); }
  atomic_fetch_add(&ready, 1);
  while (!atomic_load(&go_flag)) {}
  tstart[me] = now();
  for (int i = 0; i < N; i++) {
    if (MODE == 0) CK(cuEventRecord(e, s)); else record_combined(me, e, s);
    if (iters) work(iters);
  }
  tend[me] = now();
  CK(cuStreamSynchronize(s));
  cuEventDestroy(e); cuStreamDestroy(s);
  return 0;
}

static double run(int t, int w, int mode) {
  T = t; W = w; MODE = mode;
  atomic_store(&go_flag, 0); atomic_store(&ready, 0);
  pthread_t th[MAXT];
  for (int i = 0; i < T; i++) pthread_create(&th[i], 0, thr, (void *)(long)i);
  while (atomic_load(&ready) < T) {}
  atomic_store(&go_flag, 1);
  for (int i = 0; i < T; i++) pthread_join(th[i], 0);
  double a = 1e30, b = 0;
  for (int i = 0; i < T; i++) { if (tstart[i] < a) a = tstart[i]; if (tend[i] > b) b = tend[i]; }
  return (double)T * N / (b - a) / 1e6;
}

int main(int argc, char **argv) {
  N = argc > 1 ? atoi(argv[1]) : 200000;
  CK(cuInit(0));
  CUdevice d; CK(cuDeviceGet(&d, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, d));
  long cal = 20000000; double t0 = now(); work(cal); spin_per_ns = cal / ((now() - t0) * 1e9);
  printf("| threads | host work ns | raw M/s | combined M/s | combined/raw | combined / raw back-to-back |\n|---:|---:|---:|---:|---:|---:|\n");
  int ts[] = {1, 2, 4, 8, 16};
  int ws[] = {0, 50, 150, 300};
  for (int ti = 0; ti < 5; ti++) {
    double raw0 = 0;
    for (int wi = 0; wi < 4; wi++) {
      double best_r[3], best_c[3];
      for (int rep = 0; rep < 3; rep++) { best_r[rep] = run(ts[ti], ws[wi], 0); best_c[rep] = run(ts[ti], ws[wi], 1); }
      // medians of 3
      double r = best_r[0] + best_r[1] + best_r[2] - fmax(fmax(best_r[0], best_r[1]), best_r[2]) - fmin(fmin(best_r[0], best_r[1]), best_r[2]);
      double c = best_c[0] + best_c[1] + best_c[2] - fmax(fmax(best_c[0], best_c[1]), best_c[2]) - fmin(fmin(best_c[0], best_c[1]), best_c[2]);
      if (wi == 0) raw0 = r;
      printf("| %d | %d | %.2f | %.2f | %.3f | %.3f |\n", ts[ti], ws[wi], r, c, c / r, c / raw0);
      fflush(stdout);
    }
  }
  return 0;
}
