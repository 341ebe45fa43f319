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
 * prefetched batches (a zero-copy fill, by hand or by sluice_gather_rows, and submit, or
 * sluice_prefetcher_push; then sluice_prefetcher_next on a random stream, a tracked copy
 * of part of the batch into a buffer, and a release);
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
 * Files: this one (options, time and the RNG); buffers.inc, kernels.inc, graphs.inc,
 * ops.inc, model.inc and runs.inc, included below in that order (one translation unit).
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

#include "buffers.inc"
#include "kernels.inc"
#include "graphs.inc"
#include "ops.inc"
#include "model.inc"
#include "runs.inc"
