/* stress: every feature of sluice at once, from many threads, checked bit for bit
 * against a serial model.
 *
 * Options are key=value arguments (defaults in brackets):
 *   threads [4]      worker threads, each running ops [8000] random ops
 *   streams [4]      streams; stream i is NON_BLOCKING when i is odd, priority -1 when i == 3
 *   bufs [64]        device buffers of n [2048] 32-bit words; the first 3*graphs are
 *                    reserved for the graphs and never reallocated
 *   pinned [8], registered [4]   pinned and registered host buffers of the same size
 *   graphs [16]      captured graphs (every other one also has an alternative graph)
 *   seed [1], runs [1]   run k uses seed+k (fresh contents, same setup)
 *   secs [0]         stop after this many seconds (0: no limit)
 *   espin [30000], pzero [25]   kernel spin: 0 with pzero percent, else 1 us..espin ns
 *   break [0]        negative control: eager kernels declare no reads (must fail)
 *
 * Soak mode: STRESS_SECONDS=N in the environment makes the defaults secs=N,
 * runs=unbounded, threads=16, so runs follow each other (each checked against the
 * model, each with a new seed) until N seconds have passed; from the second run on,
 * every graph is captured again and its exec updated before the run starts.
 *
 * Ops: tracked spin kernels (add, copy, fill) on device buffers; sluice_stream_copy of byte
 * ranges between any two buffers; sluice_stream_memset of byte ranges; foreign ops
 * (sluice_op_begin, the same work enqueued untracked on that stream, sluice_op_end);
 * graph launches; exec updates (a graph <-> its alternative); buffer reallocation
 * (free, allocate, initialise with a logged memset or copy); stream replacement;
 * prefetched batches (a zero-copy fill and submit, then sluice_prefetcher_next on a
 * random stream, a tracked copy of part of the batch into a buffer, and a release);
 * RNG draws (sluice_rng_generate into a device buffer; the model draws the same
 * values in log order from a second generator of the same seed).
 *
 * The model (as in the graph-launch-race reproducer p5): every op takes this
 * program's per-buffer rwlocks in index order, then one ticket per sub-op while it
 * holds them, and logs the sub-op; the ticket order is then the order the library
 * saw conflicting ops in. After sluice_device_wait_all the log is replayed in
 * ticket order on host copies and every buffer is compared byte for byte.
 * Streams live in slots guarded by rwlocks: ops hold a slot for reading while they
 * use its stream, a replacement holds it for writing.
 *
 * Kernels come from test_kernels.ptx (SLUICE_STRESS_PTX, ./test_kernels.ptx, next to
 * the binary, kernels/test_kernels.ptx). On the host backend, and for foreign ops on
 * host memory, a kernel is a host callback with the same read and write sets that
 * does the same arithmetic after the same spin.
 *
 * Prints one RESULT line per run. Exit status: 0 every run matched, 1 a mismatch or
 * leaked handles, 2 a bad option, 3 an API error.
 */
#define _GNU_SOURCE
#include <sluice.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { MAXT = 64, MAXS = 16, MAXG = 64, MAXB = 1024, NEXPLAIN = 3 };

static uint64_t g_seed; /* the current run's seed */
static int g_run;
static bool g_cuda;

static _Noreturn void api_fail(const char *call, int line, sluice_error_t *e) {
    const char *code = sluice_error_code_name(sluice_error_code(e));
    fprintf(stderr, "stress.c:%d: %s: %s (%s)\n", line, call, sluice_error_message(e), code);
    printf("RESULT stress seed=%" PRIu64 " run=%d backend=%s failures=-1 api_error=%s\n", g_seed, g_run,
           g_cuda ? "cuda" : "host", code);
    fflush(stdout);
    exit(3);
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        sluice_error_t *e_ = (x);                                                                  \
        if (e_) api_fail(#x, __LINE__, e_);                                                        \
    } while (0)

/* ---- options ------------------------------------------------------------------------ */

static const char *const known_opts[] = {"threads", "streams", "bufs", "pinned", "registered", "n",
                                         "ops", "graphs", "seed", "runs", "secs", "espin", "pzero",
                                         "break", NULL};
static int g_argc;
static char **g_argv;

static const char *opt_str(const char *key) {
    size_t kl = strlen(key);
    for (int i = 1; i < g_argc; i++)
        if (strncmp(g_argv[i], key, kl) == 0 && g_argv[i][kl] == '=') return g_argv[i] + kl + 1;
    return NULL;
}
static long opt_int(const char *key, long def) {
    const char *v = opt_str(key);
    return v ? strtol(v, NULL, 0) : def;
}

static void check_opts(void) {
    for (int i = 1; i < g_argc; i++) {
        bool ok = false;
        for (int k = 0; known_opts[k] && !ok; k++) {
            size_t kl = strlen(known_opts[k]);
            ok = strncmp(g_argv[i], known_opts[k], kl) == 0 && g_argv[i][kl] == '=';
        }
        if (!ok) {
            fprintf(stderr, "stress: unknown argument '%s' (see the comment at the top of stress.c)\n", g_argv[i]);
            exit(2);
        }
    }
}

static struct {
    int threads, streams, bufs, pinned, registered, graphs, pzero, nb;
    bool brk;
    long ops, runs, secs;
    uint64_t n, espin, seed;
    uint32_t nbytes;
} C;

/* ---- time, rng ---------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double g_deadline;
static bool g_soak; /* STRESS_SECONDS is set */
static bool past_deadline(void) { return now_s() > g_deadline; }

static uint64_t rnd(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint32_t rndn(uint64_t *s, uint32_t n) { return (uint32_t)(rnd(s) % n); }

/* A spin in ns: 0 with probability pzero percent, else uniform in [1 us, espin]. */
static uint32_t rand_spin(uint64_t *r) {
    if (C.espin == 0 || (int)rndn(r, 100) < C.pzero) return 0;
    if (C.espin <= 1000) return (uint32_t)C.espin;
    return (uint32_t)(1000 + rnd(r) % (C.espin - 999));
}

static uint32_t init_word(int b, uint64_t i) {
    uint64_t s = g_seed * 0x2545f4914f6cdd1dull ^ ((uint64_t)b << 32) ^ i;
    return (uint32_t)rnd(&s);
}

/* ---- buffers, streams, log ------------------------------------------------------------ */

/* Sub-op kinds: whole-buffer kernels, then byte-range copy and memset. */
enum { L_ADD, L_KCOPY, L_FILL, L_COPY, L_MEMSET, L_BATCH, L_RNG };
static const char *const lname[] = {"add", "kcopy", "fill", "copy", "memset", "batch", "rng"};
enum { O_EAGER, O_FOREIGN, O_GRAPH, O_REALLOC, O_PREFETCH, O_RNG };
static const char *const oname[] = {"eager", "foreign", "graph", "realloc", "prefetch", "rng"};

/* Byte j of prefetched batch seq (of the current run). */
static uint8_t batch_byte(uint64_t seq, uint64_t j) {
    uint64_t x = (g_seed + 1) * 0x9E3779B97F4A7C15ull ^ seq * 0xbf58476d1ce4e5b9ull ^ (j >> 3);
    x ^= x >> 31, x *= 0x94d049bb133111ebull, x ^= x >> 29;
    return (uint8_t)(x >> (8 * (j & 7)));
}

typedef struct {
    uint8_t kind, origin, stream, tid, graph, variant;
    uint16_t dst, src;
    uint32_t doff, soff, len, value, spin;
} lg_t;

static bool reads_src(int kind) { return kind == L_ADD || kind == L_KCOPY || kind == L_COPY; }

/* Buffer indexes: [0, bufs) device (the first 3*graphs reserved), then pinned, then
 * registered. */
typedef struct {
    sluice_buffer_t buf;
    sluice_sync_t sync;
    uint64_t addr; /* device address; the host address of host memory */
    uint8_t *host; /* pinned and registered memory */
} buf_t;

static sluice_device_t g_dev;
static sluice_module_t g_mod;
static sluice_function_t g_fn[3]; /* L_ADD, L_KCOPY, L_FILL */
static sluice_stream_t S[MAXS], g_cap, g_branch;
static sluice_prefetcher_t g_pf;
/* The run's generator, and its twin that the model draws from in log order. */
enum { RNG_STATES = 4, RNG_MAXCOUNT = 8 };
static sluice_rng_t g_rng, g_rng_ref;
static sluice_buffer_t g_rng_scratch;
static pthread_mutex_t g_rng_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t slk[MAXS];
static buf_t B[MAXB];
static pthread_rwlock_t blk[MAXB];

static lg_t *g_log;
static size_t g_logcap;
static atomic_size_t g_ticket;

static const char *kind_name(int b) {
    return b < C.bufs ? "device" : b < C.bufs + C.pinned ? "pinned" : "registered";
}

static void buf_attach(buf_t *b) {
    sluice_buffer_info_t info;
    CK(sluice_buffer_info(b->buf, &info));
    CK(sluice_buffer_sync(b->buf, &b->sync));
    b->addr = info.device_ptr;
    b->host = info.host_ptr;
}

static sluice_stream_t mk_stream(int i) {
    sluice_stream_t s;
    CK(sluice_stream_create(g_dev, (i & 1) ? SLUICE_STREAM_NON_BLOCKING : 0, i == 3 ? -1 : 0, &s));
    return s;
}

static void ticket(const lg_t *o) {
    size_t t = atomic_fetch_add(&g_ticket, 1);
    if (t < g_logcap) g_log[t] = *o;
}

/* The program's buffer locks of an op: sorted, each buffer once, a write wins. */
typedef struct {
    int n;
    uint16_t idx[4];
    bool wr[4];
} lockset_t;

static void ls_add(lockset_t *l, int b, bool w) {
    int i = 0;
    while (i < l->n && l->idx[i] < b) i++;
    if (i < l->n && l->idx[i] == b) {
        l->wr[i] |= w;
        return;
    }
    memmove(&l->idx[i + 1], &l->idx[i], (size_t)(l->n - i) * sizeof l->idx[0]);
    memmove(&l->wr[i + 1], &l->wr[i], (size_t)(l->n - i) * sizeof l->wr[0]);
    l->idx[i] = (uint16_t)b, l->wr[i] = w, l->n++;
}
static void ls_sub(lockset_t *l, const lg_t *o) {
    ls_add(l, o->dst, true);
    if (reads_src(o->kind)) ls_add(l, o->src, false);
}
static void ls_lock(const lockset_t *l) {
    for (int i = 0; i < l->n; i++)
        (l->wr[i] ? pthread_rwlock_wrlock : pthread_rwlock_rdlock)(&blk[l->idx[i]]);
}
static void ls_unlock(const lockset_t *l) {
    for (int i = 0; i < l->n; i++) pthread_rwlock_unlock(&blk[l->idx[i]]);
}

/* ---- kernels ------------------------------------------------------------------------- */

typedef struct {
    int kind;
    uint32_t *dst;
    const uint32_t *src;
    uint64_t n, spin_ns;
    uint32_t value;
} emu_t;

static int32_t emu_run(void *p) {
    emu_t *j = p;
    if (j->spin_ns) {
        double end = now_s() + (double)j->spin_ns * 1e-9;
        while (now_s() < end) {
        }
    }
    for (uint64_t i = 0; i < j->n; i++) {
        switch (j->kind) {
        case L_ADD: j->dst[i] += j->src[i]; break;
        case L_KCOPY: j->dst[i] = j->src[i]; break;
        default: j->dst[i] = j->value; break;
        }
    }
    return 0;
}

/* How a kernel is tracked: its full sets, no reads (break=1), or nothing (foreign ops). */
enum { T_FULL, T_NOREADS, T_NONE };

/* Kernel sub-op o on st: a launch, or on the host backend and for host memory a host
 * callback doing the same. */
static void kernel(sluice_stream_t st, const lg_t *o, int track) {
    const buf_t *d = &B[o->dst], *s = &B[o->src];
    size_t nr = o->kind != L_FILL && track == T_FULL, nw = track != T_NONE;
    const sluice_sync_t *rs = nr ? &s->sync : NULL, *ws = nw ? &d->sync : NULL;
    if (!g_cuda || d->host) {
        emu_t *j = malloc(sizeof *j);
        if (!j) abort();
        *j = (emu_t){o->kind, (uint32_t *)(uintptr_t)d->addr, (const uint32_t *)(uintptr_t)s->addr, C.n,
                     o->spin, o->value};
        CK(sluice_stream_launch_host_func(st, emu_run, j, free, rs, nr, ws, nw));
        return;
    }
    sluice_launch_dims_t dims = {{16, 1, 1}, {256, 1, 1}, 0};
    uint64_t dp = d->addr, sp = s->addr, n = C.n, spin = o->spin;
    uint32_t v = o->value;
    void *fill_args[4] = {&dp, &n, &v, &spin}, *args[4] = {&dp, &sp, &n, &spin};
    CK(sluice_stream_launch(st, g_fn[o->kind], &dims, o->kind == L_FILL ? fill_args : args, 4, rs, nr, ws, nw));
}

/* Issues sub-op o on st. */
static void issue(sluice_stream_t st, const lg_t *o, int track) {
    const buf_t *d = &B[o->dst], *s = &B[o->src];
    switch (o->kind) {
    case L_COPY: CK(sluice_stream_copy(st, d->buf, o->doff, s->buf, o->soff, o->len)); break;
    case L_MEMSET: CK(sluice_stream_memset(st, d->buf, o->doff, (uint8_t)o->value, o->len)); break;
    default: kernel(st, o, track); break;
    }
}

static void load_kernels(void) {
    char near[4096] = "";
    ssize_t l = readlink("/proc/self/exe", near, sizeof near - 32);
    if (l > 0) {
        near[l] = 0;
        char *slash = strrchr(near, '/');
        if (slash) strcpy(slash + 1, "test_kernels.ptx");
    }
    const char *paths[] = {getenv("SLUICE_STRESS_PTX"), "test_kernels.ptx", near, "kernels/test_kernels.ptx"};
    FILE *f = NULL;
    for (size_t i = 0; i < 4 && !f; i++)
        if (paths[i] && *paths[i]) f = fopen(paths[i], "rb");
    if (!f) {
        fprintf(stderr, "stress: cannot find test_kernels.ptx (set SLUICE_STRESS_PTX)\n");
        exit(3);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *img = calloc(1, (size_t)len + 1);
    if (!img || fread(img, 1, (size_t)len, f) != (size_t)len) {
        fprintf(stderr, "stress: cannot read test_kernels.ptx\n");
        exit(3);
    }
    fclose(f);
    CK(sluice_module_load(g_dev, img, (size_t)len, &g_mod));
    free(img);
    CK(sluice_module_get_function(g_mod, "sluice_spin_add", &g_fn[L_ADD]));
    CK(sluice_module_get_function(g_mod, "sluice_spin_copy", &g_fn[L_KCOPY]));
    CK(sluice_module_get_function(g_mod, "sluice_spin_fill", &g_fn[L_FILL]));
}

/* ---- graphs -------------------------------------------------------------------------- */

/* Graph g owns the reserved triple 3g, 3g+1, 3g+2 (roles A, B, C). Its alternative
 * has the same topology over the triple of graph g + graphs/2. A forked graph runs
 * its main branch on A and B and one sub-op on C on a second stream. */
typedef struct {
    int nmain, nsub; /* sub[0..nmain) on the capture stream, the rest on the branch */
    lg_t sub[3];
    lockset_t locks;
    sluice_graph_t graph;
} gvar_t;

typedef struct {
    pthread_mutex_t mu; /* serialises launches and updates, so cur names what a launch ran */
    sluice_graph_exec_t exec;
    int cur, nvar;
    gvar_t var[2];
} gr_t;

static gr_t GR[MAXG];

static void rand_range(uint64_t *r, lg_t *o) {
    o->len = rndn(r, 4) == 0 ? C.nbytes : 1 + rndn(r, C.nbytes);
    o->doff = rndn(r, C.nbytes - o->len + 1);
    o->soff = rndn(r, C.nbytes - o->len + 1);
}

/* Disjoint source and destination ranges in one buffer (one in each half). */
static void split_range(uint64_t *r, lg_t *o) {
    uint32_t half = C.nbytes / 2;
    o->len = 1 + rndn(r, half);
    uint32_t a = rndn(r, half - o->len + 1), b = half + rndn(r, half - o->len + 1);
    bool swap = rndn(r, 2);
    o->doff = swap ? b : a, o->soff = swap ? a : b;
}

/* Spin, value and ranges of a sub-op whose kind, dst and src are set. */
static void rand_params(uint64_t *r, lg_t *o) {
    if (o->kind <= L_FILL) o->spin = rand_spin(r);
    if (o->kind == L_FILL) o->value = (uint32_t)rnd(r);
    if (o->kind == L_MEMSET) o->value = rndn(r, 256);
    if (o->kind >= L_COPY) {
        if (o->dst == o->src)
            split_range(r, o);
        else
            rand_range(r, o);
    }
}

static void gen_graphs(void) {
    uint64_t r = C.seed ^ 0x5851f42d4c957f2dull;
    r = rnd(&r);
    for (int g = 0; g < C.graphs; g++) {
        gr_t *gr = &GR[g];
        bool fork = g % 3 == 0;
        int nmain = 1 + (int)rndn(&r, fork ? 2 : 3), nsub = nmain + fork;
        uint8_t kind[3], dst[3], src[3]; /* roles 0..2 = A, B, C */
        for (int k = 0; k < nmain; k++) {
            kind[k] = (uint8_t)rndn(&r, 5);
            dst[k] = (uint8_t)rndn(&r, fork ? 2 : 3);
            src[k] = (uint8_t)((dst[k] + 1 + rndn(&r, fork ? 1 : 2)) % (fork ? 2 : 3));
        }
        if (fork) {
            static const uint8_t branch_kinds[] = {L_FILL, L_MEMSET, L_COPY};
            kind[nmain] = branch_kinds[rndn(&r, 3)], dst[nmain] = src[nmain] = 2;
        }
        pthread_mutex_init(&gr->mu, NULL);
        gr->nvar = g % 2 == 0 && C.graphs > 1 ? 2 : 1;
        for (int v = 0; v < gr->nvar; v++) {
            int owner = v == 0 ? g : (g + C.graphs / 2) % C.graphs;
            gvar_t *gv = &gr->var[v];
            gv->nmain = nmain, gv->nsub = nsub;
            for (int k = 0; k < nsub; k++) {
                lg_t *o = &gv->sub[k];
                *o = (lg_t){.kind = kind[k], .origin = O_GRAPH, .graph = (uint8_t)g, .variant = (uint8_t)v,
                            .dst = (uint16_t)(3 * owner + dst[k]), .src = (uint16_t)(3 * owner + src[k])};
                rand_params(&r, o);
                ls_sub(&gv->locks, o);
            }
        }
    }
}

static sluice_graph_t capture(const gvar_t *v) {
    sluice_graph_t g;
    CK(sluice_graph_capture_begin(g_cap, SLUICE_CAPTURE_RELAXED));
    issue(g_cap, &v->sub[0], T_FULL);
    if (v->nsub > v->nmain) {
        sluice_event_t fork, join;
        CK(sluice_event_record(g_cap, 0, &fork));
        CK(sluice_stream_wait_event(g_branch, fork));
        for (int k = 1; k < v->nmain; k++) issue(g_cap, &v->sub[k], T_FULL);
        for (int k = v->nmain; k < v->nsub; k++) issue(g_branch, &v->sub[k], T_FULL);
        CK(sluice_event_record(g_branch, 0, &join));
        CK(sluice_stream_wait_event(g_cap, join));
        CK(sluice_event_destroy(fork));
        CK(sluice_event_destroy(join));
    } else {
        for (int k = 1; k < v->nsub; k++) issue(g_cap, &v->sub[k], T_FULL);
    }
    CK(sluice_graph_capture_end(g_cap, &g));
    return g;
}

/* ---- ops ----------------------------------------------------------------------------- */

enum { C_OPS, C_LAUNCH, C_UPDATE, C_REINST, C_REALLOC, C_REPLACE, C_FOREIGN, C_PREFETCH, C_RNG, C_RECAPTURE, NCOUNT };
static atomic_long g_count[NCOUNT];

static void count(int c) { atomic_fetch_add(&g_count[c], 1); }
static void hold(int s) { pthread_rwlock_rdlock(&slk[s]); }
static void release(int s) { pthread_rwlock_unlock(&slk[s]); }

static int other_buf(uint64_t *r, int b, int lo, int n) {
    int x = lo + (int)rndn(r, (uint32_t)n - 1);
    return x >= b ? x + 1 : x;
}

/* One sub-op's critical section: its buffers' locks, its stream slot, its ticket. */
static void enter_sub(lockset_t *l, lg_t *o, int s) {
    o->stream = (uint8_t)s;
    memset(l, 0, sizeof *l);
    ls_sub(l, o);
    ls_lock(l);
    hold(s);
    ticket(o);
}

static void leave_sub(lockset_t *l, int s) {
    release(s);
    ls_unlock(l);
}

/* A tracked kernel, copy or memset. */
static void op_eager(int t, uint64_t *r, int kind) {
    lg_t o = {.kind = (uint8_t)kind, .origin = O_EAGER, .tid = (uint8_t)t};
    int nb = kind <= L_FILL ? C.bufs : C.nb; /* kernels: device buffers only */
    o.dst = (uint16_t)rndn(r, (uint32_t)nb);
    o.src = (uint16_t)other_buf(r, o.dst, 0, nb);
    rand_params(r, &o);
    int s = (int)rndn(r, (uint32_t)C.streams);
    lockset_t l;
    enter_sub(&l, &o, s);
    issue(S[s], &o, C.brk ? T_NOREADS : T_FULL);
    leave_sub(&l, s);
}

/* A foreign op: op_begin, the kernel enqueued untracked on the same stream, op_end.
 * Sometimes on two host buffers, where the kernel is a host callback on both backends. */
static void op_foreign(int t, uint64_t *r) {
    lg_t o = {.kind = (uint8_t)rndn(r, 3), .origin = O_FOREIGN, .tid = (uint8_t)t};
    int nhost = C.pinned + C.registered;
    int lo = nhost >= 2 && rndn(r, 10) < 3 ? C.bufs : 0, nb = lo ? nhost : C.bufs;
    o.dst = (uint16_t)(lo + rndn(r, (uint32_t)nb));
    o.src = (uint16_t)other_buf(r, o.dst, lo, nb);
    rand_params(r, &o);
    int s = (int)rndn(r, (uint32_t)C.streams);
    lockset_t l;
    enter_sub(&l, &o, s);
    bool rd = reads_src(o.kind);
    sluice_op_t op;
    CK(sluice_op_begin(S[s], rd ? &B[o.src].sync : NULL, rd, &B[o.dst].sync, 1, &op));
    kernel(S[s], &o, T_NONE);
    CK(sluice_op_end(op));
    leave_sub(&l, s);
    count(C_FOREIGN);
}

static void op_launch(int t, uint64_t *r) {
    gr_t *gr = &GR[rndn(r, (uint32_t)C.graphs)];
    int s = (int)rndn(r, (uint32_t)C.streams);
    pthread_mutex_lock(&gr->mu);
    const gvar_t *v = &gr->var[gr->cur];
    ls_lock(&v->locks);
    hold(s);
    for (int k = 0; k < v->nsub; k++) {
        lg_t o = v->sub[k];
        o.stream = (uint8_t)s, o.tid = (uint8_t)t;
        ticket(&o);
    }
    CK(sluice_graph_exec_launch(gr->exec, S[s]));
    release(s);
    ls_unlock(&v->locks);
    pthread_mutex_unlock(&gr->mu);
    count(C_LAUNCH);
}

/* Swaps an exec between its graph and the alternative (not a data op: no buffer locks). */
static void op_update(uint64_t *r) {
    if (C.graphs < 2) return;
    gr_t *gr = &GR[2 * rndn(r, (uint32_t)(C.graphs + 1) / 2)]; /* the even graphs have two */
    pthread_mutex_lock(&gr->mu);
    sluice_graph_update_info_t info;
    CK(sluice_graph_exec_update(gr->exec, gr->var[1 - gr->cur].graph, &info));
    gr->cur = 1 - gr->cur;
    pthread_mutex_unlock(&gr->mu);
    count(C_UPDATE);
    if (info.result == SLUICE_GRAPH_UPDATE_REINSTANTIATED) count(C_REINST);
}

/* Frees an unreserved device buffer (allocating the new one on a random stream) or a
 * pinned one, and initialises the new buffer with a logged memset or copy. With
 * break=1 only pinned buffers (kept in the pool), as kernels' untracked reads could
 * outlive a device buffer's free. */
static void op_realloc(int t, uint64_t *r) {
    int first = C.brk ? C.bufs : 3 * C.graphs, nfree = C.bufs - first + C.pinned;
    if (nfree == 0) return;
    int b = first + (int)rndn(r, (uint32_t)nfree);
    lg_t o = {.origin = O_REALLOC, .tid = (uint8_t)t, .dst = (uint16_t)b, .len = C.nbytes};
    if (rndn(r, 2)) {
        o.kind = L_MEMSET, o.value = rndn(r, 256);
    } else {
        o.kind = L_COPY, o.src = (uint16_t)other_buf(r, b, 0, C.nb);
    }
    int sa = (int)rndn(r, (uint32_t)C.streams), si = (int)rndn(r, (uint32_t)C.streams);
    o.stream = (uint8_t)si;
    lockset_t l = {0};
    ls_sub(&l, &o);
    ls_lock(&l);
    hold(sa < si ? sa : si);
    if (sa != si) hold(sa < si ? si : sa);
    CK(sluice_sync_destroy(B[b].sync));
    CK(sluice_buffer_free(B[b].buf));
    if (b < C.bufs)
        CK(sluice_buffer_alloc(S[sa], C.nbytes, &B[b].buf));
    else
        CK(sluice_buffer_alloc_pinned(g_dev, C.nbytes, &B[b].buf));
    buf_attach(&B[b]);
    ticket(&o);
    issue(S[si], &o, T_FULL);
    release(sa);
    if (sa != si) release(si);
    ls_unlock(&l);
    count(C_REALLOC);
}

/* A prefetched batch: a zero-copy fill and submit, then the oldest batch (maybe another
 * thread's) taken on a random stream, part of it copied into a buffer, and a release.
 * No buffer lock is held while waiting on the prefetcher. */
static void op_prefetch(int t, uint64_t *r) {
    sluice_prefetch_fill_t f;
    CK(sluice_prefetcher_acquire(g_pf, SLUICE_WAIT_FOREVER, &f));
    for (uint32_t j = 0; j < C.nbytes; j++) ((uint8_t *)f.host[0])[j] = batch_byte(f.seq, j);
    f.len[0] = C.nbytes;
    CK(sluice_prefetcher_submit(g_pf, &f));
    int s = (int)rndn(r, (uint32_t)C.streams);
    hold(s);
    sluice_batch_t b;
    sluice_batch_view_t v;
    CK(sluice_prefetcher_next(g_pf, S[s], SLUICE_WAIT_FOREVER, &b, &v));
    lg_t o = {.kind = L_BATCH, .origin = O_PREFETCH, .tid = (uint8_t)t, .stream = (uint8_t)s};
    o.dst = (uint16_t)rndn(r, (uint32_t)C.nb);
    o.value = (uint32_t)v.seq;
    rand_range(r, &o);
    lockset_t l;
    memset(&l, 0, sizeof l);
    ls_add(&l, o.dst, true);
    ls_lock(&l);
    ticket(&o);
    CK(sluice_stream_copy(S[s], B[o.dst].buf, o.doff, v.buffer[0], o.soff, o.len));
    ls_unlock(&l);
    CK(sluice_batch_release(b));
    release(s);
    count(C_PREFETCH);
}

/* An RNG draw into part of a device buffer. Draws are serialised by g_rng_mu, so the
 * log order is the order the generator's states advance in. */
static void op_rng(int t, uint64_t *r) {
    uint32_t draws = 1 + rndn(r, RNG_MAXCOUNT), len = 4 * RNG_STATES * draws;
    if (len > C.nbytes) return;
    lg_t o = {.kind = L_RNG, .origin = O_RNG, .tid = (uint8_t)t, .len = len, .value = draws};
    o.dst = (uint16_t)rndn(r, (uint32_t)C.bufs);
    o.doff = 4 * rndn(r, (C.nbytes - len) / 4 + 1);
    int s = (int)rndn(r, (uint32_t)C.streams);
    pthread_mutex_lock(&g_rng_mu);
    lockset_t l;
    enter_sub(&l, &o, s);
    CK(sluice_rng_generate(S[s], g_rng, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, B[o.dst].buf, o.doff,
                           draws));
    leave_sub(&l, s);
    pthread_mutex_unlock(&g_rng_mu);
    count(C_RNG);
}

static void op_replace_stream(uint64_t *r) {
    int s = (int)rndn(r, (uint32_t)C.streams);
    pthread_rwlock_wrlock(&slk[s]);
    CK(sluice_stream_destroy(S[s]));
    S[s] = mk_stream(s);
    pthread_rwlock_unlock(&slk[s]);
    count(C_REPLACE);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg;
    uint64_t r = g_seed * 0x632be59bd9b4e019ull + (uint64_t)t;
    r = rnd(&r); /* mixed: unrelated streams per thread */
    for (long i = 0; i < C.ops; i++) {
        if ((i & 7) == 0 && past_deadline()) break;
        uint32_t p = rndn(&r, 1000); /* per mille */
        if (p < 5)
            op_realloc(t, &r);
        else if (p < 10)
            op_replace_stream(&r);
        else if (p < 30)
            op_update(&r);
        else if (p < 230)
            op_launch(t, &r);
        else if (p < 330)
            op_foreign(t, &r);
        else if (p < 380)
            op_prefetch(t, &r);
        else if (p < 400)
            op_rng(t, &r);
        else if (p < 630)
            op_eager(t, &r, (int)rndn(&r, 3));
        else if (p < 850)
            op_eager(t, &r, L_COPY);
        else
            op_eager(t, &r, L_MEMSET);
        count(C_OPS);
    }
    return NULL;
}

/* ---- model ---------------------------------------------------------------------------- */

static void replay(uint8_t *model, size_t nlog) {
    for (int b = 0; b < C.nb; b++)
        for (uint64_t i = 0; i < C.n; i++) {
            uint32_t w = init_word(b, i);
            memcpy(model + (size_t)b * C.nbytes + 4 * i, &w, 4);
        }
    for (size_t t = 0; t < nlog; t++) {
        const lg_t *o = &g_log[t];
        uint8_t *d = model + (size_t)o->dst * C.nbytes, *s = model + (size_t)o->src * C.nbytes;
        for (uint64_t i = 0; o->kind <= L_FILL && i < C.n; i++) {
            uint32_t a, c;
            memcpy(&a, d + 4 * i, 4), memcpy(&c, s + 4 * i, 4);
            a = o->kind == L_ADD ? a + c : o->kind == L_KCOPY ? c : o->value;
            memcpy(d + 4 * i, &a, 4);
        }
        if (o->kind == L_COPY) memmove(d + o->doff, s + o->soff, o->len);
        if (o->kind == L_MEMSET) memset(d + o->doff, (int)o->value, o->len);
        for (uint32_t j = 0; o->kind == L_BATCH && j < o->len; j++)
            d[o->doff + j] = batch_byte(o->value, o->soff + j);
        if (o->kind == L_RNG) {
            CK(sluice_rng_generate(g_cap, g_rng_ref, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, g_rng_scratch,
                                   0, o->value));
            CK(sluice_stream_copy_to_host(g_cap, d + o->doff, g_rng_scratch, 0, o->len));
        }
    }
}

static void explain(int b, size_t nlog) {
    printf("  log entries touching buffer %d (last 12, newest last):\n", b);
    size_t hits[12];
    int nh = 0;
    for (size_t t = nlog; t-- > 0 && nh < 12;) {
        const lg_t *o = &g_log[t];
        if (o->dst == b || (reads_src(o->kind) && o->src == b)) hits[nh++] = t;
    }
    for (int i = nh - 1; i >= 0; i--) {
        const lg_t *o = &g_log[hits[i]];
        printf("    #%zu t%u s%u %-7s %-6s dst=%u", hits[i], o->tid, o->stream, oname[o->origin], lname[o->kind], o->dst);
        if (o->kind >= L_COPY) printf("[%u,+%u)", o->doff, o->len);
        if (reads_src(o->kind)) printf(" src=%u", o->src);
        if (o->kind == L_COPY) printf("[%u,+%u)", o->soff, o->len);
        if (o->kind == L_BATCH) printf(" batch=%u[%u,+%u)", o->value, o->soff, o->len);
        if (o->kind == L_FILL || o->kind == L_MEMSET) printf(" value=%#x", o->value);
        if (o->kind <= L_FILL) printf(" spin=%u", o->spin);
        if (o->origin == O_GRAPH) printf(" graph=%u/%u", o->graph, o->variant);
        printf("\n");
    }
}

/* ---- runs ----------------------------------------------------------------------------- */

static void init_contents(uint32_t *words) {
    for (int b = 0; b < C.nb; b++) {
        for (uint64_t i = 0; i < C.n; i++) words[i] = init_word(b, i);
        if (B[b].host) {
            CK(sluice_sync_wait_write(B[b].sync));
            memcpy(B[b].host, words, C.nbytes);
        } else {
            CK(sluice_stream_copy_from_host(S[b % C.streams], B[b].buf, 0, words, C.nbytes));
        }
    }
    CK(sluice_device_wait_all(g_dev));
}

/* A fresh generator and its twin, seeded from the run's seed. */
static void new_rngs(void) {
    if (g_rng.bits) {
        CK(sluice_rng_destroy(g_rng));
        CK(sluice_rng_destroy(g_rng_ref));
    }
    CK(sluice_rng_create(S[0], g_seed, RNG_STATES, &g_rng));
    CK(sluice_rng_create(g_cap, g_seed, RNG_STATES, &g_rng_ref));
}

/* Captures every graph again and updates its exec to the new capture (soak mode). */
static void recapture_all(void) {
    for (int g = 0; g < C.graphs; g++) {
        gr_t *gr = &GR[g];
        for (int v = 0; v < gr->nvar; v++) {
            CK(sluice_graph_destroy(gr->var[v].graph));
            gr->var[v].graph = capture(&gr->var[v]);
        }
        sluice_graph_update_info_t info;
        CK(sluice_graph_exec_update(gr->exec, gr->var[gr->cur].graph, &info));
        count(C_RECAPTURE);
    }
}

/* One run; returns the number of buffers that differ from the model. */
static int run_once(uint8_t *model, uint8_t *got) {
    init_contents((uint32_t *)got);
    new_rngs();
    atomic_store(&g_ticket, 0);
    for (int c = 0; c < NCOUNT; c++) atomic_store(&g_count[c], 0);
    if (g_soak && g_run > 0) recapture_all();
    double t0 = now_s();
    pthread_t th[MAXT];
    for (int t = 0; t < C.threads; t++) pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < C.threads; t++) pthread_join(th[t], NULL);
    CK(sluice_device_wait_all(g_dev));
    size_t nlog = atomic_load(&g_ticket);
    if (nlog > g_logcap) {
        fprintf(stderr, "stress: log overflow (%zu sub-ops)\n", nlog);
        exit(3);
    }
    replay(model, nlog);
    int bad = 0;
    for (int b = 0; b < C.nb; b++) {
        const uint8_t *have = B[b].host, *want = model + (size_t)b * C.nbytes;
        if (!have) {
            CK(sluice_stream_copy_to_host(S[0], got, B[b].buf, 0, C.nbytes));
            have = got;
        }
        if (memcmp(have, want, C.nbytes) == 0) continue;
        size_t first = 0, ndiff = 0;
        for (size_t k = 0; k < C.nbytes; k++)
            if (have[k] != want[k] && ndiff++ == 0) first = k;
        printf("MISMATCH seed=%" PRIu64 " run=%d buffer %d (%s", g_seed, g_run, b, kind_name(b));
        if (b < 3 * C.graphs) printf(", role %c of graph %d", "ABC"[b % 3], b / 3);
        printf("): %zu bytes differ, first at byte %zu: got %02x want %02x\n", ndiff, first, have[first], want[first]);
        if (bad++ < NEXPLAIN) explain(b, nlog);
    }
    long n[NCOUNT];
    for (int c = 0; c < NCOUNT; c++) n[c] = atomic_load(&g_count[c]);
    printf("RESULT stress seed=%" PRIu64 " run=%d backend=%s threads=%d ops=%ld launches=%ld updates=%ld "
           "reallocs=%ld stream_replacements=%ld foreign=%ld prefetched=%ld rng_draws=%ld recaptured=%ld "
           "reinstantiated=%ld subops=%zu secs=%.2f failures=%d\n", g_seed, g_run, g_cuda ? "cuda" : "host",
           C.threads, n[C_OPS], n[C_LAUNCH], n[C_UPDATE], n[C_REALLOC], n[C_REPLACE], n[C_FOREIGN], n[C_PREFETCH],
           n[C_RNG], n[C_RECAPTURE], n[C_REINST], nlog, now_s() - t0, bad);
    fflush(stdout);
    return bad;
}

static void bad_config(const char *why) {
    fprintf(stderr, "stress: %s\n", why);
    exit(2);
}

int main(int argc, char **argv) {
    g_argc = argc, g_argv = argv;
    check_opts();
    const char *soak = getenv("STRESS_SECONDS");
    g_soak = soak && *soak;
    long soak_secs = g_soak ? strtol(soak, NULL, 0) : 0;
    C.threads = (int)opt_int("threads", g_soak ? 16 : 4);
    C.streams = (int)opt_int("streams", 4);
    C.bufs = (int)opt_int("bufs", 64);
    C.pinned = (int)opt_int("pinned", 8);
    C.registered = (int)opt_int("registered", 4);
    C.graphs = (int)opt_int("graphs", 16);
    C.n = (uint64_t)opt_int("n", 2048);
    C.ops = opt_int("ops", 8000);
    C.seed = (uint64_t)opt_int("seed", 1);
    C.runs = opt_int("runs", g_soak ? 0x7fffffffL : 1);
    C.secs = opt_int("secs", soak_secs);
    C.espin = (uint64_t)opt_int("espin", 30000);
    C.pzero = (int)opt_int("pzero", 25);
    C.brk = opt_int("break", 0) != 0;
    C.nb = C.bufs + C.pinned + C.registered;
    C.nbytes = (uint32_t)(C.n * 4);
    if (C.threads < 1 || C.threads > MAXT) bad_config("threads must be 1..64");
    if (C.streams < 1 || C.streams > MAXS) bad_config("streams must be 1..16");
    if (C.graphs < 1 || C.graphs > MAXG) bad_config("graphs must be 1..64");
    if (C.bufs < 3 * C.graphs + 1 || C.pinned < 0 || C.registered < 0 || C.nb > MAXB)
        bad_config("need 3*graphs < bufs, pinned >= 0, registered >= 0, bufs+pinned+registered <= 1024");
    if (C.n < 2 || C.n > (1u << 28)) bad_config("n must be 2..2^28");
    if (C.espin > 1000000000u) bad_config("espin must be at most 1e9 (1 s)");
    g_deadline = C.secs > 0 ? now_s() + (double)C.secs : 1e300;
    g_seed = C.seed;

    CK(sluice_device_open_default(&g_dev));
    sluice_device_props_t p;
    CK(sluice_device_props(g_dev, &p));
    g_cuda = p.backend == SLUICE_BACKEND_CUDA;
    printf("stress: sluice %s, device \"%s\" (%s backend%s)%s\n", sluice_version(), p.name, g_cuda ? "cuda" : "host",
           g_cuda ? "" : ": kernels emulated by tracked host callbacks", C.brk ? ", break=1 (must fail)" : "");
    fflush(stdout);
    if (g_cuda) load_kernels();

    for (int s = 0; s < C.streams; s++) S[s] = mk_stream(s), pthread_rwlock_init(&slk[s], NULL);
    CK(sluice_stream_create(g_dev, 0, 0, &g_cap));
    CK(sluice_stream_create(g_dev, SLUICE_STREAM_NON_BLOCKING, 0, &g_branch));
    size_t regbytes = (C.nbytes + 4095u) & ~(size_t)4095u;
    for (int b = 0; b < C.nb; b++) {
        pthread_rwlock_init(&blk[b], NULL);
        if (b < C.bufs) {
            CK(sluice_buffer_alloc(S[b % C.streams], C.nbytes, &B[b].buf));
            CK(sluice_stream_memset(S[b % C.streams], B[b].buf, 0, 0, C.nbytes));
        } else if (b < C.bufs + C.pinned) {
            CK(sluice_buffer_alloc_pinned(g_dev, C.nbytes, &B[b].buf));
        } else {
            void *mem = NULL;
            if (posix_memalign(&mem, 4096, regbytes)) abort();
            CK(sluice_buffer_register_host(g_dev, mem, C.nbytes, &B[b].buf));
        }
        buf_attach(&B[b]);
    }
    CK(sluice_device_wait_all(g_dev));
    sluice_prefetcher_config_t pcfg;
    memset(&pcfg, 0, sizeof pcfg);
    pcfg.depth = 2, pcfg.segments = 1, pcfg.capacity[0] = C.nbytes;
    CK(sluice_prefetcher_create(g_dev, &pcfg, &g_pf));
    CK(sluice_buffer_alloc(g_cap, 4 * RNG_STATES * RNG_MAXCOUNT, &g_rng_scratch));

    gen_graphs();
    for (int g = 0; g < C.graphs; g++) {
        for (int v = 0; v < GR[g].nvar; v++) GR[g].var[v].graph = capture(&GR[g].var[v]);
        CK(sluice_graph_instantiate(GR[g].var[0].graph, &GR[g].exec));
    }

    g_logcap = (size_t)C.threads * (size_t)C.ops * 3 + 16;
    g_log = calloc(g_logcap, sizeof *g_log);
    uint8_t *model = malloc((size_t)C.nb * C.nbytes), *got = malloc(C.nbytes);
    if (!g_log || !model || !got) abort();
    int failing = 0, runs = 0;
    for (g_run = 0; g_run < C.runs && (g_run == 0 || !past_deadline()); g_run++, runs++) {
        g_seed = C.seed + (uint64_t)g_run;
        failing += run_once(model, got) > 0;
    }

    for (int g = 0; g < C.graphs; g++) {
        CK(sluice_graph_exec_destroy(GR[g].exec));
        for (int v = 0; v < GR[g].nvar; v++) CK(sluice_graph_destroy(GR[g].var[v].graph));
        pthread_mutex_destroy(&GR[g].mu);
    }
    for (int b = 0; b < C.nb; b++) {
        void *reg = b >= C.bufs + C.pinned ? B[b].host : NULL;
        CK(sluice_sync_destroy(B[b].sync));
        CK(sluice_buffer_free(B[b].buf)); /* waits for copies that use registered memory */
        free(reg);
        pthread_rwlock_destroy(&blk[b]);
    }
    for (int s = 0; s < C.streams; s++) {
        CK(sluice_stream_destroy(S[s]));
        pthread_rwlock_destroy(&slk[s]);
    }
    CK(sluice_prefetcher_destroy(g_pf));
    CK(sluice_rng_destroy(g_rng));
    CK(sluice_rng_destroy(g_rng_ref));
    CK(sluice_buffer_free(g_rng_scratch));
    CK(sluice_stream_destroy(g_cap));
    CK(sluice_stream_destroy(g_branch));
    if (g_cuda) {
        for (int k = 0; k < 3; k++) CK(sluice_function_destroy(g_fn[k]));
        CK(sluice_module_unload(g_mod));
    }
    CK(sluice_device_close(g_dev));
    uint64_t live = sluice_live_handles();
    free(g_log), free(model), free(got);
    printf("stress: %d run(s), %d failing; live handles after close: %" PRIu64 "\n", runs, failing, live);
    return failing || live ? 1 : 0;
}
