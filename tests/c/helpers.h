/*
 * helpers.h: fixtures shared by the sluice C test suites.
 *
 * - The device under test always comes from sluice_device_open_default, so the runner
 *   picks the backend with SLUICE_BACKEND (host in CI, cuda on a GPU machine).
 * - Host callbacks run on other threads (driver threads on CUDA). They report through
 *   C11 atomics; the data they touch lives in static storage so that a test that
 *   returns early can never leave a callback with a dangling pointer.
 * - CUDA may run the host functions of all streams on one driver thread. So never
 *   block the test thread (synchronize, copy_to_host, wait_*) while any gate is
 *   closed: a closed gate may hold every other stream's callbacks too.
 */
#ifndef SLUICE_TEST_HELPERS_H
#define SLUICE_TEST_HELPERS_H

#include "sluice_test.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- errors on other threads ----------------------------------------------------- */

/* CHECK is for the test thread: another thread counts an error in `errors` (which
 * the test then CHECKs) and frees it. True when `e` was an error. */
static inline bool count_error(atomic_int *errors, sluice_error_t *e) {
    if (!e) return false;
    atomic_fetch_add(errors, 1);
    sluice_error_free(e);
    return true;
}

/* ---- time ---------------------------------------------------------------------- */

static inline void sleep_ms(unsigned ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline void sleep_us(unsigned us) {
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static inline double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the device under test ------------------------------------------------------- */

/* Opens the default device (SLUICE_BACKEND decides). Returns false and fails the
 * test if that is impossible. */
static inline bool open_dev(sluice_device_t *dev) {
    return CHECK_OK(sluice_device_open_default(dev));
}

static inline uint32_t dev_backend(sluice_device_t dev) {
    sluice_device_props_t p;
    memset(&p, 0, sizeof p);
    if (!CHECK_OK(sluice_device_props(dev, &p))) return 0;
    return p.backend;
}

static inline bool new_stream(sluice_device_t dev, sluice_stream_t *s) {
    return CHECK_OK(sluice_stream_create(dev, 0, 0, s));
}

static inline uint64_t stream_waits(sluice_stream_t s) {
    sluice_stream_stats_t st;
    memset(&st, 0, sizeof st);
    CHECK_OK(sluice_stream_stats(s, &st));
    return st.waits;
}

static inline uint64_t stream_id(sluice_stream_t s) {
    sluice_stream_stats_t st;
    memset(&st, 0, sizeof st);
    CHECK_OK(sluice_stream_stats(s, &st));
    return st.id;
}

/* ---- callbacks ------------------------------------------------------------------- */

/* A gate: a callback that holds its stream until the test opens it (or 20 s pass,
 * then it returns 99 so that the next synchronize reports CALLBACK_FAILED). */
typedef struct {
    atomic_int open;
    atomic_int entered;
    atomic_int opens_itself_ms; /* 0: only the test (or the 20 s limit) opens it */
} gate_t;

static inline void gate_reset(gate_t *g) {
    atomic_store(&g->open, 0);
    atomic_store(&g->entered, 0);
    atomic_store(&g->opens_itself_ms, 0);
}

static inline int32_t gate_cb(void *p) {
    gate_t *g = p;
    atomic_store(&g->entered, 1);
    double start = now_ms(), deadline = start + 20000.0;
    int opens_itself_ms = atomic_load(&g->opens_itself_ms);
    while (!atomic_load(&g->open)) {
        if (opens_itself_ms && now_ms() > start + opens_itself_ms) return 0;
        if (now_ms() > deadline) return 99;
        sleep_us(100);
    }
    return 0;
}

static inline bool enqueue_gate(sluice_stream_t s, gate_t *g) {
    gate_reset(g);
    return CHECK_OK(sluice_stream_launch_host_func(s, gate_cb, g, NULL, NULL, 0, NULL, 0));
}

static inline void gate_open(gate_t *g) { atomic_store(&g->open, 1); }

/* Under compute-sanitizer (SLUICE_TEST_SANITIZER) initcheck, the driver's
 * stream-ordered free and alloc wait for the stream, so a test that frees while its
 * gate holds that stream would wait for the gate: there the gate opens itself after
 * 2 s, and the test skips what only holds while the gate is still closed. */
static inline bool under_sanitizer(void) { return getenv("SLUICE_TEST_SANITIZER") != NULL; }

static inline bool enqueue_gate_for_free(sluice_stream_t s, gate_t *g) {
    gate_reset(g);
    if (under_sanitizer()) atomic_store(&g->opens_itself_ms, 2000);
    return CHECK_OK(sluice_stream_launch_host_func(s, gate_cb, g, NULL, NULL, 0, NULL, 0));
}

/* Sleeps for (uintptr_t)user_data milliseconds. */
static inline int32_t sleep_cb(void *p) {
    sleep_ms((unsigned)(uintptr_t)p);
    return 0;
}

/* Sleeps, then sets a flag: stands in for slow foreign work. */
typedef struct {
    unsigned ms;
    atomic_int *flag;
    int value;
} slow_set_t;

static inline int32_t slow_set_cb(void *p) {
    slow_set_t *a = p;
    if (a->ms) sleep_ms(a->ms);
    atomic_store(a->flag, a->value);
    return 0;
}

/* Sets *(atomic_int*)user_data = 1. */
static inline int32_t set_flag_cb(void *p) {
    atomic_store((atomic_int *)p, 1);
    return 0;
}

/* Adds one to *(atomic_int*)user_data. */
static inline int32_t incr_cb(void *p) {
    atomic_fetch_add((atomic_int *)p, 1);
    return 0;
}

/* Returns (int)(intptr_t)user_data. */
static inline int32_t return_cb(void *p) { return (int32_t)(intptr_t)p; }

/* An append-only log shared by callbacks on any streams. */
#define LOG_CAP 4096
typedef struct {
    atomic_uint n;
    int vals[LOG_CAP];
} log_t;

typedef struct {
    log_t *log;
    int value;
} log_item_t;

static inline void log_reset(log_t *l) {
    atomic_store(&l->n, 0);
    memset(l->vals, 0, sizeof l->vals);
}

static inline int32_t log_cb(void *p) {
    log_item_t *it = p;
    unsigned i = atomic_fetch_add(&it->log->n, 1);
    if (i >= LOG_CAP) return 98;
    it->log->vals[i] = it->value;
    return 0;
}

/* Position of value v in the log, or -1. */
static inline int log_pos(log_t *l, int v) {
    unsigned n = atomic_load(&l->n);
    for (unsigned i = 0; i < n && i < LOG_CAP; i++)
        if (l->vals[i] == v) return (int)i;
    return -1;
}

/* ---- data patterns ---------------------------------------------------------------- */

/* A non-trivial byte pattern: no zero runs, differs between seeds and offsets. */
static inline uint8_t pattern_byte(size_t i, unsigned seed) {
    uint32_t x = (uint32_t)i * 2654435761u + seed * 40503u + 0x9e37u;
    x ^= x >> 15;
    x *= 0x2c1b3c6du;
    x ^= x >> 12;
    return (uint8_t)(x | 1u);
}

static inline void fill_pattern(uint8_t *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = pattern_byte(i, seed);
}

/* Index of the first byte of p[0..n) that differs from the pattern (seed, starting at
 * pattern index first), or -1. */
static inline long check_pattern(const uint8_t *p, size_t n, unsigned seed, size_t first) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pattern_byte(first + i, seed)) return (long)i;
    return -1;
}

static inline long check_fill(const uint8_t *p, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) return (long)i;
    return -1;
}

/* ---- handle helpers --------------------------------------------------------------- */

/* True when the message contains the handle's bits in hex (as "%llx"). */
static inline bool msg_names_handle(const char *msg, uint64_t bits) {
    char hex[32];
    snprintf(hex, sizeof hex, "%llx", (unsigned long long)bits);
    return msg != NULL && strstr(msg, hex) != NULL;
}

/* ---- re-executing this binary ------------------------------------------------------ */

typedef struct {
    int exited;   /* 1 when the child exited normally */
    int status;   /* its exit status, or the signal that killed it */
    int timed_out;
    char out[16384];
    size_t out_len;
    char err[16384];
    size_t err_len;
} child_result_t;

static inline bool env_key_matches(const char *entry, const char *kv) {
    const char *eq = strchr(kv, '=');
    size_t klen = eq ? (size_t)(eq - kv) : strlen(kv);
    return strncmp(entry, kv, klen) == 0 && entry[klen] == '=';
}

/* Runs `/proc/self/exe --child MODE` (or $SLUICE_TEST_SELF) with the current environment, where each "K=V" of
 * env_set replaces or adds K and each "K" of env_unset removes it. Captures stdout and
 * stderr. Returns false (and fails the test) when it could not run it. */
static inline bool run_child(const char *mode, const char *const *env_set,
                             const char *const *env_unset, child_result_t *res,
                             int timeout_s) {
    memset(res, 0, sizeof *res);
    size_t n = 0;
    while (environ[n]) n++;
    size_t nset = 0;
    while (env_set && env_set[nset]) nset++;
    char **envp = calloc(n + nset + 1, sizeof *envp);
    if (!CHECK(envp != NULL)) return false;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool drop = false;
        for (size_t j = 0; env_set && env_set[j]; j++)
            if (env_key_matches(environ[i], env_set[j])) drop = true;
        for (size_t j = 0; env_unset && env_unset[j]; j++)
            if (env_key_matches(environ[i], env_unset[j])) drop = true;
        if (!drop) envp[k++] = environ[i];
    }
    for (size_t j = 0; j < nset; j++) envp[k++] = (char *)env_set[j];
    envp[k] = NULL;

    int po[2], pe[2];
    if (!CHECK(pipe(po) == 0)) {
        free(envp);
        return false;
    }
    if (!CHECK(pipe(pe) == 0)) {
        close(po[0]);
        close(po[1]);
        free(envp);
        return false;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        char *argv[] = {(char *)"sluice_c_tests", (char *)"--child", (char *)mode, NULL};
        /* Under valgrind /proc/self/exe is the tool: scripts/valgrind-c.sh names the
         * test binary in SLUICE_TEST_SELF. */
        const char *self = getenv("SLUICE_TEST_SELF");
        execve(self && *self ? self : "/proc/self/exe", argv, envp);
        _exit(127);
    }
    free(envp);
    close(po[1]);
    close(pe[1]);
    if (!CHECK(pid > 0)) {
        close(po[0]);
        close(pe[0]);
        return false;
    }
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2;
    double deadline = now_ms() + timeout_s * 1000.0;
    while (open_fds > 0) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) {
            res->timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        int r = poll(fds, 2, left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char *buf = i == 0 ? res->out : res->err;
            size_t *len = i == 0 ? &res->out_len : &res->err_len;
            size_t cap = (i == 0 ? sizeof res->out : sizeof res->err) - 1;
            char tmp[4096];
            ssize_t got = read(fds[i].fd, tmp, sizeof tmp);
            if (got <= 0) {
                close(fds[i].fd);
                fds[i].fd = -1;
                open_fds--;
                continue;
            }
            size_t take = (size_t)got;
            if (*len + take > cap) take = cap - *len;
            memcpy(buf + *len, tmp, take);
            *len += take;
            buf[*len] = '\0';
        }
    }
    for (int i = 0; i < 2; i++)
        if (fds[i].fd >= 0) close(fds[i].fd);
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(wstatus)) {
        res->exited = 1;
        res->status = WEXITSTATUS(wstatus);
    } else if (WIFSIGNALED(wstatus)) {
        res->status = WTERMSIG(wstatus);
    }
    return true;
}

static inline void print_child(const char *mode, const child_result_t *r) {
    printf("    --- child %s: %s %d%s ---\n", mode, r->exited ? "exit" : "signal", r->status,
           r->timed_out ? " (timed out)" : "");
    printf("    --- child stdout ---\n%s", r->out);
    printf("    --- child stderr ---\n%s", r->err);
    printf("    --- end child ---\n");
}

/* A child returns CHILD_SKIP when the situation it tests does not exist here, else
 * st_failures() ? 1 : 0. */
#define CHILD_SKIP 77

#endif /* SLUICE_TEST_HELPERS_H */
