/* Events: record, query, synchronize, timing, sequences, cross-stream waits, pooling. */
#include "helpers.h"

TEST(event_record_query_synchronize) {
    static gate_t gate;
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_event_t e0 = {0};
    REQUIRE_OK(sluice_event_record(s, 0, &e0)); /* empty stream */
    CHECK(e0.bits != 0);
    CHECK_OK(sluice_event_synchronize(e0));
    bool done = false;
    CHECK_OK(sluice_event_query(e0, &done));
    CHECK(done);

    REQUIRE(enqueue_gate(s, &gate));
    sluice_event_t e1;
    REQUIRE_OK(sluice_event_record(s, 0, &e1));
    done = true;
    CHECK_OK(sluice_event_query(e1, &done));
    CHECK(!done); /* the gate is before it */
    done = false;
    CHECK_OK(sluice_event_query(e0, &done));
    CHECK(done); /* an earlier event is not affected by later work */
    gate_open(&gate);
    CHECK_OK(sluice_event_synchronize(e1));
    CHECK_EQ(atomic_load(&gate.entered), 1);
    done = false;
    CHECK_OK(sluice_event_query(e1, &done));
    CHECK(done);
    CHECK_OK(sluice_event_destroy(e0));
    CHECK_OK(sluice_event_destroy(e1));
    CHECK_ERR(sluice_event_query(e1, &done), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_event_destroy(e1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_unknown_flags) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    uint64_t live = sluice_live_handles();
    sluice_event_t e = {0x99};
    CHECK_ERR_MSG(sluice_event_record(s, 2, &e), SLUICE_ERROR_INVALID_ARGUMENT,
                  "sluice_event_record");
    CHECK_ERR(sluice_event_record(s, SLUICE_EVENT_TIMING | 0x100, &e),
              SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_event_record(s, UINT32_MAX, &e), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(e.bits, 0x99);
    CHECK_EQ(sluice_live_handles(), live);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_elapsed_time) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_event_t t0, t1, n0, n1;
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t0));
    REQUIRE_OK(sluice_event_record(s, 0, &n0));
    CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)30, NULL, NULL, 0, NULL, 0));
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t1));
    REQUIRE_OK(sluice_event_record(s, 0, &n1));
    CHECK_OK(sluice_event_synchronize(t1));
    CHECK_OK(sluice_event_synchronize(n1));
    float ms = -1.0f;
    CHECK_OK(sluice_event_elapsed_ms(t0, t1, &ms));
    CHECK(ms >= 25.0f);  /* the 30 ms callback lies between them */
    CHECK(ms < 10000.0f);
    float zero = -1.0f;
    CHECK_OK(sluice_event_elapsed_ms(t0, t0, &zero));
    CHECK(zero >= 0.0f && zero < 1.0f);
    /* elapsed time needs two timing events */
    float untouched = 123.0f;
    CHECK_ERR_MSG(sluice_event_elapsed_ms(n0, n1, &untouched), SLUICE_ERROR_INVALID_ARGUMENT,
                  "sluice_event_elapsed_ms");
    CHECK_ERR(sluice_event_elapsed_ms(t0, n1, &untouched), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_event_elapsed_ms(n0, t1, &untouched), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK(untouched == 123.0f);
    /* timing and non-timing recordings share one sequence per stream */
    uint64_t sid[4], seq[4];
    sluice_event_t all[4] = {t0, n0, t1, n1};
    for (int i = 0; i < 4; i++) CHECK_OK(sluice_event_sequence(all[i], &sid[i], &seq[i]));
    for (int i = 1; i < 4; i++) {
        CHECK(seq[i] > seq[i - 1]);
        CHECK_EQ(sid[i], sid[0]);
    }
    for (int i = 0; i < 4; i++) CHECK_OK(sluice_event_destroy(all[i]));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_elapsed_before_completion_is_an_error) {
    static gate_t gate;
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_event_t t0, t1;
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t0));
    REQUIRE(enqueue_gate(s, &gate));
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t1));
    float ms = 5.0f;
    sluice_error_t *e = sluice_event_elapsed_ms(t0, t1, &ms);
    CHECK(e != NULL); /* t1 has not completed */
    if (e) {
        CHECK(sluice_error_message(e)[0] != '\0');
        sluice_error_free(e);
    }
    CHECK(ms == 5.0f);
    gate_open(&gate);
    CHECK_OK(sluice_event_synchronize(t1));
    CHECK_OK(sluice_event_elapsed_ms(t0, t1, &ms));
    CHECK(ms >= 0.0f);
    CHECK_OK(sluice_event_destroy(t0));
    CHECK_OK(sluice_event_destroy(t1));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_sequence_strictly_increases_per_stream) {
    enum { N = 200 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    uint64_t ida = stream_id(a), idb = stream_id(b);
    CHECK(ida != idb);
    uint64_t last_a = 0, last_b = 0;
    for (int i = 0; i < N; i++) {
        sluice_stream_t s = (i % 3 == 0) ? b : a;
        sluice_event_t e;
        REQUIRE_OK(sluice_event_record(s, (i % 7 == 0) ? SLUICE_EVENT_TIMING : 0, &e));
        uint64_t sid = 0, seq = 0;
        CHECK_OK(sluice_event_sequence(e, &sid, &seq));
        if (s.bits == a.bits) {
            CHECK_EQ(sid, ida);
            if (!CHECK(seq > last_a)) break;
            last_a = seq;
        } else {
            CHECK_EQ(sid, idb);
            if (!CHECK(seq > last_b)) break;
            last_b = seq;
        }
        /* destroy at once: the pooled event is recycled, the sequence must not be */
        CHECK_OK(sluice_event_destroy(e));
        if (i % 10 == 0) /* tracked ops record too; sequences still only increase */
            CHECK_OK(sluice_stream_launch_host_func(s, return_cb, NULL, NULL, NULL, 0, NULL, 0));
    }
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

typedef struct {
    atomic_int *src;
    atomic_int *seen; /* 1: src was set when this ran; 2: it was not */
} observe_t;

static int32_t observe_cb(void *p) {
    observe_t *o = p;
    atomic_store(o->seen, atomic_load(o->src) ? 1 : 2);
    return 0;
}

TEST(event_cross_stream_wait_slow_producer) {
    static atomic_int done_a, seen;
    static slow_set_t slow;
    static observe_t obs;
    atomic_store(&done_a, 0);
    atomic_store(&seen, 0);
    slow = (slow_set_t){60, &done_a, 1};
    obs = (observe_t){&done_a, &seen};
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    uint64_t w0 = stream_waits(b);
    CHECK_OK(sluice_stream_launch_host_func(a, slow_set_cb, &slow, NULL, NULL, 0, NULL, 0));
    sluice_event_t e;
    REQUIRE_OK(sluice_event_record(a, 0, &e));
    CHECK_OK(sluice_stream_wait_event(b, e)); /* the host does not block */
    CHECK_EQ(stream_waits(b), w0 + 1);
    CHECK_OK(sluice_event_destroy(e)); /* the wait holds what it needs */
    CHECK_OK(sluice_stream_launch_host_func(b, observe_cb, &obs, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_synchronize(b));
    CHECK_EQ(atomic_load(&seen), 1);
    CHECK_OK(sluice_stream_synchronize(a));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_cross_stream_wait_gated) {
    enum { ROUNDS = 20 };
    static gate_t gate;
    static atomic_int ran;
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    for (int r = 0; r < ROUNDS; r++) {
        atomic_store(&ran, 0);
        REQUIRE(enqueue_gate(a, &gate));
        sluice_event_t e;
        REQUIRE_OK(sluice_event_record(a, 0, &e));
        CHECK_OK(sluice_stream_wait_event(b, e));
        CHECK_OK(sluice_stream_launch_host_func(b, set_flag_cb, &ran, NULL, NULL, 0, NULL, 0));
        if (r == 0) sleep_ms(30);
        else sleep_us(200);
        if (!CHECK_EQ(atomic_load(&ran), 0)) FAIL("round %d: b ran past its wait", r);
        bool idle = true;
        CHECK_OK(sluice_stream_query(b, &idle));
        CHECK(!idle);
        gate_open(&gate);
        CHECK_OK(sluice_stream_synchronize(b));
        CHECK_EQ(atomic_load(&ran), 1);
        CHECK_OK(sluice_event_destroy(e));
    }
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_outlives_its_stream) {
    static atomic_int flag;
    atomic_store(&flag, 0);
    static slow_set_t slow;
    slow = (slow_set_t){20, &flag, 1};
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    CHECK_OK(sluice_stream_launch_host_func(a, slow_set_cb, &slow, NULL, NULL, 0, NULL, 0));
    sluice_event_t e;
    REQUIRE_OK(sluice_event_record(a, 0, &e));
    uint64_t ida = stream_id(a);
    CHECK_OK(sluice_stream_destroy(a)); /* the recording keeps what it needs alive */
    CHECK_OK(sluice_stream_wait_event(b, e));
    static atomic_int seen;
    static observe_t obs;
    atomic_store(&seen, 0);
    obs = (observe_t){&flag, &seen};
    CHECK_OK(sluice_stream_launch_host_func(b, observe_cb, &obs, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_synchronize(b));
    CHECK_EQ(atomic_load(&seen), 1);
    CHECK_OK(sluice_event_synchronize(e));
    bool done = false;
    CHECK_OK(sluice_event_query(e, &done));
    CHECK(done);
    uint64_t sid = 0, seq = 0;
    CHECK_OK(sluice_event_sequence(e, &sid, &seq));
    CHECK_EQ(sid, ida);
    CHECK_OK(sluice_event_destroy(e));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

TEST(event_wait_on_own_stream) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)5, NULL, NULL, 0, NULL, 0));
    sluice_event_t e;
    REQUIRE_OK(sluice_event_record(s, 0, &e));
    CHECK_OK(sluice_stream_wait_event(s, e)); /* already ordered: must not deadlock */
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_event_destroy(e));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- event pool ABA ----
 * A producer stream counts up in callbacks and records an event after each count; a
 * consumer stream waits on each event and checks, in a callback, that the producer's
 * counter has reached the value that event stands for. Event handles are destroyed at
 * once, so the pool recycles the same few events while waits on their earlier
 * recordings are still pending (MXNet's ring reused slots with no generation check).
 * Blocks of iterations alternate which side lags:
 * - a lagging producer makes every wait really block: a wait that passed early (on a
 *   recycled event, or on nothing) shows as counter < expected;
 * - a lagging consumer piles up pending waits on recordings whose events were already
 *   destroyed and re-recorded many times.
 * The consumer also checks that its own callbacks ran in order. */
#define ABA_N 120000
#define ABA_BLOCK 2000
static atomic_long aba_prod;
static atomic_long aba_bad;        /* consumer saw prod < expected */
static atomic_long aba_order_bad;  /* consumer callbacks out of order */
static atomic_long aba_cons_last;
static atomic_long aba_first_bad;

static int32_t aba_prod_cb(void *p) {
    long delay_us = (long)(intptr_t)p;
    if (delay_us) sleep_us((unsigned)delay_us);
    atomic_fetch_add(&aba_prod, 1);
    return 0;
}

static int32_t aba_cons_cb(void *p) {
    long expected = (long)(intptr_t)p;
    if (expected < 0) { /* a lagging-consumer marker */
        sleep_us(3000);
        return 0;
    }
    if (atomic_load(&aba_prod) < expected) {
        if (atomic_fetch_add(&aba_bad, 1) == 0) atomic_store(&aba_first_bad, expected);
    }
    if (atomic_load(&aba_cons_last) != expected - 1) atomic_fetch_add(&aba_order_bad, 1);
    atomic_store(&aba_cons_last, expected);
    return 0;
}

TEST(event_pool_aba_100k) {
    atomic_store(&aba_prod, 0);
    atomic_store(&aba_bad, 0);
    atomic_store(&aba_order_bad, 0);
    atomic_store(&aba_cons_last, 0);
    atomic_store(&aba_first_bad, 0);
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t prod, cons;
    REQUIRE(new_stream(d, &prod));
    REQUIRE(new_stream(d, &cons));
    sluice_stream_stats_t p0, c0;
    REQUIRE_OK(sluice_stream_stats(prod, &p0));
    REQUIRE_OK(sluice_stream_stats(cons, &c0));
    uint64_t last_seq = 0, prod_id = p0.id;
    int failures = 0;
    for (long i = 1; i <= ABA_N && failures == 0; i++) {
        long block = (i - 1) / ABA_BLOCK;
        bool block_start = (i - 1) % ABA_BLOCK == 0;
        /* even blocks: the producer lags at the block start; odd: the consumer */
        intptr_t pdelay = (block_start && block % 2 == 0) ? 3000 : 0;
        if (block_start && block % 2 == 1) {
            sluice_error_t *e =
                sluice_stream_launch_host_func(cons, aba_cons_cb, (void *)(intptr_t)-1, NULL, NULL, 0, NULL, 0);
            if (!CHECK_OK(e)) failures++;
        }
        sluice_error_t *e = sluice_stream_launch_host_func(prod, aba_prod_cb, (void *)pdelay, NULL,
                                                        NULL, 0, NULL, 0);
        if (!CHECK_OK(e)) { failures++; break; }
        sluice_event_t ev;
        if (!CHECK_OK(sluice_event_record(prod, 0, &ev))) { failures++; break; }
        if ((i & 1023) == 1) {
            uint64_t sid = 0, seq = 0;
            CHECK_OK(sluice_event_sequence(ev, &sid, &seq));
            if (!CHECK(sid == prod_id && seq > last_seq)) failures++;
            last_seq = seq;
        }
        if (!CHECK_OK(sluice_stream_wait_event(cons, ev))) failures++;
        if (!CHECK_OK(sluice_event_destroy(ev))) failures++;
        e = sluice_stream_launch_host_func(cons, aba_cons_cb, (void *)(intptr_t)i, NULL, NULL, 0, NULL, 0);
        if (!CHECK_OK(e)) failures++;
    }
    CHECK_OK(sluice_stream_synchronize(cons));
    CHECK_OK(sluice_stream_synchronize(prod));
    CHECK_EQ(atomic_load(&aba_prod), ABA_N);
    CHECK_EQ(atomic_load(&aba_cons_last), ABA_N);
    if (!CHECK_EQ(atomic_load(&aba_bad), 0))
        FAIL("first early consumer: expected producer count %ld", atomic_load(&aba_first_bad));
    CHECK_EQ(atomic_load(&aba_order_bad), 0);
    sluice_stream_stats_t p1, c1;
    REQUIRE_OK(sluice_stream_stats(prod, &p1));
    REQUIRE_OK(sluice_stream_stats(cons, &c1));
    CHECK_EQ(c1.waits - c0.waits, ABA_N);
    CHECK(p1.records - p0.records >= ABA_N);
    /* recycling happened: a handful of events served >100k recordings */
    printf("    producer: %llu records, %llu events created; consumer: %llu events created\n",
           (unsigned long long)(p1.records - p0.records),
           (unsigned long long)(p1.events_created - p0.events_created),
           (unsigned long long)(c1.events_created - c0.events_created));
    CHECK(p1.events_created - p0.events_created <= 64);
    CHECK(c1.events_created - c0.events_created <= 64);
    CHECK_OK(sluice_stream_destroy(prod));
    CHECK_OK(sluice_stream_destroy(cons));
    CHECK_OK(sluice_device_close(d));
}
