/* The producers' side of the prefetcher: how fast can threads fill its slots?
 * A producer refills a slot whose pinned lines the last H2D copy read; a plain
 * store reads each line back from memory before writing it, the library's
 * streaming stores (sluice_prefetcher_push, sluice_gather_rows) do not.
 *
 * Modes, each a prefetcher of DEPTH slots of ROWS rows of 784 bytes (two of the
 * Go trainer's batches of 256 by default), filled by P producer threads while the
 * main thread takes each batch (sluice_prefetcher_next) and releases it at once:
 *   copy-memcpy    acquire, memcpy of contiguous rows, submit
 *   copy-push      sluice_prefetcher_push of the same rows (the library's copy)
 *   gather-memcpy  acquire, a memcpy per row of a shuffled index, submit
 *   gather-sluice  acquire, sluice_gather_rows of the same index, submit
 * The source is a 47 MB set of 60,000 rows, as MNIST's training images. On the
 * host backend the "device" copy reads the slot with the CPU, so there the figures
 * say little: it is the GPU's DMA that leaves the slot's lines out of cache.
 *
 * Build (C11, sluice only; benches/prefetch/run-fill.sh does this):
 *   cc -O2 -std=c11 benches/prefetch/fill_bench.c -I include -L DIR -lsluice -lpthread -Wl,-rpath,DIR
 * Environment: SLUICE_FILL_ROWS (512), SLUICE_FILL_DEPTH (16), SLUICE_FILL_N (batches
 * per run, 4000), SLUICE_FILL_REPS (3; the median is printed), SLUICE_FILL_PRODUCERS
 * ("1 4"). The backend is SLUICE_BACKEND's (host when unset).
 * Every single-producer run checks its last batch on the device against the source;
 * a mismatch or a failed call exits 1. */
#define _POSIX_C_SOURCE 200809L
#include "sluice.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROW 784
#define SRC_ROWS 60000
#define MAX_PRODUCERS 16

static void ck(sluice_error_t *e, const char *what) {
    if (!e) return;
    fprintf(stderr, "fill_bench: %s: %s\n", what, sluice_error_message(e));
    sluice_error_free(e);
    exit(1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static size_t env_or(const char *name, size_t def) {
    const char *v = getenv(name);
    return v && *v ? (size_t)strtoull(v, NULL, 10) : def;
}

enum mode { COPY_MEMCPY, COPY_PUSH, GATHER_MEMCPY, GATHER_SLUICE, MODES };
static const char *const mode_names[MODES] = {"copy-memcpy", "copy-push", "gather-memcpy",
                                              "gather-sluice"};

static uint8_t *src;
static size_t rows_per_batch;

/* Row i of batch key: a fixed pseudo-random index (gathers), or the next row of a
 * window that moves through the source (copies). */
static int64_t row_of(enum mode m, uint64_t key, size_t i) {
    if (m == COPY_MEMCPY || m == COPY_PUSH)
        return (int64_t)((key * rows_per_batch % (SRC_ROWS - rows_per_batch)) + i);
    uint64_t x = (key * rows_per_batch + i + 1) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 31;
    return (int64_t)(x % SRC_ROWS);
}

typedef struct {
    sluice_prefetcher_t pf;
    enum mode mode;
    uint64_t batches, first_key;
    double fill_s; /* time spent writing slots */
} producer_t;

static void *produce(void *arg) {
    producer_t *p = arg;
    int64_t *idx = malloc(rows_per_batch * sizeof *idx);
    size_t bytes = rows_per_batch * ROW;
    for (uint64_t k = 0; k < p->batches; k++) {
        uint64_t key = p->first_key + k;
        /* A copy needs its first row only. */
        size_t n = p->mode == COPY_MEMCPY || p->mode == COPY_PUSH ? 1 : rows_per_batch;
        for (size_t i = 0; i < n; i++) idx[i] = row_of(p->mode, key, i);
        if (p->mode == COPY_PUSH) {
            sluice_prefetch_segment_t seg = {src + idx[0] * ROW, bytes};
            ck(sluice_prefetcher_push(p->pf, &seg, 1, SLUICE_WAIT_FOREVER, NULL), "push");
            continue; /* its copy cannot be timed apart from its wait for a slot */
        }
        sluice_prefetch_fill_t f;
        ck(sluice_prefetcher_acquire(p->pf, SLUICE_WAIT_FOREVER, &f), "acquire");
        uint8_t *dst = f.host[0];
        double t0 = now_s();
        if (p->mode == COPY_MEMCPY) {
            memcpy(dst, src + idx[0] * ROW, bytes);
        } else if (p->mode == GATHER_MEMCPY) {
            for (size_t i = 0; i < rows_per_batch; i++) {
                if (i + 8 < rows_per_batch) __builtin_prefetch(src + idx[i + 8] * ROW);
                memcpy(dst + i * ROW, src + idx[i] * ROW, ROW);
            }
        } else {
            ck(sluice_gather_rows(dst, f.capacity[0], src, (size_t)SRC_ROWS * ROW, ROW, idx,
                                  rows_per_batch),
               "gather_rows");
        }
        p->fill_s += now_s() - t0;
        f.len[0] = bytes;
        ck(sluice_prefetcher_submit(p->pf, &f), "submit");
    }
    free(idx);
    return NULL;
}

/* One run: batches/s end to end and the producers' fill time per slot (0 for
 * copy-push). */
static void run(sluice_device_t dev, sluice_stream_t s, enum mode m, size_t producers, size_t n,
                size_t depth, double *rate, double *fill_us) {
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = (uint32_t)depth;
    cfg.segments = 1;
    cfg.capacity[0] = rows_per_batch * ROW;
    sluice_prefetcher_t pf;
    ck(sluice_prefetcher_create(dev, &cfg, &pf), "prefetcher_create");
    size_t warm = depth * 2, total = n + warm;
    producer_t pr[MAX_PRODUCERS];
    pthread_t th[MAX_PRODUCERS];
    for (size_t i = 0; i < producers; i++) {
        size_t share = total / producers + (i < total % producers);
        pr[i] = (producer_t){pf, m, share, i * total, 0};
        if (pthread_create(&th[i], NULL, produce, &pr[i])) exit(1);
    }
    double t0 = 0;
    sluice_buffer_t check = {0};
    for (size_t b = 0; b < total; b++) {
        if (b == warm) t0 = now_s();
        sluice_batch_t batch;
        sluice_batch_view_t v;
        if (producers == 1 && b == total - 1) {
            ck(sluice_buffer_alloc(s, cfg.capacity[0], &check), "buffer_alloc");
            ck(sluice_prefetcher_next_into(pf, s, &check, 1, SLUICE_WAIT_FOREVER, &v), "next_into");
            break;
        }
        ck(sluice_prefetcher_next(pf, s, SLUICE_WAIT_FOREVER, &batch, &v), "next");
        ck(sluice_batch_release(batch), "batch_release");
    }
    ck(sluice_stream_synchronize(s), "stream_synchronize");
    *rate = (double)n / (now_s() - t0);
    double fill = 0;
    for (size_t i = 0; i < producers; i++) {
        pthread_join(th[i], NULL);
        fill += pr[i].fill_s;
    }
    *fill_us = fill / (double)total * 1e6;
    if (check.bits) {
        uint8_t *got = malloc(cfg.capacity[0]);
        ck(sluice_stream_copy_to_host(s, got, check, 0, cfg.capacity[0]), "copy_to_host");
        ck(sluice_stream_synchronize(s), "stream_synchronize");
        for (size_t i = 0; i < rows_per_batch; i++) {
            if (memcmp(got + i * ROW, src + row_of(m, total - 1, i) * ROW, ROW) != 0) {
                fprintf(stderr, "fill_bench: %s: batch %zu, row %zu differs\n", mode_names[m],
                        total - 1, i);
                exit(1);
            }
        }
        free(got);
        ck(sluice_buffer_free(check), "buffer_free");
    }
    ck(sluice_prefetcher_destroy(pf), "prefetcher_destroy");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n) {
    qsort(v, n, sizeof *v, cmp_double);
    return v[n / 2];
}

int main(void) {
    rows_per_batch = env_or("SLUICE_FILL_ROWS", 512);
    size_t depth = env_or("SLUICE_FILL_DEPTH", 16), n = env_or("SLUICE_FILL_N", 4000);
    size_t reps = env_or("SLUICE_FILL_REPS", 3);
    if (rows_per_batch < 1 || rows_per_batch >= SRC_ROWS || reps < 1 || reps > 15 || n < 1) {
        fprintf(stderr, "fill_bench: bad SLUICE_FILL_ROWS, _REPS or _N\n");
        return 1;
    }
    src = malloc((size_t)SRC_ROWS * ROW);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)SRC_ROWS * ROW; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        src[i] = (uint8_t)x;
    }
    sluice_device_t dev;
    ck(sluice_device_open_default(&dev), "device_open_default");
    sluice_stream_t s;
    ck(sluice_stream_create(dev, 0, 0, &s), "stream_create");

    const char *plist = getenv("SLUICE_FILL_PRODUCERS");
    char pbuf[64];
    snprintf(pbuf, sizeof pbuf, "%s", plist && *plist ? plist : "1 4");
    printf("slots of %zu rows of %d bytes (%zu KiB), depth %zu, %zu batches a run, median of %zu\n\n",
           rows_per_batch, ROW, rows_per_batch * ROW / 1024, depth, n, reps);
    printf("| mode | producers | batches/s | fill us/slot |\n|---|---:|---:|---:|\n");
    for (char *tok = strtok(pbuf, " "); tok; tok = strtok(NULL, " ")) {
        size_t producers = (size_t)atoi(tok);
        if (producers < 1 || producers > MAX_PRODUCERS) continue;
        double rate[MODES], fill[MODES];
        for (int m = 0; m < MODES; m++) {
            double r[15], f[15];
            for (size_t k = 0; k < reps; k++)
                run(dev, s, (enum mode)m, producers, n, depth, &r[k], &f[k]);
            rate[m] = median(r, reps);
            fill[m] = median(f, reps);
            if (m == COPY_PUSH)
                printf("| %s | %zu | %.0f | - |\n", mode_names[m], producers, rate[m]);
            else
                printf("| %s | %zu | %.0f | %.1f |\n", mode_names[m], producers, rate[m], fill[m]);
            fflush(stdout);
        }
        printf("RESULT producers=%zu copy_push_over_memcpy=%.3f gather_sluice_over_memcpy=%.3f "
               "fill_gather_memcpy_us=%.1f fill_gather_sluice_us=%.1f\n",
               producers, rate[COPY_PUSH] / rate[COPY_MEMCPY],
               rate[GATHER_SLUICE] / rate[GATHER_MEMCPY], fill[GATHER_MEMCPY], fill[GATHER_SLUICE]);
    }
    ck(sluice_stream_destroy(s), "stream_destroy");
    ck(sluice_device_close(dev), "device_close");
    free(src);
    return 0;
}
