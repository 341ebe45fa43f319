/* Traces, counters and logs (issue 15): start/stop/flush, the file after a stop, a
 * flush and an exit without stop, counters of a scripted sequence, log levels and the
 * log callback, bad arguments. */
#include "helpers.h"

#include <stdatomic.h>

static void trace_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/sluice-c-%s-%d.json", dir && *dir ? dir : "/tmp", tag, (int)getpid());
}

/* The whole file, NUL-terminated (static storage; NULL when unreadable). */
static char *read_all(const char *path) {
    static char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

TEST(trace_start_stop_flush) {
    char path[512];
    trace_path(path, sizeof path, "trace");
    /* stop and flush with no trace do nothing */
    CHECK_OK(sluice_trace_stop());
    CHECK_OK(sluice_trace_flush());
    CHECK_ERR(sluice_trace_start(NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_trace_start(""), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR_MSG(sluice_trace_start("/nonexistent-dir/trace.json"), SLUICE_ERROR_INVALID_ARGUMENT,
                  "nonexistent-dir");

    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    CHECK_OK(sluice_stream_set_label(a, "producer"));
    CHECK_OK(sluice_stream_set_label(b, "consumer"));
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_create(&x));

    REQUIRE_OK(sluice_trace_start(path));
    CHECK_ERR(sluice_trace_start(path), SLUICE_ERROR_INVALID_STATE);
    CHECK_OK(sluice_stream_launch_host_func(a, sleep_cb, (void *)(uintptr_t)5, NULL, NULL, 0, &x, 1));
    CHECK_OK(sluice_stream_launch_host_func(b, sleep_cb, (void *)(uintptr_t)1, NULL, &x, 1, NULL, 0));
    CHECK_OK(sluice_stream_synchronize(b));
    CHECK_OK(sluice_trace_flush());
    const char *text = read_all(path);
    if (CHECK(text != NULL)) {
        CHECK(text[0] == '[');
        CHECK(!ends_with(text, "]\n")); /* still open: a prefix the viewers accept */
        CHECK(strstr(text, "\"name\":\"host fn\"") != NULL);
        CHECK(strstr(text, "producer (stream #") != NULL);
        CHECK(strstr(text, "\"ph\":\"s\"") != NULL); /* b waited on a: an arrow */
        CHECK(strstr(text, "\"ph\":\"f\"") != NULL);
    }
    CHECK_OK(sluice_trace_stop());
    CHECK_OK(sluice_trace_stop()); /* twice is fine */
    text = read_all(path);
    if (CHECK(text != NULL)) {
        CHECK(text[0] == '[');
        CHECK(ends_with(text, "\n]\n"));
    }
    remove(path);
    CHECK_OK(sluice_sync_destroy(x));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

/* A trace started by SLUICE_TRACE at the first traced call, never stopped: the exit
 * hook closes it. */
CHILD(trace_env_no_stop) {
    sluice_device_t d;
    if (!CHECK_OK(sluice_device_open_default(&d))) return 1;
    sluice_stream_t s;
    sluice_sync_t x;
    CHECK_OK(sluice_stream_create(d, 0, 0, &s));
    CHECK_OK(sluice_sync_create(&x));
    for (int i = 0; i < 3; i++)
        CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)1, NULL, NULL, 0, &x, 1));
    CHECK_OK(sluice_stream_synchronize(s));
    return st_failures() ? 1 : 0; /* no sluice_trace_stop */
}

TEST(trace_from_env_is_closed_at_exit) {
    char path[512], env[600];
    trace_path(path, sizeof path, "env");
    snprintf(env, sizeof env, "SLUICE_TRACE=%s", path);
    const char *set[] = {env, "SLUICE_TRACE_DEVICE=1", NULL};
    const char *unset[] = {"SLUICE_LOG", NULL};
    static child_result_t r;
    if (!run_child("trace_env_no_stop", set, unset, &r, 60)) return;
    bool ok = CHECK(r.exited && !r.timed_out);
    ok &= CHECK_EQ(r.status, 0);
    ok &= CHECK_EQ(r.err_len, 0); /* silent unless asked */
    if (!ok) print_child("trace_env_no_stop", &r);
    const char *text = read_all(path);
    if (CHECK(text != NULL)) {
        CHECK(text[0] == '[');
        CHECK(ends_with(text, "\n]\n"));
        CHECK(strstr(text, "\"name\":\"host fn\"") != NULL);
        CHECK(strstr(text, "\"cat\":\"device\"") != NULL); /* SLUICE_TRACE_DEVICE=1 */
    }
    remove(path);
}

TEST(counters_of_a_scripted_sequence) {
    sluice_counters_t c;
    CHECK_ERR(sluice_counters((sluice_device_t){0}, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_counters((sluice_device_t){0x1234}, &c), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_counters((sluice_device_t){0}, &c)); /* every device */

    sluice_device_t d;
    REQUIRE(open_dev(&d));
    CHECK_OK(sluice_device_pinned_trim(d));
    CHECK_OK(sluice_counters_set_enabled(true));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_buffer_t x, p;
    REQUIRE_OK(sluice_buffer_alloc(a, 4096, &x));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 4096, &p));
    sluice_counters_t before, after;
    REQUIRE_OK(sluice_counters(d, &before));
    CHECK_EQ(before.streams >= 2, 1);
    CHECK_OK(sluice_stream_copy(a, x, 0, p, 0, 4096)); /* H2D, no wait */
    CHECK_OK(sluice_stream_copy(b, p, 0, x, 0, 4096)); /* D2H, one wait, one dedup */
    CHECK_OK(sluice_stream_copy(a, x, 0, p, 0, 4096)); /* one wait, one dedup, one same */
    REQUIRE_OK(sluice_counters(d, &after));
    CHECK_EQ(after.waits_inserted - before.waits_inserted, 2);
    CHECK_EQ(after.waits_deduplicated - before.waits_deduplicated, 2);
    CHECK_EQ(after.waits_skipped_same_stream - before.waits_skipped_same_stream, 1);
    CHECK_EQ(after.events_recorded - before.events_recorded, 3);
    CHECK_EQ(after.bytes_h2d - before.bytes_h2d, 8192);
    CHECK_EQ(after.bytes_d2h - before.bytes_d2h, 4096);
    CHECK_EQ(after.bytes_d2d - before.bytes_d2d, 0);
    CHECK_EQ(after.pinned_bytes_in_use - before.pinned_bytes_in_use, 0);
    CHECK_OK(sluice_counters_set_enabled(false));
    CHECK_OK(sluice_stream_copy(a, x, 0, p, 0, 4096));
    sluice_counters_t off;
    REQUIRE_OK(sluice_counters(d, &off));
    CHECK_EQ(off.bytes_h2d, after.bytes_h2d); /* not counted while off */
    CHECK_EQ(off.events_recorded - after.events_recorded, 1); /* always counted */
    CHECK_OK(sluice_stream_synchronize(a));
    CHECK_OK(sluice_stream_synchronize(b));
    CHECK_OK(sluice_buffer_free(x));
    CHECK_OK(sluice_buffer_free(p));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    sluice_counters_t gone;
    REQUIRE_OK(sluice_counters(d, &gone));
    /* destroyed streams keep counting in their device */
    CHECK(gone.events_recorded >= off.events_recorded);
    CHECK(gone.waits_inserted >= off.waits_inserted);
    CHECK_OK(sluice_device_close(d));
}

static atomic_int log_stale, log_poison, log_other;

static void on_log(uint32_t level, const char *msg, void *user_data) {
    atomic_int *calls = user_data;
    atomic_fetch_add(calls, 1);
    if (level == SLUICE_LOG_DEBUG && strstr(msg, "stale handle used")) atomic_fetch_add(&log_stale, 1);
    else if (level == SLUICE_LOG_WARN && strstr(msg, "poisoned: stream synchronize"))
        atomic_fetch_add(&log_poison, 1);
    else atomic_fetch_add(&log_other, 1);
}

TEST(log_levels_and_callback) {
    static atomic_int calls;
    atomic_store(&calls, 0);
    atomic_store(&log_stale, 0);
    atomic_store(&log_poison, 0);
    CHECK_ERR(sluice_log_set_level(5), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_log_set_level(UINT32_MAX), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_OK(sluice_log_set_callback(on_log, &calls));
    sluice_stream_t bad = {0x0102000000000001ULL};
    /* off: nothing reaches the callback */
    CHECK_OK(sluice_log_set_level(SLUICE_LOG_OFF));
    CHECK_ERR(sluice_stream_synchronize(bad), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_EQ(atomic_load(&calls), 0);
    /* debug: a stale handle is logged */
    CHECK_OK(sluice_log_set_level(SLUICE_LOG_DEBUG));
    CHECK_ERR(sluice_stream_synchronize(bad), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_EQ(atomic_load(&log_stale), 1);
    /* warn: no debug messages, but a capture aborted by a host sync is logged */
    CHECK_OK(sluice_log_set_level(SLUICE_LOG_WARN));
    CHECK_ERR(sluice_stream_synchronize(bad), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_EQ(atomic_load(&log_stale), 1);
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    REQUIRE_OK(sluice_graph_capture_begin(s, SLUICE_CAPTURE_RELAXED));
    CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_CAPTURE_UNSUPPORTED);
    sluice_graph_t g = {0};
    CHECK_ERR(sluice_graph_capture_end(s, &g), SLUICE_ERROR_CAPTURE_FAILED);
    CHECK_EQ(atomic_load(&log_poison), 1);
    /* back to stderr, and off */
    CHECK_OK(sluice_log_set_callback(NULL, NULL));
    CHECK_OK(sluice_log_set_level(SLUICE_LOG_OFF));
    int before = atomic_load(&calls);
    CHECK_ERR(sluice_stream_synchronize(bad), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_EQ(atomic_load(&calls), before);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* SLUICE_LOG=debug writes to stderr. */
CHILD(log_env_debug) {
    sluice_stream_t bad = {0x0102000000000001ULL};
    CHECK_ERR(sluice_stream_synchronize(bad), SLUICE_ERROR_INVALID_HANDLE);
    return st_failures() ? 1 : 0;
}

TEST(log_env_writes_to_stderr) {
    const char *set[] = {"SLUICE_LOG=debug", NULL};
    static child_result_t r;
    if (!run_child("log_env_debug", set, NULL, &r, 60)) return;
    bool ok = CHECK(r.exited && !r.timed_out);
    ok &= CHECK_EQ(r.status, 0);
    ok &= CHECK(strstr(r.err, "sluice [debug] stale handle used") != NULL);
    if (!ok) print_child("log_env_debug", &r);
}
