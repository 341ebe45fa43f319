// A raw-CUDA twin of the race issue's reproducer p5_many_graphs (16 graphs over 16
// buffer pairs launched round-robin on 4 streams by several threads, while other
// threads issue eager kernels, copies and memsets on the same buffers), ordered by
// a deliberately simple tracker instead of sluice: an event per op from a pool that
// is reused only between rounds; a read waits on the writer's event; a write waits
// on the writer's and every reader's events. Every buffer is compared with a serial
// replay after each round.
//
// Options (key=value): graphs=1 (0: the graphs' ops issued eagerly), dedup=0 (1: keep
// only the newest reader event per stream, which is correct only if stream order
// holds), streamlock=0 (1: a mutex per stream around each op's waits, work and
// record), glaunchlock=0 (1: one global mutex around cudaGraphLaunch only),
// gthreads=4 ethreads=4, nb=0 (1: every stream non-blocking), pool=1 (0: cudaMalloc
// instead of cudaMallocAsync), track=0 is the negative control, secs, seed.
//
// On an H100 (driver 580.159.04, 8 + 8 threads): dedup=1 failed in 2 to 4 rounds of
// 27 to 40 in every configuration without streamlock; dedup=0, streamlock=1 and
// graphs=0 passed (docs/decisions.md, "Stream order and graph launches").
//
//   nvcc -O2 -std=c++17 -arch=sm_90 -o raw_many_graphs raw_many_graphs.cu -lpthread
#include <cuda_runtime.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>
#include <mutex>
#include <atomic>
#include <algorithm>
#include "../../kernels/test_kernels.cu"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(3);} } while (0)

static int g_argc; static char **g_argv;
static long opt_int(const char *k, long d) { size_t kl = strlen(k); for (int i = 1; i < g_argc; i++) if (!strncmp(g_argv[i], k, kl) && g_argv[i][kl] == '=') return strtol(g_argv[i] + kl + 1, 0, 0); return d; }
static double now_s() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static uint64_t rnd(uint64_t *s) { uint64_t z = (*s += 0x9e3779b97f4a7c15ull); z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull; z = (z ^ (z >> 27)) * 0x94d049bb133111ebull; return z ^ (z >> 31); }
static uint32_t rndn(uint64_t *s, uint32_t n) { return (uint32_t)(rnd(s) % n); }
static uint32_t hash32(uint64_t x) { uint64_t s = x * 0x2545f4914f6cdd1dull + 77; return (uint32_t)rnd(&s); }
static uint64_t rand_spin(uint64_t *r, uint64_t max_ns, int pzero) { if (!max_ns || (int)rndn(r, 100) < pzero) return 0; if (max_ns <= 1000) return max_ns; return 1000 + rnd(r) % (max_ns - 999); }

enum { NG = 16, NB = 32, NS = 4, MAXT = 32 };
enum { L_ADD, L_KCOPY, L_FILL, L_COPY, L_MEMSET };
struct lg_t { uint8_t kind, stream, tid, graph; uint16_t dst, src; uint32_t doff, soff, len, value, spin; };
struct gdesc_t { int nsub; lg_t sub[2]; };

static uint64_t n; static size_t nbytes;
static cudaStream_t S[NS], cap;
static uint32_t *B[NB];
static pthread_rwlock_t lk[NB];
static gdesc_t G[NG];
static cudaGraphExec_t EX[NG];
static lg_t *g_log; static size_t g_cap; static std::atomic<size_t> g_ticket;
static int g_graphs = 1, g_pzero = 25, g_gthreads = 4, g_ethreads = 4, g_streamlock = 0, g_track = 1, g_sync_ev = 0;
static long g_ops; static uint64_t g_emax = 30000, g_seed = 1; static double g_deadline; static int g_round;
static std::mutex slock[NS]; static std::mutex glock; static int g_glaunchlock = 0, g_nb = 0;

// ---- the naive tracker ----
struct State { std::mutex m; cudaEvent_t writer = nullptr; std::vector<cudaEvent_t> readers; };
static State st[NB];
static std::vector<cudaEvent_t> evs; static std::atomic<size_t> ev_next;
static int g_dedup = 0;
static std::vector<int> ev_stream_v; static int *ev_stream;
static int stream_of(cudaEvent_t e) { return ev_stream[(size_t)(std::lower_bound(evs.begin(), evs.end(), e) - evs.begin())]; }
template <class F> static void tracked(int si, int w, int r, F enqueue) {
  cudaStream_t s = S[si];
  // lock states in index order (w written, r read or -1)
  int a = w, b = r; if (b >= 0 && b < a) std::swap(a, b);
  st[a].m.lock(); if (b >= 0 && b != a) st[b].m.lock();
  std::unique_lock<std::mutex> sl; if (g_streamlock) sl = std::unique_lock<std::mutex>(slock[si]);
  if (g_track) {
    if (r >= 0 && st[r].writer) CK(cudaStreamWaitEvent(s, st[r].writer, 0));
    if (st[w].writer) CK(cudaStreamWaitEvent(s, st[w].writer, 0));
    for (auto e : st[w].readers) CK(cudaStreamWaitEvent(s, e, 0));
  }
  enqueue(s);
  size_t ei = ev_next.fetch_add(1); if (ei >= evs.size()) { fprintf(stderr, "out of events\n"); exit(3); }
  cudaEvent_t e = evs[ei]; ev_stream[ei] = si; CK(cudaEventRecord(e, s));
  if (g_sync_ev) CK(cudaEventSynchronize(e));
  if (r >= 0) {
    if (g_dedup) { auto &v = st[r].readers; for (size_t i = 0; i < v.size(); i++) if (stream_of(v[i]) == si) { v.erase(v.begin() + i); break; } }
    st[r].readers.push_back(e);
  }

  st[w].writer = e; st[w].readers.clear();
  if (sl.owns_lock()) sl.unlock();
  if (b >= 0 && b != a) st[b].m.unlock(); st[a].m.unlock();
}

static size_t ticket(const lg_t *o) { size_t t = g_ticket.fetch_add(1); if (t < g_cap) g_log[t] = *o; return t; }

static void enqueue_sub(cudaStream_t s, const lg_t *o) {
  uint32_t *d = B[o->dst], *src = B[o->src];
  switch (o->kind) {
  case L_ADD: sluice_spin_add<<<16, 256, 0, s>>>(d, src, n, o->spin); break;
  case L_KCOPY: sluice_spin_copy<<<16, 256, 0, s>>>(d, src, n, o->spin); break;
  case L_FILL: sluice_spin_fill<<<16, 256, 0, s>>>(d, n, o->value, o->spin); break;
  case L_COPY: CK(cudaMemcpyAsync((char *)d + o->doff, (char *)src + o->soff, o->len, cudaMemcpyDeviceToDevice, s)); break;
  default: CK(cudaMemsetAsync((char *)d + o->doff, (int)o->value, o->len, s)); break;
  }
  CK(cudaGetLastError());
}
static bool reads_src(int kind) { return kind == L_ADD || kind == L_KCOPY || kind == L_COPY; }

static void rand_range(uint64_t *r, lg_t *o) { uint32_t len = 1 + rndn(r, (uint32_t)nbytes); if (rndn(r, 4) == 0) len = (uint32_t)nbytes; o->len = len; o->doff = rndn(r, (uint32_t)nbytes - len + 1); o->soff = rndn(r, (uint32_t)nbytes - len + 1); }
static void gen_graph(int g, gdesc_t *d) {
  uint64_t r = g_seed * 1009 + (uint64_t)g * 31 + 7; memset(d, 0, sizeof *d); lg_t *o = d->sub;
  for (int i = 0; i < 2; i++) o[i].dst = (uint16_t)(2 * g), o[i].src = (uint16_t)(2 * g + 1), o[i].graph = (uint8_t)g;
  uint32_t s = (uint32_t)((g * 7919) % 31) * 1000u;
  switch (g % 4) {
  case 0: o[0].kind = L_ADD, o[0].spin = s, d->nsub = 1; break;
  case 1: o[0].kind = L_KCOPY, o[0].spin = s; o[1].kind = L_ADD, o[1].spin = (s * 3) % 31000u; d->nsub = 2; break;
  case 2: o[0].kind = L_MEMSET, o[0].value = rndn(&r, 256); rand_range(&r, &o[0]); o[1].kind = L_COPY; rand_range(&r, &o[1]); d->nsub = 2; break;
  default: o[0].kind = L_FILL, o[0].value = (uint32_t)rnd(&r), o[0].spin = s; o[1].kind = L_ADD, o[1].spin = 0; d->nsub = 2; break;
  }
}
static void lock2(int a, int b) { if (b >= 0 && b < a) { pthread_rwlock_rdlock(&lk[b]); pthread_rwlock_wrlock(&lk[a]); } else { pthread_rwlock_wrlock(&lk[a]); if (b >= 0) pthread_rwlock_rdlock(&lk[b]); } }
static void unlock2(int a, int b) { pthread_rwlock_unlock(&lk[a]); if (b >= 0) pthread_rwlock_unlock(&lk[b]); }

static void *gthread(void *arg) {
  int t = (int)(intptr_t)arg; CK(cudaSetDevice(0));
  uint64_t r = g_seed * 0x100000001b3ull + (uint64_t)t * 7919u + (uint64_t)g_round * 104729u + 1;
  for (long i = 0; i < g_ops; i++) {
    if ((i & 7) == 0 && now_s() > g_deadline) break;
    int g = (int)rndn(&r, NG), si = (int)((t + i) % NS);
    gdesc_t *d = &G[g];
    lock2(2 * g, 2 * g + 1);
    for (int k = 0; k < d->nsub; k++) { lg_t o = d->sub[k]; o.stream = (uint8_t)si, o.tid = (uint8_t)t; ticket(&o);
      if (!g_graphs) tracked(si, o.dst, reads_src(o.kind) ? o.src : -1, [&](cudaStream_t s) { enqueue_sub(s, &o); }); }
    if (g_graphs) tracked(si, 2 * g, 2 * g + 1, [&](cudaStream_t s) { std::unique_lock<std::mutex> gl; if (g_glaunchlock) gl = std::unique_lock<std::mutex>(glock); CK(cudaGraphLaunch(EX[g], s)); });
    unlock2(2 * g, 2 * g + 1);
    if ((i & 3) == 0) sched_yield();
  }
  return NULL;
}
static void *ethread(void *arg) {
  int t = (int)(intptr_t)arg; CK(cudaSetDevice(0));
  uint64_t r = g_seed * 0x9e3779b97f4a7c15ull + (uint64_t)t * 104723u + (uint64_t)g_round * 7u + 3;
  for (long i = 0; i < g_ops; i++) {
    if ((i & 7) == 0 && now_s() > g_deadline) break;
    lg_t o; memset(&o, 0, sizeof o);
    o.kind = (uint8_t)rndn(&r, 5); o.tid = (uint8_t)t, o.graph = 0xff, o.stream = (uint8_t)rndn(&r, NS);
    o.dst = (uint16_t)rndn(&r, NB); do o.src = (uint16_t)rndn(&r, NB); while (o.src == o.dst);
    if (o.kind <= L_FILL) o.spin = (uint32_t)rand_spin(&r, g_emax, g_pzero);
    if (o.kind == L_FILL) o.value = (uint32_t)rnd(&r);
    if (o.kind == L_COPY || o.kind == L_MEMSET) rand_range(&r, &o);
    if (o.kind == L_MEMSET) o.value = rndn(&r, 256);
    bool reads = reads_src(o.kind);
    lock2(o.dst, reads ? o.src : -1); ticket(&o);
    tracked(o.stream, o.dst, reads ? o.src : -1, [&](cudaStream_t s) { enqueue_sub(s, &o); });
    unlock2(o.dst, reads ? o.src : -1);
    if ((i & 3) == 0) sched_yield();
  }
  return NULL;
}
static uint32_t init_word(int b, uint64_t i) { return hash32(((uint64_t)b << 40) ^ (i * 2654435761u) ^ ((uint64_t)g_round << 20)); }
static void replay(uint8_t *base, size_t nlog) {
#define MB(b) (base + (size_t)(b) * nbytes)
  for (int b = 0; b < NB; b++) for (uint64_t i = 0; i < n; i++) { uint32_t w = init_word(b, i); memcpy(MB(b) + 4 * i, &w, 4); }
  for (size_t t = 0; t < nlog; t++) { const lg_t *o = &g_log[t]; uint8_t *d = MB(o->dst), *s = MB(o->src);
    switch (o->kind) {
    case L_ADD: for (uint64_t i = 0; i < n; i++) { uint32_t a, c; memcpy(&a, d + 4 * i, 4), memcpy(&c, s + 4 * i, 4); a += c; memcpy(d + 4 * i, &a, 4); } break;
    case L_KCOPY: memcpy(d, s, nbytes); break;
    case L_FILL: for (uint64_t i = 0; i < n; i++) memcpy(d + 4 * i, &o->value, 4); break;
    case L_COPY: memmove(d + o->doff, s + o->soff, o->len); break;
    default: memset(d + o->doff, (int)o->value, o->len); break; } }
}
int main(int argc, char **argv) {
  g_argc = argc, g_argv = argv;
  n = opt_int("n", 4096); nbytes = n * 4; double secs = opt_int("secs", 10); g_ops = opt_int("ops", 3000);
  g_graphs = opt_int("graphs", 1); g_seed = opt_int("seed", 1); g_streamlock = opt_int("streamlock", 0); g_track = opt_int("track", 1);
  g_sync_ev = opt_int("syncev", 0);
  int pool = opt_int("pool", 1); g_dedup = opt_int("dedup", 0); g_glaunchlock = opt_int("glaunchlock", 0); g_nb = opt_int("nb", 0);
  g_gthreads = opt_int("gthreads", 4); g_ethreads = opt_int("ethreads", 4);
  CK(cudaSetDevice(0)); CK(cudaFree(0));
  for (int i = 0; i < NS; i++) CK(cudaStreamCreateWithPriority(&S[i], ((i & 1) || g_nb) ? cudaStreamNonBlocking : cudaStreamDefault, i == 3 ? -1 : 0));
  CK(cudaStreamCreate(&cap));
  for (int b = 0; b < NB; b++) { if (pool) CK(cudaMallocAsync((void **)&B[b], nbytes, S[b % NS])); else CK(cudaMalloc((void **)&B[b], nbytes)); CK(cudaMemsetAsync(B[b], 0, nbytes, S[b % NS])); pthread_rwlock_init(&lk[b], NULL); }
  CK(cudaDeviceSynchronize());
  for (int g = 0; g < NG; g++) { gen_graph(g, &G[g]); CK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeRelaxed));
    for (int k = 0; k < G[g].nsub; k++) enqueue_sub(cap, &G[g].sub[k]);
    cudaGraph_t gr; CK(cudaStreamEndCapture(cap, &gr)); CK(cudaGraphInstantiateWithFlags(&EX[g], gr, 0)); CK(cudaGraphDestroy(gr)); }
  evs.resize((size_t)(g_gthreads + g_ethreads) * g_ops * 2 + 64);
  for (auto &e : evs) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  std::sort(evs.begin(), evs.end()); ev_stream_v.resize(evs.size()); ev_stream = ev_stream_v.data();
  g_cap = (size_t)(g_gthreads + g_ethreads) * (size_t)g_ops * 2 + 16; g_log = (lg_t *)calloc(g_cap, sizeof *g_log);
  uint8_t *model = (uint8_t *)malloc((size_t)NB * nbytes), *got = (uint8_t *)malloc(nbytes); uint32_t *words = (uint32_t *)malloc(nbytes);
  double t0 = now_s(), end = t0 + secs; long bad_rounds = 0, bad_bufs = 0;
  do {
    for (int b = 0; b < NB; b++) { for (uint64_t i = 0; i < n; i++) words[i] = init_word(b, i); CK(cudaMemcpy(B[b], words, nbytes, cudaMemcpyHostToDevice)); }
    CK(cudaDeviceSynchronize());
    for (int b = 0; b < NB; b++) { st[b].writer = nullptr; st[b].readers.clear(); }
    g_ticket = 0; g_deadline = end;
    pthread_t th[MAXT]; int nt = 0;
    for (int i = 0; i < g_gthreads; i++) pthread_create(&th[nt++], NULL, gthread, (void *)(intptr_t)i);
    for (int i = 0; i < g_ethreads; i++) pthread_create(&th[nt++], NULL, ethread, (void *)(intptr_t)(g_gthreads + i));
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    CK(cudaDeviceSynchronize());
    ev_next = 0;
    size_t nlog = g_ticket.load(); if (nlog > g_cap) nlog = g_cap;
    replay(model, nlog);
    int badbufs = 0;
    for (int b = 0; b < NB; b++) { CK(cudaMemcpy(got, B[b], nbytes, cudaMemcpyDeviceToHost)); if (memcmp(got, model + (size_t)b * nbytes, nbytes)) badbufs++; }
    bad_rounds += badbufs > 0; bad_bufs += badbufs;
    if (badbufs) printf("round %d: %d/%d buffers wrong (%.1f s)\n", g_round, badbufs, NB, now_s() - t0);
    g_round++;
  } while (now_s() < end);
  printf("RESULT raw_many_graphs glaunchlock=%d nb=%d dedup=%d gthreads=%d ethreads=%d graphs=%d streamlock=%d track=%d syncev=%d pool=%d seed=%lu rounds=%d failing_rounds=%ld bad_buffers=%ld\n", g_glaunchlock, g_nb, g_dedup, g_gthreads, g_ethreads, g_graphs, g_streamlock, g_track, g_sync_ev, pool, (unsigned long)g_seed, g_round, bad_rounds, bad_bufs);
  return bad_rounds ? 1 : 0;
}
