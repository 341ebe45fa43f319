/* The error lists of sluice.h: each function's doc ends with "Errors: ...". One
 * check per listed error that the host backend can produce, with its code and a
 * non-empty message (CHECK_ERR checks both). The errors every handle and every out
 * pointer share (a stale handle, a NULL *_out) are table-driven in
 * test_bad_input.c for the older functions and here for the rest. Not checked here
 * (cuda only): NO_DRIVER, pointer checks of wrap_device, host functions refused
 * in a cuda capture. */
#include "helpers.h"

/* ---- graph capture ------------------------------------------------------------------ */

TEST(errors_graph_capture) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s, s2;
    REQUIRE(new_stream(d, &s));
    REQUIRE(new_stream(d, &s2));
    sluice_graph_t g = {0};
    /* ending a capture that was not begun */
    CHECK_ERR_MSG(sluice_graph_capture_end(s, &g), SLUICE_ERROR_INVALID_STATE, "not capturing");
    CHECK_ERR(sluice_graph_capture_begin(s, 99), SLUICE_ERROR_INVALID_ARGUMENT);
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    /* beginning twice */
    CHECK_ERR_MSG(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED), SLUICE_ERROR_INVALID_STATE,
                  "already capturing");
    /* a joined fork cannot end the capture */
    sluice_event_t e;
    REQUIRE_OK(sluice_event_record(s, 0, &e));
    CHECK_OK(sluice_stream_wait_event(s2, e));
    CHECK_ERR(sluice_graph_capture_end(s2, &g), SLUICE_ERROR_INVALID_STATE);
    CHECK_ERR(sluice_graph_capture_end(s, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    /* the fork was not joined back */
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 16, &b));
    CHECK_OK(sluice_stream_memset(s2, b, 0, 1, 16));
    CHECK_ERR_MSG(sluice_graph_capture_end(s, &g), SLUICE_ERROR_CAPTURE_FAILED, "not joined");
    /* a rejected operation aborts the capture */
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    bool idle;
    CHECK_ERR(sluice_stream_query(s, &idle), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    sluice_buffer_t nb;
    CHECK_ERR(sluice_buffer_alloc(s, 16, &nb), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    uint8_t host[16] = {0};
    CHECK_ERR(sluice_stream_copy_from_host(s, b, 0, host, 16), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    CHECK_ERR(sluice_stream_copy_to_host(s, host, b, 0, 16), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    CHECK_ERR_MSG(sluice_graph_capture_end(s, &g), SLUICE_ERROR_CAPTURE_FAILED, "rejected");
    /* an event of a capture that has ended stands for no work: no wait on it */
    CHECK_ERR_MSG(sluice_stream_wait_event(s2, e), SLUICE_ERROR_INVALID_STATE, "has ended");
    CHECK_OK(sluice_stream_synchronize(s)); /* usable again */
    CHECK_OK(sluice_stream_synchronize(s2));
    CHECK_OK(sluice_event_destroy(e));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s2));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(errors_graph_objects) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 16, &b));
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    CHECK_OK(sluice_stream_memset(s, b, 0, 1, 16));
    sluice_graph_t g;
    REQUIRE_OK(sluice_graph_capture_end(s, &g));
    size_t n;
    bool cap;
    sluice_graph_exec_t x;
    CHECK_ERR(sluice_stream_is_capturing(s, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_graph_node_count(g, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_graph_debug_dot(g, NULL, false), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_graph_debug_dot(g, "/nonexistent-dir/x/g.dot", false),
              SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_graph_instantiate(g, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    REQUIRE_OK(sluice_graph_instantiate(g, &x));
    CHECK_OK(sluice_graph_exec_launch(x, s));
    CHECK_OK(sluice_stream_synchronize(s));
    /* stale handles of the graph types */
    sluice_graph_t dg = {g.bits};
    sluice_graph_exec_t dx = {x.bits};
    CHECK_OK(sluice_graph_exec_destroy(x));
    CHECK_OK(sluice_graph_destroy(g));
    CHECK_ERR(sluice_stream_is_capturing((sluice_stream_t){0}, &cap), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_node_count(dg, &n), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_debug_dot(dg, "/tmp/x.dot", false), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_instantiate(dg, &x), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_exec_upload(dx, s), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_exec_launch(dx, s), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_exec_update(dx, dg, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_exec_destroy(dx), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_destroy(dg), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_capture_begin((sluice_stream_t){0}, 0), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_capture_end((sluice_stream_t){0}, &g), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- graph cache --------------------------------------------------------------------- */

typedef struct {
    sluice_graph_cache_t cache;
    uint64_t key;
    uint32_t inner_code;
    int depth;
} recurse_t;

static int32_t recursing_body(void *p, sluice_stream_t s) {
    recurse_t *r = p;
    if (++r->depth > 4) return 7; /* a guard: without the library's check this would recurse */
    sluice_error_t *e = sluice_graph_cache_run(r->cache, r->key, s, recursing_body, r);
    if (e) {
        if (!r->inner_code) r->inner_code = sluice_error_code(e);
        if (sluice_error_message(e)[0] == '\0') r->inner_code = 0xdead;
        sluice_error_free(e);
    }
    return 0;
}

static int32_t failing_body(void *p, sluice_stream_t s) {
    (void)p;
    (void)s;
    return 3;
}

static int32_t memset_body(void *p, sluice_stream_t s) {
    return sluice_stream_memset(s, *(sluice_buffer_t *)p, 0, 7, 16) ? 1 : 0;
}

/* An evicted key is no longer contained; the most recently used one stays. */
TEST(graph_cache_contains_follows_evictions) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 16, &b));
    sluice_graph_cache_t c;
    REQUIRE_OK(sluice_graph_cache_create(d, &c));
    for (uint64_t key = 10; key <= 11; key++)
        for (int pass = 0; pass < 2; pass++) CHECK_OK(sluice_graph_cache_run(c, key, s, memset_body, &b));
    bool has10 = false, has11 = false;
    CHECK_OK(sluice_graph_cache_contains(c, 10, &has10));
    CHECK_OK(sluice_graph_cache_contains(c, 11, &has11));
    CHECK(has10 && has11);
    CHECK_OK(sluice_graph_cache_set_max_entries(c, 1));
    CHECK_OK(sluice_graph_cache_contains(c, 10, &has10));
    CHECK_OK(sluice_graph_cache_contains(c, 11, &has11));
    CHECK(!has10 && has11);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_graph_cache_destroy(c));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(errors_graph_cache) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_graph_cache_t c;
    CHECK_ERR(sluice_graph_cache_create(d, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_graph_cache_create((sluice_device_t){0}, &c), SLUICE_ERROR_INVALID_HANDLE);
    REQUIRE_OK(sluice_graph_cache_create(d, &c));
    CHECK_ERR(sluice_graph_cache_run(c, 1, s, NULL, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR_MSG(sluice_graph_cache_run(c, 1, s, failing_body, NULL), SLUICE_ERROR_CALLBACK_FAILED,
                  "3");
    /* a body that recurses: the inner run fails, on every pass (eager, captured) */
    for (int pass = 0; pass < 3; pass++) {
        recurse_t r = {c, 42, 0, 0};
        CHECK_OK(sluice_graph_cache_run(c, 42, s, recursing_body, &r));
        if (pass < 2) { /* the third pass replays: the body does not run */
            CHECK_EQ(r.depth, 1);
            CHECK_EQ(r.inner_code, SLUICE_ERROR_INVALID_STATE);
        }
    }
    /* the key is usable afterwards, and another key may nest in a body (eager) */
    CHECK_OK(sluice_stream_synchronize(s));
    sluice_graph_cache_stats_t st;
    CHECK_ERR(sluice_graph_cache_stats(c, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_graph_cache_stats(c, &st));
    bool has = false;
    CHECK_ERR(sluice_graph_cache_contains(c, 42, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_graph_cache_contains(c, 42, &has)); /* ran three times */
    CHECK(has);
    CHECK_OK(sluice_graph_cache_contains(c, 777, &has)); /* never ran */
    CHECK(!has);
    /* capturing when the key is due to be captured */
    recurse_t r2 = {c, 0, 0, 0};
    (void)r2;
    CHECK_OK(sluice_graph_cache_run(c, 5, s, recursing_body, &r2));
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    recurse_t r3 = {c, 5, 0, 0};
    CHECK_ERR(sluice_graph_cache_run(c, 5, s, recursing_body, &r3), SLUICE_ERROR_INVALID_STATE);
    sluice_graph_t g;
    sluice_error_t *ge = sluice_graph_capture_end(s, &g);
    if (ge == NULL) CHECK_OK(sluice_graph_destroy(g));
    sluice_error_free(ge);
    sluice_graph_cache_t dc = c;
    CHECK_OK(sluice_graph_cache_destroy(c));
    CHECK_ERR(sluice_graph_cache_run(dc, 1, s, failing_body, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_cache_stats(dc, &st), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_cache_set_max_entries(dc, 4), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_cache_contains(dc, 42, &has), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_graph_cache_destroy(dc), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- devices, streams, events, sync objects ----------------------------------------- */

TEST(errors_device_stream_event) {
    sluice_device_t d;
    uint32_t n;
    CHECK_ERR(sluice_device_count(77, &n), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_device_open(77, 0, &d), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_device_open(SLUICE_BACKEND_HOST, 1000, &d), SLUICE_ERROR_NO_DEVICE);
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_stream_t s_out;
    CHECK_ERR(sluice_stream_create(d, 0x80, 0, &s_out), SLUICE_ERROR_INVALID_ARGUMENT);
    void *raw;
    REQUIRE_OK(sluice_stream_raw(s, &raw));
    CHECK_ERR(sluice_stream_wrap_external(d, raw, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_stream_wrap_external(d, NULL, &s_out), SLUICE_ERROR_INVALID_ARGUMENT);
    /* a forged pointer is only checked on host; the driver would dereference it */
    const char *backend = getenv("SLUICE_BACKEND");
    if (!backend || strcmp(backend, "cuda") != 0)
        CHECK_ERR(sluice_stream_wrap_external(d, (void *)(uintptr_t)0x1234, &s_out),
                  SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_stream_launch_host_func(s, NULL, NULL, NULL, NULL, 0, NULL, 0),
              SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_stream_set_block_cache_limit((sluice_stream_t){0}, 1), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_stream_set_label((sluice_stream_t){0}, "x"), SLUICE_ERROR_INVALID_HANDLE);
    /* a failed host callback is reported by the synchronisation points */
    CHECK_OK(sluice_stream_launch_host_func(s, return_cb, (void *)(intptr_t)5, NULL, NULL, 0, NULL, 0));
    CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_CALLBACK_FAILED);
    CHECK_OK(sluice_stream_launch_host_func(s, return_cb, (void *)(intptr_t)5, NULL, NULL, 0, NULL, 0));
    CHECK_ERR(sluice_device_wait_all(d), SLUICE_ERROR_CALLBACK_FAILED);
    CHECK_OK(sluice_stream_synchronize(s));
    sluice_event_t e, ne, t1, t2;
    CHECK_ERR(sluice_event_record(s, 0x40, &e), SLUICE_ERROR_INVALID_ARGUMENT);
    REQUIRE_OK(sluice_event_record(s, 0, &ne));
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t1));
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t2));
    float ms;
    CHECK_ERR(sluice_event_elapsed_ms(ne, t2, &ms), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_OK(sluice_event_synchronize(t2));
    CHECK_OK(sluice_event_elapsed_ms(t1, t2, &ms));
    /* not completed yet: the stream waits on a closed gate */
    gate_t gate;
    gate_reset(&gate);
    REQUIRE(enqueue_gate(s, &gate));
    sluice_event_t t3;
    REQUIRE_OK(sluice_event_record(s, SLUICE_EVENT_TIMING, &t3));
    CHECK_ERR(sluice_event_elapsed_ms(t1, t3, &ms), SLUICE_ERROR_INVALID_STATE);
    gate_open(&gate);
    CHECK_OK(sluice_event_synchronize(t3));
    CHECK_OK(sluice_event_destroy(t3));
    /* event waits while the stream captures */
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    sluice_event_t ce;
    REQUIRE_OK(sluice_event_record(s, 0, &ce));
    bool done;
    CHECK_ERR(sluice_event_query(ce, &done), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    CHECK_ERR(sluice_event_synchronize(ce), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    sluice_graph_t g;
    sluice_error_free(sluice_graph_capture_end(s, &g));
    CHECK_OK(sluice_event_destroy(ce));
    CHECK_OK(sluice_event_destroy(ne));
    CHECK_OK(sluice_event_destroy(t1));
    CHECK_OK(sluice_event_destroy(t2));
    CHECK_ERR(sluice_event_destroy(t2), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_ERR(sluice_stream_destroy(s), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_device_close(d));
    CHECK_ERR(sluice_device_close(d), SLUICE_ERROR_INVALID_HANDLE);
}

TEST(errors_sync_and_ops) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s, s2;
    REQUIRE(new_stream(d, &s));
    REQUIRE(new_stream(d, &s2));
    sluice_sync_t y;
    REQUIRE_OK(sluice_sync_create(&y));
    sluice_op_t a, b;
    REQUIRE_OK(sluice_op_begin(s, NULL, 0, &y, 1, &a));
    /* a conflicting foreign op open on another stream */
    CHECK_ERR(sluice_op_begin(s2, NULL, 0, &y, 1, &b), SLUICE_ERROR_INVALID_STATE);
    CHECK_OK(sluice_op_end(a));
    CHECK_ERR(sluice_op_end(a), SLUICE_ERROR_INVALID_HANDLE); /* ending twice */
    /* a failed host callback that a host wait waits for */
    CHECK_OK(sluice_stream_launch_host_func(s, return_cb, (void *)(intptr_t)9, NULL, NULL, 0, &y, 1));
    CHECK_ERR(sluice_sync_wait_read(y), SLUICE_ERROR_CALLBACK_FAILED);
    CHECK_ERR(sluice_sync_wait_write(y), SLUICE_ERROR_CALLBACK_FAILED);
    sluice_error_free(sluice_stream_synchronize(s));
    /* host waits on an object that a capture uses */
    /* (a foreign op: CUDA cannot capture a host callback) */
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    REQUIRE_OK(sluice_op_begin(s, NULL, 0, &y, 1, &a));
    CHECK_OK(sluice_op_end(a));
    CHECK_ERR(sluice_sync_wait_read(y), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    sluice_graph_t g;
    sluice_error_free(sluice_graph_capture_end(s, &g));
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    REQUIRE_OK(sluice_op_begin(s, &y, 1, NULL, 0, &a));
    CHECK_OK(sluice_op_end(a));
    CHECK_ERR(sluice_sync_wait_write(y), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    sluice_error_free(sluice_graph_capture_end(s, &g));
    CHECK_ERR(sluice_engine_set_mode(7), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_OK(sluice_sync_destroy(y));
    CHECK_ERR(sluice_sync_destroy(y), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s2));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- memory and copies --------------------------------------------------------------- */

TEST(errors_memory) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b, b2, out;
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &b));
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &b2));
    uint8_t host[64] = {0};
    CHECK_ERR(sluice_stream_copy(s, b2, 0, b, 32, 64), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_stream_copy(s, b, 0, b, 8, 16), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_stream_copy_from_host(s, b, 60, host, 8), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_stream_copy_to_host(s, host, b, 60, 8), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_stream_memset(s, b, 60, 0, 8), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_buffer_alloc(s, SIZE_MAX / 2, &out), SLUICE_ERROR_OUT_OF_MEMORY);
    CHECK_ERR(sluice_buffer_alloc_pinned(d, SIZE_MAX / 2, &out), SLUICE_ERROR_OUT_OF_MEMORY);
    CHECK_OK(sluice_buffer_free(b2));
    CHECK_ERR(sluice_buffer_free(b2), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- modules, logs, traces, counters -------------------------------------------------- */

TEST(errors_module_log_trace_counters) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_module_t m = {0};
    sluice_function_t f;
    CHECK_ERR(sluice_module_get_function(m, "k", &f), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_module_unload(m), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_function_destroy((sluice_function_t){0}), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_function_set_programmatic_launch((sluice_function_t){0}, true),
              SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_function_set_max_dynamic_shared_memory((sluice_function_t){0}, 65536),
              SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_function_set_non_portable_cluster_size_allowed((sluice_function_t){0}, true),
              SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_log_set_level(99), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_trace_start(NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_trace_start(""), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_trace_start("/nonexistent-dir/x/trace.json"), SLUICE_ERROR_INVALID_ARGUMENT);
    char path[64];
    snprintf(path, sizeof path, "/tmp/sluice-errors-%d.json", (int)getpid());
    if (CHECK_OK(sluice_trace_start(path))) {
        CHECK_ERR_MSG(sluice_trace_start(path), SLUICE_ERROR_INVALID_STATE, "already");
        CHECK_OK(sluice_trace_flush());
        CHECK_OK(sluice_trace_stop());
    }
    CHECK_OK(sluice_trace_stop()); /* with no trace: not an error */
    CHECK_OK(sluice_trace_flush());
    unlink(path);
    sluice_counters_t c;
    CHECK_ERR(sluice_counters(d, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_counters((sluice_device_t){0}, &c)); /* 0: every device */
    CHECK_OK(sluice_device_close(d));
    CHECK_ERR(sluice_counters(d, &c), SLUICE_ERROR_INVALID_HANDLE);
}

/* ---- RNG ------------------------------------------------------------------------------ */

TEST(errors_rng) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_rng_t r, r2;
    CHECK_ERR(sluice_rng_create(s, 1, 0, &r), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_rng_create(s, 1, SIZE_MAX, &r), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_rng_create(s, 1, 4, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    REQUIRE_OK(sluice_rng_create(s, 1, 4, &r));
    REQUIRE_OK(sluice_rng_create(s, 1, 8, &r2));
    sluice_buffer_t b, pin;
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &b));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 64, &pin));
    CHECK_ERR(sluice_rng_generate(s, r, 99, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, b, 0, 4),
              SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_rng_generate(s, r, SLUICE_RNG_U32, 99, b, 0, 4), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_rng_generate(s, r, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, pin, 0, 4),
              SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_rng_generate(s, r, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, b, 0, 8),
              SLUICE_ERROR_OUT_OF_RANGE);
    sluice_rng_checkpoint_t ck;
    CHECK_ERR(sluice_rng_checkpoint_create(s, r, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    REQUIRE_OK(sluice_rng_checkpoint_create(s, r, &ck));
    CHECK_ERR(sluice_rng_save(s, r2, ck), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_rng_restore(s, r2, ck), SLUICE_ERROR_INVALID_ARGUMENT);
    size_t len = 0;
    CHECK_ERR(sluice_rng_checkpoint_serialize(ck, NULL, 0, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    REQUIRE_OK(sluice_rng_checkpoint_serialize(ck, NULL, 0, &len));
    uint8_t bytes[4096];
    REQUIRE(len <= sizeof bytes);
    CHECK_ERR(sluice_rng_checkpoint_serialize(ck, bytes, len - 1, &len), SLUICE_ERROR_OUT_OF_RANGE);
    REQUIRE_OK(sluice_rng_checkpoint_serialize(ck, bytes, sizeof bytes, &len));
    bytes[len - 1] ^= 0xff;
    sluice_rng_checkpoint_t ck2;
    CHECK_ERR(sluice_rng_checkpoint_deserialize(d, bytes, len, &ck2), SLUICE_ERROR_CORRUPT_DATA);
    CHECK_ERR(sluice_rng_checkpoint_deserialize(d, NULL, len, &ck2), SLUICE_ERROR_NULL_ARGUMENT);
    size_t ns;
    uint64_t seed;
    CHECK_OK(sluice_rng_info(r, NULL, &seed)); /* either out pointer may be NULL */
    CHECK_OK(sluice_rng_checkpoint_info(ck, &ns, NULL));
    CHECK_ERR(sluice_rng_states(r, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_rng_checkpoint_destroy(ck));
    CHECK_ERR(sluice_rng_checkpoint_destroy(ck), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_rng_checkpoint_info(ck, &ns, &seed), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_rng_save(s, r, ck), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_rng_destroy(r2));
    CHECK_ERR(sluice_rng_destroy(r2), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_rng_info(r2, &ns, &seed), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_rng_destroy(r));
    CHECK_OK(sluice_buffer_free(pin));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- prefetcher ------------------------------------------------------------------------ */

TEST(errors_prefetcher) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    sluice_prefetcher_t p;
    CHECK_ERR(sluice_prefetcher_create(d, NULL, &p), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_create(d, &cfg, &p), SLUICE_ERROR_INVALID_ARGUMENT);
    cfg.segments = 1;
    cfg.capacity[0] = 64;
    cfg.depth = 2;
    REQUIRE_OK(sluice_prefetcher_create(d, &cfg, &p));
    uint8_t data[128] = {0};
    sluice_prefetch_segment_t seg = {data, 128};
    uint64_t seq;
    CHECK_ERR(sluice_prefetcher_push(p, &seg, 1, 0, &seq), SLUICE_ERROR_OUT_OF_RANGE);
    seg.len = 16;
    sluice_prefetch_segment_t two[2] = {seg, seg};
    CHECK_ERR(sluice_prefetcher_push(p, two, 2, 0, &seq), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_push(p, NULL, 1, 0, &seq), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_prefetcher_push(p, &seg, 1, 0, &seq));
    CHECK_OK(sluice_prefetcher_push(p, &seg, 1, 0, &seq));
    CHECK_ERR(sluice_prefetcher_push(p, &seg, 1, 10, &seq), SLUICE_ERROR_TIMEOUT);
    sluice_prefetch_fill_t fill;
    memset(&fill, 0, sizeof fill);
    fill.seq = 12345;
    fill.token = 999;
    CHECK_ERR(sluice_prefetcher_submit(p, &fill), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_cancel(p, &fill), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_submit(p, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    sluice_batch_t bt;
    sluice_batch_view_t v;
    REQUIRE_OK(sluice_prefetcher_next(p, s, 1000, &bt, &v));
    CHECK_OK(sluice_batch_release(bt));
    CHECK_ERR(sluice_batch_release(bt), SLUICE_ERROR_INVALID_HANDLE);
    sluice_buffer_t small, bufs[2];
    REQUIRE_OK(sluice_buffer_alloc(s, 8, &small));
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &bufs[0]));
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &bufs[1]));
    CHECK_ERR(sluice_prefetcher_next_into(p, s, bufs, 2, 1000, &v), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_prefetcher_next_into(p, s, &small, 1, 1000, &v), SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_OK(sluice_prefetcher_close_input(p));
    CHECK_ERR(sluice_prefetcher_push(p, &seg, 1, 0, &seq), SLUICE_ERROR_INVALID_STATE);
    CHECK_ERR(sluice_prefetcher_acquire(p, 0, &fill), SLUICE_ERROR_INVALID_STATE);
    /* drain what is left, then the end of the data */
    sluice_error_t *e;
    while ((e = sluice_prefetcher_next(p, s, 1000, &bt, &v)) == NULL) CHECK_OK(sluice_batch_release(bt));
    CHECK_ERR(e, SLUICE_ERROR_END_OF_DATA);
    CHECK_ERR(sluice_prefetcher_next_into(p, s, bufs, 1, 1000, &v), SLUICE_ERROR_END_OF_DATA);
    sluice_prefetcher_stats_t st;
    CHECK_ERR(sluice_prefetcher_stats(p, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_prefetcher_destroy(p));
    CHECK_ERR(sluice_prefetcher_destroy(p), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_prefetcher_stats(p, &st), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_prefetcher_close_input(p), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(small));
    CHECK_OK(sluice_buffer_free(bufs[0]));
    CHECK_OK(sluice_buffer_free(bufs[1]));
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

static int32_t failing_fill(void *user_data, sluice_prefetch_fill_t *fill) {
    (void)user_data;
    (void)fill;
    return 7;
}

/* The prefetcher's remaining listed errors: a depth over the maximum, acquire and
 * next timing out, and a failing pull-mode fill given in its batch's place. */
TEST(errors_prefetcher_timeouts_and_fill) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.segments = 1;
    cfg.capacity[0] = 64;
    cfg.depth = 65;
    sluice_prefetcher_t p;
    CHECK_ERR(sluice_prefetcher_create(d, &cfg, &p), SLUICE_ERROR_INVALID_ARGUMENT);
    cfg.depth = 1;
    REQUIRE_OK(sluice_prefetcher_create(d, &cfg, &p));
    sluice_batch_t bt;
    sluice_batch_view_t v;
    CHECK_ERR(sluice_prefetcher_next(p, s, 10, &bt, &v), SLUICE_ERROR_TIMEOUT);
    sluice_prefetch_fill_t fill, other;
    REQUIRE_OK(sluice_prefetcher_acquire(p, 0, &fill));
    CHECK_ERR(sluice_prefetcher_acquire(p, 10, &other), SLUICE_ERROR_TIMEOUT);
    CHECK_ERR(sluice_prefetcher_acquire(p, 0, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_OK(sluice_prefetcher_cancel(p, &fill));
    CHECK_OK(sluice_prefetcher_destroy(p));

    cfg.fill = failing_fill;
    REQUIRE_OK(sluice_prefetcher_create(d, &cfg, &p));
    memset(&v, 0, sizeof v);
    v.segments = 99;
    CHECK_ERR(sluice_prefetcher_next(p, s, 5000, &bt, &v), SLUICE_ERROR_CALLBACK_FAILED);
    CHECK_EQ(v.segments, 0);
    CHECK_OK(sluice_prefetcher_destroy(p));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* Two handles on one raw stream: neither captures, and a capturing raw stream is
 * not wrapped (their tracking would disagree with what the driver captures). */
TEST(errors_capture_of_a_shared_raw_stream) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s, w;
    REQUIRE(new_stream(d, &s));
    void *raw;
    REQUIRE_OK(sluice_stream_raw(s, &raw));
    REQUIRE_OK(sluice_stream_wrap_external(d, raw, &w));
    CHECK_ERR_MSG(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED), SLUICE_ERROR_INVALID_STATE,
                  "wrap_external");
    CHECK_ERR(sluice_graph_capture_begin(w, SLUICE_CAPTURE_RELAXED), SLUICE_ERROR_INVALID_STATE);
    CHECK_OK(sluice_stream_destroy(w));
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    CHECK_ERR(sluice_stream_wrap_external(d, raw, &w), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    sluice_graph_t g;
    REQUIRE_OK(sluice_graph_capture_end(s, &g));
    CHECK_OK(sluice_graph_destroy(g));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* ---- objects of two devices (a child with SLUICE_HOST_DEVICES=2) ------------------------ */

CHILD(errors_wrong_device) {
    sluice_device_t d0, d1;
    if (!CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 0, &d0))) return 1;
    if (!CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 1, &d1))) return 1;
    sluice_stream_t s0, s1;
    CHECK_OK(sluice_stream_create(d0, 0, 0, &s0));
    CHECK_OK(sluice_stream_create(d1, 0, 0, &s1));
    sluice_buffer_t b0, b1;
    CHECK_OK(sluice_buffer_alloc(s0, 16, &b0));
    CHECK_OK(sluice_buffer_alloc(s1, 16, &b1));
    uint8_t h[16] = {0};
    CHECK_ERR(sluice_stream_copy(s0, b0, 0, b1, 0, 16), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_copy_from_host(s0, b1, 0, h, 16), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_copy_to_host(s0, h, b1, 0, 16), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_memset(s0, b1, 0, 0, 16), SLUICE_ERROR_WRONG_DEVICE);
    sluice_event_t e1;
    CHECK_OK(sluice_event_record(s1, 0, &e1));
    CHECK_ERR(sluice_stream_wait_event(s0, e1), SLUICE_ERROR_WRONG_DEVICE);
    /* graphs and caches */
    sluice_graph_t g;
    sluice_graph_exec_t x;
    CHECK_OK(sluice_graph_capture_begin(s0, SLUICE_CAPTURE_RELAXED));
    CHECK_OK(sluice_stream_memset(s0, b0, 0, 1, 16));
    CHECK_OK(sluice_graph_capture_end(s0, &g));
    CHECK_OK(sluice_graph_instantiate(g, &x));
    CHECK_ERR(sluice_graph_exec_launch(x, s1), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_graph_exec_upload(x, s1), SLUICE_ERROR_WRONG_DEVICE);
    sluice_graph_t g1;
    CHECK_OK(sluice_graph_capture_begin(s1, SLUICE_CAPTURE_RELAXED));
    CHECK_OK(sluice_stream_memset(s1, b1, 0, 1, 16));
    CHECK_OK(sluice_graph_capture_end(s1, &g1));
    CHECK_ERR(sluice_graph_exec_update(x, g1, NULL), SLUICE_ERROR_WRONG_DEVICE);
    sluice_graph_cache_t c;
    CHECK_OK(sluice_graph_cache_create(d0, &c));
    CHECK_ERR(sluice_graph_cache_run(c, 1, s1, failing_body, NULL), SLUICE_ERROR_WRONG_DEVICE);
    /* A prefetcher of device 0: next_into on device 1 consumes no batch. */
    sluice_prefetcher_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.depth = 2;
    cfg.segments = 1;
    cfg.capacity[0] = 16;
    sluice_prefetcher_t pf;
    CHECK_OK(sluice_prefetcher_create(d0, &cfg, &pf));
    uint8_t bytes[16] = {1};
    sluice_prefetch_segment_t seg = {bytes, 16};
    CHECK_OK(sluice_prefetcher_push(pf, &seg, 1, 1000, NULL));
    CHECK_OK(sluice_prefetcher_push(pf, &seg, 1, 1000, NULL));
    CHECK_OK(sluice_prefetcher_close_input(pf));
    sluice_batch_view_t pv;
    sluice_batch_t wrong;
    CHECK_ERR(sluice_prefetcher_next(pf, s1, 0, &wrong, &pv), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_prefetcher_next_into(pf, s1, &b1, 1, 0, &pv), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_prefetcher_next_into(pf, s0, &b1, 1, 0, &pv), SLUICE_ERROR_WRONG_DEVICE);
    for (uint64_t want = 0; want < 2; want++) {
        sluice_batch_t pb;
        if (!CHECK_OK(sluice_prefetcher_next(pf, s0, 1000, &pb, &pv))) break;
        CHECK_EQ(pv.seq, want);
        CHECK_OK(sluice_batch_release(pb));
    }
    CHECK_ERR(sluice_prefetcher_next(pf, s0, 0, &(sluice_batch_t){0}, &pv), SLUICE_ERROR_END_OF_DATA);
    CHECK_OK(sluice_prefetcher_destroy(pf));
    /* RNG */
    sluice_rng_t r0, r1;
    CHECK_OK(sluice_rng_create(s0, 1, 4, &r0));
    CHECK_OK(sluice_rng_create(s1, 1, 4, &r1));
    CHECK_ERR(sluice_rng_generate(s0, r0, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, b1, 0, 4),
              SLUICE_ERROR_WRONG_DEVICE);
    sluice_rng_checkpoint_t ck1;
    CHECK_OK(sluice_rng_checkpoint_create(s1, r1, &ck1));
    CHECK_ERR(sluice_rng_save(s0, r0, ck1), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_rng_restore(s0, r0, ck1), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_OK(sluice_rng_checkpoint_destroy(ck1));
    CHECK_OK(sluice_rng_destroy(r0));
    CHECK_OK(sluice_rng_destroy(r1));
    CHECK_OK(sluice_graph_cache_destroy(c));
    CHECK_OK(sluice_graph_destroy(g1));
    CHECK_OK(sluice_graph_exec_destroy(x));
    CHECK_OK(sluice_graph_destroy(g));
    CHECK_OK(sluice_event_destroy(e1));
    CHECK_OK(sluice_buffer_free(b0));
    CHECK_OK(sluice_buffer_free(b1));
    CHECK_OK(sluice_stream_destroy(s0));
    CHECK_OK(sluice_stream_destroy(s1));
    CHECK_OK(sluice_device_close(d0));
    CHECK_OK(sluice_device_close(d1));
    return st_failures() ? 1 : 0;
}

TEST(errors_wrong_device) {
    static child_result_t r;
    const char *set[] = {"SLUICE_HOST_DEVICES=2", NULL};
    if (!run_child("errors_wrong_device", set, NULL, &r, 60)) return;
    bool ok = CHECK(r.exited && !r.timed_out);
    ok &= CHECK_EQ(r.status, 0);
    if (!ok) print_child("errors_wrong_device", &r);
}
