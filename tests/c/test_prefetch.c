/* The prefetcher (issue 12): order, bytes, back-pressure, end of data, producer
 * errors, zero-copy fills, destroy at any moment, bad arguments. */
#include "helpers.h"

#include <pthread.h>

#define SEGS 2
/* Segment 0 is long enough for the library's streaming stores, with a tail. */
#define CAP0 4100
static const size_t CAPS[SEGS] = {CAP0, 24};

/* Byte j of segment seg of batch key. */
static uint8_t byte_of(uint64_t key, int seg, size_t j) {
    uint64_t x = (key + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seg << 56) ^ j * 0x100000001b3ull;
    x ^= x >> 29;
    return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

/* Segment lengths vary, and are sometimes 0. */
static size_t len_of(uint64_t key, int seg) {
    uint64_t r = (key + (uint64_t)seg) % 5;
    return r == 0 ? 0 : r == 1 ? CAPS[seg] : CAPS[seg] * r / 5;
}

static bool make_pf(sluice_device_t d, uint32_t depth, sluice_prefetcher_t *pf) {
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = depth;
    cfg.segments = SEGS;
    for (int i = 0; i < SEGS; i++) cfg.capacity[i] = CAPS[i];
    return CHECK_OK(sluice_prefetcher_create(d, &cfg, pf));
}

typedef struct {
    sluice_prefetcher_t pf;
    uint64_t batches;
    atomic_int failed;
    atomic_int pushed;
} producer_t;

static void *push_batches(void *p) {
    producer_t *pr = p;
    uint8_t data[SEGS][CAP0];
    for (uint64_t key = 0; key < pr->batches; key++) {
        sluice_prefetch_segment_t segs[SEGS];
        for (int s = 0; s < SEGS; s++) {
            size_t n = len_of(key, s);
            for (size_t j = 0; j < n; j++) data[s][j] = byte_of(key, s, j);
            segs[s].ptr = data[s];
            segs[s].len = n;
        }
        uint64_t seq = ~0ull;
        sluice_error_t *e = sluice_prefetcher_push(pr->pf, segs, SEGS, SLUICE_WAIT_FOREVER, &seq);
        if (e || seq != key) {
            if (e) sluice_error_free(e);
            atomic_store(&pr->failed, 1);
            return NULL;
        }
        atomic_fetch_add(&pr->pushed, 1);
    }
    sluice_error_t *e = sluice_prefetcher_close_input(pr->pf);
    if (e) {
        sluice_error_free(e);
        atomic_store(&pr->failed, 1);
    }
    return NULL;
}

/* Reads batch `v`'s segments back and compares them with batch `key`'s bytes. */
static bool batch_matches(sluice_stream_t s, const sluice_batch_view_t *v, uint64_t key) {
    uint8_t got[CAP0];
    for (int seg = 0; seg < SEGS; seg++) {
        size_t n = len_of(key, seg);
        if (!CHECK_EQ(v->len[seg], n)) return false;
        if (n == 0) continue;
        if (!CHECK_OK(sluice_stream_copy_to_host(s, got, v->buffer[seg], 0, n))) return false;
        for (size_t j = 0; j < n; j++)
            if (got[j] != byte_of(key, seg, j)) {
                st_fail_msg(__FILE__, __LINE__, "batch %llu segment %d byte %zu wrong",
                            (unsigned long long)key, seg, j);
                return false;
            }
    }
    return true;
}

TEST(prefetch_order_and_bytes_at_depths_1_to_8) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    for (uint32_t depth = 1; depth <= 8; depth++) {
        sluice_prefetcher_t pf;
        REQUIRE(make_pf(d, depth, &pf));
        producer_t pr = {.pf = pf, .batches = 10000 / 8};
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, push_batches, &pr) == 0);
        uint64_t seen = 0;
        for (;;) {
            sluice_batch_t b;
            sluice_batch_view_t v;
            sluice_error_t *e = sluice_prefetcher_next(pf, s, 30000, &b, &v);
            if (e) {
                CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_END_OF_DATA);
                sluice_error_free(e);
                break;
            }
            CHECK_EQ(v.seq, seen);
            CHECK_EQ(v.segments, SEGS);
            bool ok = batch_matches(s, &v, seen);
            CHECK_OK(sluice_batch_release(b));
            seen++;
            if (!ok) break;
        }
        pthread_join(t, NULL);
        CHECK(!atomic_load(&pr.failed));
        CHECK_EQ(seen, pr.batches);
        sluice_prefetcher_stats_t st;
        CHECK_OK(sluice_prefetcher_stats(pf, &st));
        CHECK_EQ(st.batches, pr.batches);
        CHECK_EQ(st.pinned_bytes, depth * (CAPS[0] + CAPS[1]));
        CHECK_OK(sluice_prefetcher_destroy(pf));
    }
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(prefetch_back_pressure_then_release) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_prefetcher_t pf;
    REQUIRE(make_pf(d, 2, &pf));
    uint8_t x[8] = {1};
    sluice_prefetch_segment_t segs[SEGS] = {{x, 8}, {x, 8}};
    CHECK_OK(sluice_prefetcher_push(pf, segs, SEGS, 100, NULL));
    CHECK_OK(sluice_prefetcher_push(pf, segs, SEGS, 100, NULL));
    double t0 = now_ms();
    CHECK_ERR_MSG(sluice_prefetcher_push(pf, segs, SEGS, 50, NULL), SLUICE_ERROR_TIMEOUT,
                  "free prefetcher slot");
    CHECK(now_ms() - t0 >= 45.0);
    sluice_batch_t b;
    sluice_batch_view_t v;
    REQUIRE_OK(sluice_prefetcher_next(pf, s, 1000, &b, &v));
    CHECK_OK(sluice_batch_release(b));
    CHECK_OK(sluice_prefetcher_push(pf, segs, SEGS, 10000, NULL));
    CHECK_OK(sluice_prefetcher_destroy(pf));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(prefetch_zero_copy_fill_submit_and_cancel) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_prefetcher_t pf;
    REQUIRE(make_pf(d, 3, &pf));
    sluice_prefetch_fill_t f;
    REQUIRE_OK(sluice_prefetcher_acquire(pf, 1000, &f));
    CHECK_EQ(f.seq, 0);
    CHECK_EQ(f.segments, SEGS);
    CHECK_EQ(f.capacity[0], CAPS[0]);
    for (int seg = 0; seg < SEGS; seg++) {
        f.len[seg] = len_of(0, seg);
        for (size_t j = 0; j < f.len[seg]; j++) ((uint8_t *)f.host[seg])[j] = byte_of(0, seg, j);
    }
    CHECK_OK(sluice_prefetcher_submit(pf, &f));
    CHECK_ERR(sluice_prefetcher_submit(pf, &f), SLUICE_ERROR_INVALID_ARGUMENT);
    sluice_prefetch_fill_t g;
    REQUIRE_OK(sluice_prefetcher_acquire(pf, 1000, &g));
    CHECK_EQ(g.seq, 1);
    CHECK_OK(sluice_prefetcher_cancel(pf, &g));
    CHECK_ERR(sluice_prefetcher_cancel(pf, &g), SLUICE_ERROR_INVALID_ARGUMENT);
    /* An oversized length: the submitter and the consumer both get it. */
    sluice_prefetch_fill_t h;
    REQUIRE_OK(sluice_prefetcher_acquire(pf, 1000, &h));
    h.len[1] = CAPS[1] + 1;
    CHECK_ERR_MSG(sluice_prefetcher_submit(pf, &h), SLUICE_ERROR_OUT_OF_RANGE, "segment 1");
    CHECK_OK(sluice_prefetcher_close_input(pf));
    sluice_batch_t b;
    sluice_batch_view_t v;
    REQUIRE_OK(sluice_prefetcher_next(pf, s, 1000, &b, &v));
    CHECK_EQ(v.seq, 0);
    CHECK(batch_matches(s, &v, 0));
    CHECK_OK(sluice_batch_release(b));
    CHECK_ERR_MSG(sluice_prefetcher_next(pf, s, 1000, &b, &v), SLUICE_ERROR_OUT_OF_RANGE,
                  "batch 2");
    CHECK_EQ(v.seq, 2);
    CHECK_ERR(sluice_prefetcher_next(pf, s, 1000, &b, &v), SLUICE_ERROR_END_OF_DATA);
    CHECK_OK(sluice_prefetcher_destroy(pf));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* Pull mode: batch 3 fails, the input ends at 6. */
static int32_t fill_cb(void *user, sluice_prefetch_fill_t *f) {
    atomic_int *calls = user;
    atomic_fetch_add(calls, 1);
    if (f->seq >= 6) return SLUICE_PREFETCH_END;
    if (f->seq == 3) return 42;
    for (int seg = 0; seg < SEGS; seg++) {
        f->len[seg] = len_of(f->seq, seg);
        for (size_t j = 0; j < f->len[seg]; j++)
            ((uint8_t *)f->host[seg])[j] = byte_of(f->seq, seg, j);
    }
    return 0;
}

TEST(prefetch_pull_mode_error_arrives_in_place) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    atomic_int calls = 0;
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = 2;
    cfg.segments = SEGS;
    cfg.capacity[0] = CAPS[0];
    cfg.capacity[1] = CAPS[1];
    cfg.fill = fill_cb;
    cfg.user_data = &calls;
    cfg.producer_threads = 3;
    sluice_prefetcher_t pf;
    REQUIRE_OK(sluice_prefetcher_create(d, &cfg, &pf));
    for (uint64_t want = 0; want < 6; want++) {
        sluice_batch_t b;
        sluice_batch_view_t v;
        sluice_error_t *e = sluice_prefetcher_next(pf, s, 10000, &b, &v);
        if (want == 3) {
            CHECK_EQ(v.seq, 3);
            CHECK(st_check_err(e, SLUICE_ERROR_CALLBACK_FAILED, "CALLBACK_FAILED", "returned 42",
                               "next", __FILE__, __LINE__));
            continue;
        }
        if (!CHECK_OK(e)) break;
        CHECK_EQ(v.seq, want);
        CHECK(batch_matches(s, &v, want));
        CHECK_OK(sluice_batch_release(b));
    }
    sluice_batch_t b;
    sluice_batch_view_t v;
    CHECK_ERR(sluice_prefetcher_next(pf, s, 10000, &b, &v), SLUICE_ERROR_END_OF_DATA);
    CHECK(atomic_load(&calls) >= 7);
    CHECK_OK(sluice_prefetcher_destroy(pf));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

typedef struct {
    sluice_prefetcher_t pf;
    atomic_int code;
    atomic_int done;
} blocked_t;

static void *push_until_error(void *p) {
    blocked_t *bl = p;
    uint8_t x[8] = {0};
    sluice_prefetch_segment_t segs[SEGS] = {{x, 8}, {x, 8}};
    for (;;) {
        sluice_error_t *e = sluice_prefetcher_push(bl->pf, segs, SEGS, SLUICE_WAIT_FOREVER, NULL);
        if (e) {
            atomic_store(&bl->code, (int)sluice_error_code(e));
            sluice_error_free(e);
            break;
        }
    }
    atomic_store(&bl->done, 1);
    return NULL;
}

TEST(prefetch_destroy_with_a_blocked_producer_and_a_leased_batch) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_prefetcher_t pf;
    REQUIRE(make_pf(d, 2, &pf));
    blocked_t bl = {.pf = pf};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, push_until_error, &bl) == 0);
    sluice_batch_t b;
    sluice_batch_view_t v;
    REQUIRE_OK(sluice_prefetcher_next(pf, s, 10000, &b, &v));
    sleep_ms(30); /* the producer fills the slots and blocks */
    CHECK(!atomic_load(&bl.done));
    double t0 = now_ms();
    CHECK_OK(sluice_prefetcher_destroy(pf));
    pthread_join(t, NULL);
    CHECK(now_ms() - t0 < 2000.0);
    CHECK_EQ(atomic_load(&bl.code), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR_MSG(sluice_batch_release(b), SLUICE_ERROR_INVALID_HANDLE, "destroyed");
    CHECK_ERR(sluice_batch_release(b), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_prefetcher_next(pf, s, 0, &b, &v), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(prefetch_bad_arguments) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_prefetcher_t pf;
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    CHECK_ERR(sluice_prefetcher_create(d, NULL, &pf), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_create(d, &cfg, &pf), SLUICE_ERROR_INVALID_ARGUMENT);
    cfg.segments = 9;
    CHECK_ERR(sluice_prefetcher_create(d, &cfg, &pf), SLUICE_ERROR_INVALID_ARGUMENT);
    cfg.segments = 1;
    CHECK_ERR_MSG(sluice_prefetcher_create(d, &cfg, &pf), SLUICE_ERROR_INVALID_ARGUMENT,
                  "capacity");
    cfg.capacity[0] = 8;
    cfg.depth = 65;
    CHECK_ERR(sluice_prefetcher_create(d, &cfg, &pf), SLUICE_ERROR_INVALID_ARGUMENT);
    cfg.depth = 0;
    CHECK_ERR(sluice_prefetcher_create(d, &cfg, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    REQUIRE_OK(sluice_prefetcher_create(d, &cfg, &pf));
    uint8_t x[16] = {0};
    sluice_prefetch_segment_t big = {x, 16}, null_ptr = {NULL, 4};
    CHECK_ERR(sluice_prefetcher_push(pf, &big, 1, 0, NULL), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_prefetcher_push(pf, &null_ptr, 1, 0, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_push(pf, NULL, 1, 0, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    sluice_batch_t b;
    sluice_batch_view_t v;
    CHECK_ERR(sluice_prefetcher_next(pf, s, 0, NULL, &v), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_next(pf, s, 0, &b, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_next(pf, s, 0, &b, &v), SLUICE_ERROR_TIMEOUT);
    CHECK_ERR(sluice_prefetcher_next_into(pf, s, NULL, 0, 0, &v), SLUICE_ERROR_INVALID_ARGUMENT);
    sluice_batch_t forged = {0x1234};
    CHECK_ERR(sluice_batch_release(forged), SLUICE_ERROR_INVALID_HANDLE);
    sluice_prefetcher_t stale = pf;
    CHECK_OK(sluice_prefetcher_destroy(pf));
    CHECK_ERR(sluice_prefetcher_destroy(stale), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_prefetcher_push(stale, &big, 1, 0, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

static void *destroy_pf(void *p) {
    blocked_t *bl = p;
    sluice_error_t *e = sluice_prefetcher_destroy(bl->pf);
    atomic_store(&bl->code, e ? (int)sluice_error_code(e) : 0);
    sluice_error_free(e);
    atomic_store(&bl->done, 1);
    return NULL;
}

/* The header's promise: destroy waits for a fill taken with acquire until its
 * producer submits it, and that submit fails with INVALID_HANDLE. The handle
 * must still reach the prefetcher meanwhile, or destroy would wait forever. */
TEST(prefetch_destroy_waits_for_an_open_fill_that_submit_then_ends) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_prefetcher_t pf;
    REQUIRE(make_pf(d, 2, &pf));
    sluice_prefetch_fill_t f;
    REQUIRE_OK(sluice_prefetcher_acquire(pf, 1000, &f));
    blocked_t dt = {.pf = pf};
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, destroy_pf, &dt) == 0);
    sleep_ms(50);
    CHECK(!atomic_load(&dt.done)); /* waits for the open fill */
    memset(f.host[0], 0xAB, 16);   /* the producer may still write it */
    f.len[0] = 16;
    sluice_prefetch_segment_t segs[SEGS] = {{f.host[0], 8}, {f.host[0], 8}};
    CHECK_ERR(sluice_prefetcher_push(pf, segs, SEGS, 0, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR_MSG(sluice_prefetcher_submit(pf, &f), SLUICE_ERROR_INVALID_HANDLE, "destroyed");
    double t0 = now_ms();
    while (!atomic_load(&dt.done) && now_ms() - t0 < 5000.0) sleep_ms(5);
    if (!CHECK(atomic_load(&dt.done))) return; /* a hung destroy: leave its thread */
    pthread_join(t, NULL);
    CHECK_EQ(atomic_load(&dt.code), 0); /* the destroy succeeded */
    CHECK_ERR(sluice_prefetcher_cancel(pf, &f), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_prefetcher_destroy(pf), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_device_close(d));
}

TEST(gather_rows_copies_the_rows_named_and_checks_them_first) {
    enum { ROW = 784, SRC_ROWS = 40, N = 9 };
    static uint8_t src[ROW * SRC_ROWS], dst[ROW * N + 3];
    for (size_t j = 0; j < sizeof src; j++) src[j] = byte_of(j / ROW, 0, j % ROW);
    const int64_t rows[N] = {39, 0, 7, 7, 12, 38, 1, 20, 3};
    for (size_t off = 0; off < 3; off++) {
        memset(dst, 0xEE, sizeof dst);
        CHECK_OK(sluice_gather_rows(dst + off, ROW * N, src, sizeof src, ROW, rows, N));
        for (int i = 0; i < N; i++)
            CHECK(memcmp(dst + off + (size_t)i * ROW, src + (size_t)rows[i] * ROW, ROW) == 0);
        CHECK(off == 0 || dst[off - 1] == 0xEE);
        CHECK(off == 2 || dst[off + ROW * N] == 0xEE);
    }
    memset(dst, 0xEE, sizeof dst);
    const int64_t bad[3] = {0, SRC_ROWS, 1};
    CHECK_ERR_MSG(sluice_gather_rows(dst, sizeof dst, src, sizeof src, ROW, bad, 3),
                  SLUICE_ERROR_OUT_OF_RANGE, "rows[1] is 40, outside the source's 40 rows");
    const int64_t negative[1] = {-2};
    CHECK_ERR(sluice_gather_rows(dst, sizeof dst, src, sizeof src, ROW, negative, 1),
              SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR_MSG(sluice_gather_rows(dst, ROW * N - 1, src, sizeof src, ROW, rows, N),
                  SLUICE_ERROR_OUT_OF_RANGE, "do not fit");
    CHECK_ERR_MSG(sluice_gather_rows(dst, sizeof dst, src, sizeof src, 0, rows, N),
                  SLUICE_ERROR_INVALID_ARGUMENT, "row_bytes");
    CHECK_ERR_MSG(sluice_gather_rows(src + ROW, ROW * N, src, sizeof src, ROW, rows, N),
                  SLUICE_ERROR_INVALID_ARGUMENT, "overlaps");
    CHECK_ERR(sluice_gather_rows(NULL, ROW, src, sizeof src, ROW, rows, 1), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_gather_rows(dst, sizeof dst, NULL, ROW, ROW, rows, 1), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_gather_rows(dst, sizeof dst, src, sizeof src, ROW, NULL, 1), SLUICE_ERROR_NULL_ARGUMENT);
    /* NULL is NULL_ARGUMENT before any overlap test of the two addresses. */
    CHECK_ERR(sluice_gather_rows(NULL, ROW, NULL, ROW, ROW, rows, 1), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_gather_rows(NULL, (size_t)-1 / 2, src, sizeof src, ROW, rows, 1),
              SLUICE_ERROR_NULL_ARGUMENT);
    for (size_t j = 0; j < sizeof dst; j++) CHECK(dst[j] == 0xEE);
    CHECK_OK(sluice_gather_rows(NULL, 0, src, sizeof src, ROW, NULL, 0));
}
