/* Sync objects: the dependency engine (reader/writer events, waits, host waits). */
#include "helpers.h"

#include <pthread.h>

static bool sync_info(sluice_sync_t s, sluice_sync_info_t *i) {
    memset(i, 0xcc, sizeof *i);
    return CHECK_OK(sluice_sync_info(s, i));
}

/* One foreign op: begin, a logging host callback standing in for the foreign work
 * (enqueued on the op's stream), end. */
static bool foreign_op(sluice_stream_t s, const sluice_sync_t *r, size_t nr,
                       const sluice_sync_t *w, size_t nw, log_item_t *item) {
    sluice_op_t op = {0};
    if (!CHECK_OK(sluice_op_begin(s, r, nr, w, nw, &op))) return false;
    CHECK(op.bits != 0);
    bool ok = CHECK_OK(sluice_stream_launch_host_func(s, log_cb, item, NULL, NULL, 0, NULL, 0));
    return CHECK_OK(sluice_op_end(op)) && ok;
}

TEST(sync_new_info_destroy) {
    sluice_sync_t a = {0}, b = {0};
    REQUIRE_OK(sluice_sync_create(&a));
    REQUIRE_OK(sluice_sync_create(&b));
    CHECK(a.bits != 0 && a.bits != b.bits);
    sluice_sync_info_t ia, ib;
    if (sync_info(a, &ia) && sync_info(b, &ib)) {
        CHECK(ia.id != 0 && ia.id != ib.id);
        CHECK_EQ(ia.reader_count, 0);
        CHECK_EQ(ia.has_writer, 0);
    }
    /* host waits on an object nobody used return at once */
    CHECK_OK(sluice_sync_wait_read(a));
    CHECK_OK(sluice_sync_wait_write(a));
    CHECK_OK(sluice_sync_destroy(a));
    CHECK_OK(sluice_sync_destroy(b));
    CHECK_ERR(sluice_sync_info(a, &ia), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_sync_wait_read(a), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_sync_wait_write(a), SLUICE_ERROR_INVALID_HANDLE);
}

TEST(buffer_sync_handles) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 512, &b));
    sluice_sync_t s1, s2;
    REQUIRE_OK(sluice_buffer_sync(b, &s1));
    REQUIRE_OK(sluice_buffer_sync(b, &s2));
    CHECK(s1.bits != s2.bits); /* a new handle each time ... */
    sluice_sync_info_t i1, i2;
    if (sync_info(s1, &i1) && sync_info(s2, &i2)) {
        CHECK_EQ(i1.id, i2.id); /* ... to the same object */
        CHECK_EQ(i1.reader_count, 0);
        CHECK_EQ(i1.has_writer, 0);
    }
    CHECK_OK(sluice_stream_memset(s, b, 0, 0x5c, 512));
    if (sync_info(s1, &i1)) {
        CHECK_EQ(i1.has_writer, 1);
        CHECK_EQ(i1.reader_count, 0);
    }
    CHECK_OK(sluice_sync_destroy(s2)); /* the buffer is unaffected */
    uint8_t r[512];
    CHECK_OK(sluice_stream_copy_to_host(s, r, b, 0, 512));
    CHECK_EQ(check_fill(r, 512, 0x5c), -1);
    if (sync_info(s1, &i1)) {
        CHECK(i1.reader_count <= 1);
        CHECK_EQ(i1.has_writer, 1);
    }
    /* the sync handle outlives the buffer handle */
    CHECK_OK(sluice_buffer_free(b));
    CHECK(sync_info(s1, &i1));
    CHECK_OK(sluice_sync_wait_write(s1));
    CHECK_OK(sluice_sync_destroy(s1));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(sync_engine_waits_and_order) {
    enum { NS = 4, K = 10 };
    static gate_t gates[NS];
    static log_t log;
    static log_item_t items[64];
    int nitems = 0;
#define ITEM(v) (items[nitems] = (log_item_t){&log, (v)}, &items[nitems++])
    log_reset(&log);
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s[NS];
    for (int k = 0; k < NS; k++) REQUIRE(new_stream(d, &s[k]));
    for (int k = 0; k < NS; k++) REQUIRE(enqueue_gate(s[k], &gates[k]));
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    uint64_t w[NS];
    for (int k = 0; k < NS; k++) w[k] = stream_waits(s[k]);
#define WAITS(k) (stream_waits(s[k]) - w[k])
    sluice_sync_info_t info;

    REQUIRE(foreign_op(s[0], NULL, 0, &x, 1, ITEM(100))); /* S0 writes */
    CHECK_EQ(WAITS(0), 0);
    if (sync_info(x, &info)) {
        CHECK_EQ(info.has_writer, 1);
        CHECK_EQ(info.reader_count, 0);
    }
    REQUIRE(foreign_op(s[1], &x, 1, NULL, 0, ITEM(200))); /* S1 reads: waits on S0 */
    CHECK_EQ(WAITS(1), 1);
    REQUIRE(foreign_op(s[1], &x, 1, NULL, 0, ITEM(201))); /* again: same stream, no wait */
    CHECK_EQ(WAITS(1), 1);
    if (sync_info(x, &info)) CHECK_EQ(info.reader_count, 1);
    REQUIRE(foreign_op(s[2], &x, 1, NULL, 0, ITEM(300))); /* S2 reads: waits on S0 */
    CHECK_EQ(WAITS(2), 1);
    REQUIRE(foreign_op(s[0], &x, 1, NULL, 0, ITEM(101))); /* the writer's stream reads: free */
    CHECK_EQ(WAITS(0), 0);
    if (sync_info(x, &info)) {
        CHECK_EQ(info.reader_count, 3);
        CHECK_EQ(info.has_writer, 1);
    }
    for (int i = 0; i < K; i++)
        for (int k = 0; k < 3; k++) {
            REQUIRE(foreign_op(s[k], &x, 1, NULL, 0, ITEM(110 + 100 * k + i)));
            if (sync_info(x, &info)) CHECK(info.reader_count <= 3); /* one per stream */
        }
    CHECK_EQ(WAITS(0), 0);
    CHECK_EQ(WAITS(1), 1);
    CHECK_EQ(WAITS(2), 1);
    if (sync_info(x, &info)) CHECK_EQ(info.reader_count, 3);

    /* S3 writes: it waits once per other stream (S0's writer and reader count once) */
    REQUIRE(foreign_op(s[3], NULL, 0, &x, 1, ITEM(400)));
    CHECK_EQ(WAITS(3), 3);
    if (sync_info(x, &info)) {
        CHECK_EQ(info.reader_count, 0); /* writes clear readers */
        CHECK_EQ(info.has_writer, 1);
    }
    REQUIRE(foreign_op(s[3], NULL, 0, &x, 1, ITEM(401))); /* same stream: no wait */
    CHECK_EQ(WAITS(3), 3);
    REQUIRE(foreign_op(s[1], &x, 1, NULL, 0, ITEM(202))); /* S1 reads S3's write */
    CHECK_EQ(WAITS(1), 2);
    CHECK_EQ(WAITS(0), 0);
    CHECK_EQ(WAITS(2), 1);

    /* open the gates last-dependency-first: nothing may run before S0's gate opens */
    for (int k = NS - 1; k >= 1; k--) {
        gate_open(&gates[k]);
        sleep_ms(k == NS - 1 ? 30 : 10);
        if (!CHECK_EQ(atomic_load(&log.n), 0))
            FAIL("after opening gate %d, value %d ran first", k, log.vals[0]);
    }
    gate_open(&gates[0]);
    for (int k = 0; k < NS; k++) CHECK_OK(sluice_stream_synchronize(s[k]));
    CHECK_EQ(atomic_load(&log.n), nitems);
    int p100 = log_pos(&log, 100), p400 = log_pos(&log, 400), p401 = log_pos(&log, 401),
        p202 = log_pos(&log, 202);
    CHECK(p100 >= 0 && p400 >= 0 && p401 >= 0 && p202 >= 0);
    for (int i = 0; i < nitems; i++) {
        int v = items[i].value, p = log_pos(&log, v);
        if (v == 100 || v >= 400 || v == 202) continue;
        /* every reader ran after the first write and before the second */
        if (!CHECK(p > p100 && p < p400)) FAIL("reader %d at %d (writes at %d, %d)", v, p, p100, p400);
    }
    CHECK(p400 < p401 && p401 < p202);
    CHECK_OK(sluice_sync_destroy(x));
    for (int k = 0; k < NS; k++) CHECK_OK(sluice_stream_destroy(s[k]));
    CHECK_OK(sluice_device_close(d));
#undef ITEM
#undef WAITS
}

TEST(sync_read_write_in_one_op_counts_as_write) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s[3];
    for (int k = 0; k < 3; k++) REQUIRE(new_stream(d, &s[k]));
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    static log_t log;
    static log_item_t it[3];
    log_reset(&log);
    for (int i = 0; i < 3; i++) it[i] = (log_item_t){&log, i};
    REQUIRE(foreign_op(s[0], NULL, 0, &x, 1, &it[0]));
    REQUIRE(foreign_op(s[1], &x, 1, NULL, 0, &it[1]));
    uint64_t w2 = stream_waits(s[2]);
    REQUIRE(foreign_op(s[2], &x, 1, &x, 1, &it[2]));
    CHECK_EQ(stream_waits(s[2]) - w2, 2); /* the writer on S0 and the reader on S1 */
    sluice_sync_info_t info;
    if (sync_info(x, &info)) {
        CHECK_EQ(info.reader_count, 0);
        CHECK_EQ(info.has_writer, 1);
    }
    for (int k = 0; k < 3; k++) CHECK_OK(sluice_stream_synchronize(s[k]));
    CHECK_EQ(atomic_load(&log.n), 3);
    CHECK_EQ(log_pos(&log, 2), 2);
    CHECK_OK(sluice_sync_destroy(x));
    for (int k = 0; k < 3; k++) CHECK_OK(sluice_stream_destroy(s[k]));
    CHECK_OK(sluice_device_close(d));
}

TEST(same_stream_ops_insert_no_waits) {
    enum { SIZE = 4096, ROUNDS = 100 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b, c, p;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &c));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &p));
    sluice_sync_t sb, sp, x;
    REQUIRE_OK(sluice_buffer_sync(b, &sb));
    REQUIRE_OK(sluice_buffer_sync(p, &sp));
    REQUIRE_OK(sluice_sync_create(&x));
    static atomic_int count;
    atomic_store(&count, 0);
    uint64_t w0 = stream_waits(s);
    uint8_t src[SIZE];
    fill_pattern(src, SIZE, 77);
    for (int i = 0; i < ROUNDS; i++) {
        CHECK_OK(sluice_stream_memset(s, b, 0, (uint8_t)i, SIZE));
        CHECK_OK(sluice_stream_copy(s, p, 0, b, 0, SIZE));
        CHECK_OK(sluice_stream_copy(s, c, 0, p, 0, SIZE));
        CHECK_OK(sluice_stream_copy_from_host(s, b, 0, src, SIZE));
        CHECK_OK(sluice_stream_launch_host_func(s, incr_cb, &count, NULL, &sp, 1, &sb, 1));
        sluice_op_t op;
        if (CHECK_OK(sluice_op_begin(s, &sb, 1, &x, 1, &op))) CHECK_OK(sluice_op_end(op));
        sluice_sync_t both[2] = {sb, sp};
        if (CHECK_OK(sluice_op_begin(s, NULL, 0, both, 2, &op))) CHECK_OK(sluice_op_end(op));
    }
    uint8_t r[SIZE];
    CHECK_OK(sluice_stream_copy_to_host(s, r, c, 0, SIZE));
    CHECK_EQ(check_fill(r, SIZE, (uint8_t)(ROUNDS - 1)), -1);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_EQ(atomic_load(&count), ROUNDS);
    CHECK_EQ(stream_waits(s), w0); /* same-stream order is free */
    CHECK_OK(sluice_sync_destroy(sb));
    CHECK_OK(sluice_sync_destroy(sp));
    CHECK_OK(sluice_sync_destroy(x));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_buffer_free(c));
    CHECK_OK(sluice_buffer_free(p));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(k_readers_on_s_streams_then_one_writer) {
    /* B is written on R0, read K times on each of S streams (R0..R3), each behind a
     * slow callback; then W overwrites B. W must wait exactly once per reader stream,
     * and the readers must all see the old contents. */
    enum { S = 4, K = 5, SIZE = 16384, SEED = 41 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t r[S], w;
    for (int k = 0; k < S; k++) REQUIRE(new_stream(d, &r[k]));
    REQUIRE(new_stream(d, &w));
    sluice_buffer_t b, dst[S][K];
    REQUIRE_OK(sluice_buffer_alloc(r[0], SIZE, &b));
    for (int k = 0; k < S; k++)
        for (int i = 0; i < K; i++) REQUIRE_OK(sluice_buffer_alloc(r[k], SIZE, &dst[k][i]));
    static uint8_t src[SIZE];
    fill_pattern(src, SIZE, SEED);
    CHECK_OK(sluice_stream_copy_from_host(r[0], b, 0, src, SIZE));
    sluice_sync_t sb;
    REQUIRE_OK(sluice_buffer_sync(b, &sb));
    uint64_t w0 = stream_waits(w);
    for (int k = 0; k < S; k++) {
        CHECK_OK(sluice_stream_launch_host_func(r[k], sleep_cb, (void *)(uintptr_t)(20 + 5 * k), NULL,
                                             NULL, 0, NULL, 0));
        for (int i = 0; i < K; i++) CHECK_OK(sluice_stream_copy(r[k], dst[k][i], 0, b, 0, SIZE));
    }
    sluice_sync_info_t info;
    if (sync_info(sb, &info)) {
        CHECK_EQ(info.reader_count, S);
        CHECK_EQ(info.has_writer, 1);
    }
    CHECK_OK(sluice_stream_memset(w, b, 0, 0xdd, SIZE));
    CHECK_EQ(stream_waits(w) - w0, S);
    if (sync_info(sb, &info)) {
        CHECK_EQ(info.reader_count, 0);
        CHECK_EQ(info.has_writer, 1);
    }
    uint8_t *buf = malloc(SIZE);
    REQUIRE(buf != NULL);
    for (int k = 0; k < S; k++)
        for (int i = 0; i < K; i++) {
            memset(buf, 0, SIZE);
            CHECK_OK(sluice_stream_copy_to_host(r[k], buf, dst[k][i], 0, SIZE));
            if (!CHECK_EQ(check_pattern(buf, SIZE, SEED, 0), -1)) FAIL("reader %d copy %d", k, i);
        }
    CHECK_OK(sluice_stream_copy_to_host(w, buf, b, 0, SIZE));
    CHECK_EQ(check_fill(buf, SIZE, 0xdd), -1);
    free(buf);
    CHECK_OK(sluice_sync_destroy(sb));
    CHECK_OK(sluice_buffer_free(b));
    for (int k = 0; k < S; k++) {
        for (int i = 0; i < K; i++) CHECK_OK(sluice_buffer_free(dst[k][i]));
        CHECK_OK(sluice_stream_destroy(r[k]));
    }
    CHECK_OK(sluice_stream_destroy(w));
    CHECK_OK(sluice_device_close(d));
}

TEST(sync_wait_read_waits_for_writer_only) {
    static gate_t gate;
    static atomic_int wrote, read_done;
    static slow_set_t wr, rd;
    atomic_store(&wrote, 0);
    atomic_store(&read_done, 0);
    wr = (slow_set_t){40, &wrote, 1};
    rd = (slow_set_t){0, &read_done, 1};
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    /* writer: slow foreign work on a */
    sluice_op_t op;
    REQUIRE_OK(sluice_op_begin(a, NULL, 0, &x, 1, &op));
    CHECK_OK(sluice_stream_launch_host_func(a, slow_set_cb, &wr, NULL, NULL, 0, NULL, 0));
    REQUIRE_OK(sluice_op_end(op));
    CHECK_OK(sluice_sync_wait_read(x));
    CHECK_EQ(atomic_load(&wrote), 1); /* completed, not merely enqueued */
    /* a reader on b, held by a gate: wait_read must not wait for it (it would hang) */
    REQUIRE(enqueue_gate(b, &gate));
    REQUIRE_OK(sluice_op_begin(b, &x, 1, NULL, 0, &op));
    CHECK_OK(sluice_stream_launch_host_func(b, slow_set_cb, &rd, NULL, NULL, 0, NULL, 0));
    REQUIRE_OK(sluice_op_end(op));
    bool gpu = dev_backend(d) != SLUICE_BACKEND_HOST;
    if (!gpu) {
        /* on CUDA a closed gate holds the driver's callback thread, so only on host */
        CHECK_OK(sluice_sync_wait_read(x));
        CHECK_EQ(atomic_load(&read_done), 0);
    }
    gate_open(&gate);
    CHECK_OK(sluice_sync_wait_write(x)); /* waits for the reader too */
    CHECK_EQ(atomic_load(&read_done), 1);
    CHECK_OK(sluice_sync_destroy(x));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

TEST(sync_wait_write_waits_for_all_readers) {
    enum { NR = 3 };
    static atomic_int flags[NR];
    static slow_set_t args[NR];
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s[NR];
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    for (int k = 0; k < NR; k++) {
        atomic_store(&flags[k], 0);
        args[k] = (slow_set_t){(unsigned)(15 * (k + 1)), &flags[k], 1};
        REQUIRE(new_stream(d, &s[k]));
        /* a tracked host callback that reads x */
        CHECK_OK(sluice_stream_launch_host_func(s[k], slow_set_cb, &args[k], NULL, &x, 1, NULL, 0));
    }
    sluice_sync_info_t info;
    if (sync_info(x, &info)) {
        CHECK_EQ(info.reader_count, NR);
        CHECK_EQ(info.has_writer, 0);
    }
    CHECK_OK(sluice_sync_wait_read(x)); /* no writer: nothing to wait for */
    CHECK_OK(sluice_sync_wait_write(x));
    for (int k = 0; k < NR; k++) CHECK_EQ(atomic_load(&flags[k]), 1);
    CHECK_OK(sluice_sync_destroy(x));
    for (int k = 0; k < NR; k++) CHECK_OK(sluice_stream_destroy(s[k]));
    CHECK_OK(sluice_device_close(d));
}

typedef struct {
    atomic_int *src, *dst;
} copy_int_t;

static int32_t copy_int_cb(void *p) {
    copy_int_t *c = p;
    atomic_store(c->dst, atomic_load(c->src));
    return 0;
}

TEST(tracked_callbacks_order_across_streams) {
    /* host callbacks with read/write sets are ordered like any op */
    static atomic_int value, seen;
    static slow_set_t wr;
    static copy_int_t cp;
    atomic_store(&value, 0);
    atomic_store(&seen, -1);
    wr = (slow_set_t){40, &value, 5};
    cp = (copy_int_t){&value, &seen};
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    CHECK_OK(sluice_stream_launch_host_func(a, slow_set_cb, &wr, NULL, NULL, 0, &x, 1));
    uint64_t wb = stream_waits(b);
    CHECK_OK(sluice_stream_launch_host_func(b, copy_int_cb, &cp, NULL, &x, 1, NULL, 0));
    CHECK_EQ(stream_waits(b) - wb, 1);
    CHECK_OK(sluice_stream_synchronize(b));
    CHECK_EQ(atomic_load(&seen), 5); /* b's reader ran after a's writer */
    CHECK_OK(sluice_sync_destroy(x));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

/* Checks, in a callback, that a pinned buffer holds one byte value everywhere. */
typedef struct {
    const uint8_t *p;
    size_t n;
    uint8_t v;
    atomic_int *result; /* 1 ok, 2 wrong */
} expect_fill_t;

static int32_t expect_fill_cb(void *p) {
    expect_fill_t *e = p;
    atomic_store(e->result, check_fill(e->p, e->n, e->v) == -1 ? 1 : 2);
    return 0;
}

TEST(op_begin_orders_foreign_work_after_library_writes) {
    enum { SIZE = 8192 };
    static atomic_int result;
    static expect_fill_t ef;
    atomic_store(&result, 0);
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_buffer_t p;
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &p));
    sluice_buffer_info_t pi;
    REQUIRE_OK(sluice_buffer_info(p, &pi));
    memset(pi.host_ptr, 0, SIZE);
    sluice_sync_t sp;
    REQUIRE_OK(sluice_buffer_sync(p, &sp));
    /* library write on a, late */
    CHECK_OK(sluice_stream_launch_host_func(a, sleep_cb, (void *)(uintptr_t)40, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_memset(a, p, 0, 0x77, SIZE));
    /* foreign read on b: the "foreign kernel" is a callback that checks the bytes */
    ef = (expect_fill_t){pi.host_ptr, SIZE, 0x77, &result};
    sluice_op_t op;
    uint64_t wb = stream_waits(b);
    REQUIRE_OK(sluice_op_begin(b, &sp, 1, NULL, 0, &op));
    CHECK_EQ(stream_waits(b) - wb, 1);
    CHECK_OK(sluice_stream_launch_host_func(b, expect_fill_cb, &ef, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_op_end(op));
    CHECK_ERR(sluice_op_end(op), SLUICE_ERROR_INVALID_HANDLE); /* consumed */
    /* then a library write on a must wait for the foreign read on b */
    sluice_sync_info_t info;
    if (sync_info(sp, &info)) CHECK_EQ(info.reader_count, 1);
    uint64_t wa = stream_waits(a);
    CHECK_OK(sluice_stream_memset(a, p, 0, 0x11, SIZE));
    CHECK_EQ(stream_waits(a) - wa, 1);
    CHECK_OK(sluice_sync_wait_write(sp));
    CHECK_EQ(atomic_load(&result), 1);
    CHECK_EQ(check_fill(pi.host_ptr, SIZE, 0x11), -1);
    CHECK_OK(sluice_sync_destroy(sp));
    CHECK_OK(sluice_buffer_free(p));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

/* Issue 19's first race, as a user hit it: thread A's foreign op (reads X, writes Z
 * on S) and thread B's tracked slow read of X on S are released together; then B
 * writes X on T. op_end used to record, unlock, and publish A's older S reader over
 * B's newer one, so T's write overtook B's read. The slow reader is a tracked host
 * callback on pinned memory, so the test runs the same on both backends. */
enum { RACE_MAX = 20000 };
typedef struct {
    const uint32_t *x;
    uint32_t *slot;
} read_word_t;
static read_word_t race_reads[RACE_MAX];

static int32_t slow_read_word_cb(void *p) {
    read_word_t *r = p;
    double end = now_ms() + 0.02;
    while (now_ms() < end) {
    }
    *r->slot = *r->x;
    return 0;
}

typedef struct {
    pthread_barrier_t bar;
    sluice_stream_t s;
    sluice_sync_t x, z;
    atomic_int iters; /* set by the main thread when it stops */
    atomic_int errors;
} race_t;

static void *race_foreign_thread(void *p) {
    race_t *r = p;
    for (int k = 0;; k++) {
        pthread_barrier_wait(&r->bar);
        if (k >= atomic_load(&r->iters)) break;
        sluice_op_t op;
        sluice_error_t *e = sluice_op_begin(r->s, &r->x, 1, &r->z, 1, &op);
        if (!e) e = sluice_op_end(op);
        count_error(&r->errors, e);
        pthread_barrier_wait(&r->bar);
    }
    return NULL;
}

TEST(op_end_never_publishes_an_older_reader_over_a_newer_one) {
    static race_t r;
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t t;
    REQUIRE(new_stream(d, &r.s));
    REQUIRE(new_stream(d, &t));
    sluice_buffer_t xb, zb, rb;
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 64, &xb));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 64, &zb));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, RACE_MAX * 4, &rb));
    sluice_buffer_info_t xi, ri;
    REQUIRE_OK(sluice_buffer_info(xb, &xi));
    REQUIRE_OK(sluice_buffer_info(rb, &ri));
    memset(xi.host_ptr, 0, 64);
    memset(ri.host_ptr, 0xff, RACE_MAX * 4);
    sluice_sync_t rs;
    REQUIRE_OK(sluice_buffer_sync(xb, &r.x));
    REQUIRE_OK(sluice_buffer_sync(zb, &r.z));
    REQUIRE_OK(sluice_buffer_sync(rb, &rs));
    atomic_store(&r.iters, RACE_MAX);
    atomic_store(&r.errors, 0);
    pthread_barrier_init(&r.bar, NULL, 2);
    pthread_t a;
    REQUIRE(pthread_create(&a, NULL, race_foreign_thread, &r) == 0);
    uint32_t *res = ri.host_ptr;
    double deadline = now_ms() + 3000;
    int done = 0;
    bool ok = true;
    for (int k = 0; k < RACE_MAX && ok && now_ms() < deadline; k++) {
        race_reads[k] = (read_word_t){xi.host_ptr, res + k};
        pthread_barrier_wait(&r.bar);
        ok = CHECK_OK(sluice_stream_launch_host_func(r.s, slow_read_word_cb, &race_reads[k], NULL,
                                                  &r.x, 1, &rs, 1));
        pthread_barrier_wait(&r.bar); /* A's op_end has returned */
        ok = ok && CHECK_OK(sluice_stream_memset(t, xb, 0, (uint8_t)(k + 1), 64));
        done = k + 1;
    }
    atomic_store(&r.iters, done);
    pthread_barrier_wait(&r.bar);
    pthread_join(a, NULL);
    pthread_barrier_destroy(&r.bar);
    CHECK_OK(sluice_device_wait_all(d));
    CHECK_EQ(atomic_load(&r.errors), 0);
    int wrong = 0, first = -1;
    for (int k = 0; k < done; k++) {
        if (res[k] != (uint32_t)(uint8_t)k * 0x01010101u) {
            if (first < 0) first = k;
            wrong++;
        }
    }
    if (wrong) st_fail_msg(__FILE__, __LINE__, "%d of %d reads saw a later write (first at %d: %#x)",
                           wrong, done, first, res[first]);
    CHECK(done > 100);
    CHECK_OK(sluice_sync_destroy(r.x));
    CHECK_OK(sluice_sync_destroy(r.z));
    CHECK_OK(sluice_sync_destroy(rs));
    CHECK_OK(sluice_buffer_free(xb));
    CHECK_OK(sluice_buffer_free(zb));
    CHECK_OK(sluice_buffer_free(rb));
    CHECK_OK(sluice_stream_destroy(r.s));
    CHECK_OK(sluice_stream_destroy(t));
    CHECK_OK(sluice_device_close(d));
}

TEST(engine_sync_mode_synchronizes_after_each_op) {
    static atomic_int flag;
    static slow_set_t slow;
    atomic_store(&flag, 0);
    slow = (slow_set_t){30, &flag, 1};
    uint32_t mode = sluice_engine_mode();
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_stream_stats_t st0, st1;
    REQUIRE_OK(sluice_stream_stats(s, &st0));
    REQUIRE_OK(sluice_engine_set_mode(SLUICE_ENGINE_SYNC));
    CHECK_OK(sluice_stream_launch_host_func(s, slow_set_cb, &slow, NULL, NULL, 0, NULL, 0));
    CHECK_EQ(atomic_load(&flag), 1); /* the host waited for it */
    bool idle = false;
    CHECK_OK(sluice_stream_query(s, &idle));
    CHECK(idle);
    REQUIRE_OK(sluice_stream_stats(s, &st1));
    CHECK(st1.engine_syncs > st0.engine_syncs);
    CHECK_OK(sluice_engine_set_mode(SLUICE_ENGINE_ASYNC));
    REQUIRE_OK(sluice_stream_stats(s, &st0));
    CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)1, NULL, NULL, 0, NULL, 0));
    REQUIRE_OK(sluice_stream_stats(s, &st1));
    CHECK_EQ(st1.engine_syncs, st0.engine_syncs);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_engine_set_mode(mode));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(conflicting_open_foreign_ops_are_refused) {
    sluice_device_t d;
    sluice_stream_t s1, s2;
    REQUIRE(open_dev(&d));
    REQUIRE(new_stream(d, &s1));
    REQUIRE(new_stream(d, &s2));
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    sluice_op_t w, r, other = {0};
    REQUIRE_OK(sluice_op_begin(s1, NULL, 0, &x, 1, &w));
    CHECK_ERR_MSG(sluice_op_begin(s2, &x, 1, NULL, 0, &other), SLUICE_ERROR_INVALID_STATE,
                  "still open");
    CHECK_ERR_MSG(sluice_op_begin(s2, NULL, 0, &x, 1, &other), SLUICE_ERROR_INVALID_STATE,
                  "sluice_op_end");
    CHECK_EQ(other.bits, 0u);
    CHECK_OK(sluice_op_end(w));
    REQUIRE_OK(sluice_op_begin(s2, &x, 1, NULL, 0, &r));
    CHECK_OK(sluice_op_end(r));
    CHECK_OK(sluice_sync_destroy(x));
    CHECK_OK(sluice_stream_destroy(s1));
    CHECK_OK(sluice_stream_destroy(s2));
    CHECK_OK(sluice_device_close(d));
}

/* Issue 17: an open foreign read keeps its object alive through its stream's reader
 * slot, not through a reference. Two threads open reads of a buffer's object and a
 * standalone one; the main thread frees the buffer and destroys every sync handle and
 * the first op's stream, then ends the first op (begun on the other thread); the
 * second op ends on its own thread. Under ASan/LSan: no use after free, no leak. */
typedef struct {
    sluice_stream_t s;
    sluice_sync_t objs[2];
    pthread_barrier_t *opened, *destroyed;
    sluice_op_t op;
    bool end_here;
    atomic_int errors;
} open_read_t;

static void *open_read_thread(void *p) {
    open_read_t *r = p;
    bool begun = !count_error(&r->errors, sluice_op_begin(r->s, r->objs, 2, NULL, 0, &r->op));
    pthread_barrier_wait(r->opened);
    pthread_barrier_wait(r->destroyed);
    if (r->end_here && begun) count_error(&r->errors, sluice_op_end(r->op));
    return NULL;
}

TEST(objects_destroyed_while_foreign_reads_are_open) {
    sluice_device_t d;
    sluice_stream_t s1, s2;
    REQUIRE(open_dev(&d));
    REQUIRE(new_stream(d, &s1));
    REQUIRE(new_stream(d, &s2));
    for (int round = 0; round < 3; round++) {
        sluice_buffer_t b;
        REQUIRE_OK(sluice_buffer_alloc(s1, 256, &b));
        sluice_sync_t objs[2];
        REQUIRE_OK(sluice_buffer_sync(b, &objs[0]));
        REQUIRE_OK(sluice_sync_create(&objs[1]));
        /* After the first read of each stream, reads take the streams' slots. */
        for (int k = 0; k < 2 + round; k++) {
            sluice_op_t op;
            CHECK_OK(sluice_op_begin(s1, objs, 2, NULL, 0, &op));
            CHECK_OK(sluice_op_end(op));
            CHECK_OK(sluice_op_begin(s2, objs, 2, NULL, 0, &op));
            CHECK_OK(sluice_op_end(op));
        }
        pthread_barrier_t opened, destroyed;
        pthread_barrier_init(&opened, NULL, 3);
        pthread_barrier_init(&destroyed, NULL, 3);
        static open_read_t r[2];
        sluice_stream_t own = s1;
        if (round == 2) REQUIRE(new_stream(d, &own)); /* a stream destroyed with the op open */
        for (int i = 0; i < 2; i++) {
            r[i] = (open_read_t){.s = i ? s2 : own, .objs = {objs[0], objs[1]},
                                 .opened = &opened, .destroyed = &destroyed, .end_here = i == 1};
            atomic_store(&r[i].errors, 0);
        }
        pthread_t t[2];
        for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&t[i], NULL, open_read_thread, &r[i]) == 0);
        pthread_barrier_wait(&opened);
        CHECK_OK(sluice_buffer_free(b));
        CHECK_OK(sluice_sync_destroy(objs[0]));
        CHECK_OK(sluice_sync_destroy(objs[1]));
        if (round == 2) CHECK_OK(sluice_stream_destroy(own));
        if (round == 1) CHECK_OK(sluice_op_end(r[0].op)); /* ended first, on another thread */
        pthread_barrier_wait(&destroyed);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        if (round != 1) CHECK_OK(sluice_op_end(r[0].op)); /* ended last, on another thread */
        CHECK_EQ(atomic_load(&r[0].errors), 0);
        CHECK_EQ(atomic_load(&r[1].errors), 0);
        pthread_barrier_destroy(&opened);
        pthread_barrier_destroy(&destroyed);
    }
    /* Later ops work. */
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));
    static log_t later;
    log_reset(&later);
    log_item_t items[2] = {{&later, 1}, {&later, 2}};
    CHECK(foreign_op(s1, NULL, 0, &x, 1, &items[0]));
    CHECK(foreign_op(s2, &x, 1, NULL, 0, &items[1]));
    CHECK_OK(sluice_device_wait_all(d));
    CHECK(log_pos(&later, 1) == 0 && log_pos(&later, 2) == 1);
    CHECK_OK(sluice_sync_destroy(x));
    CHECK_OK(sluice_stream_destroy(s1));
    CHECK_OK(sluice_stream_destroy(s2));
    CHECK_OK(sluice_device_close(d));
}
