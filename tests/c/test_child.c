/* Tests that need a fresh process with a different environment: this binary re-executes
 * itself as `--child MODE` (see run_child in helpers.h). */
#include "helpers.h"

/* ---- no driver ----------------------------------------------------------------------
 * With SLUICE_BACKEND=cuda on a machine without a usable CUDA driver, every cuda entry
 * point gives NO_DRIVER with a clear message, nothing crashes, and the library prints
 * nothing to stderr (the parent asserts the child's stderr is empty). */
CHILD(no_driver) {
    uint64_t live = sluice_live_handles();
    sluice_device_t d = {0x1111};
    sluice_error_t *e = sluice_device_open_default(&d);
    if (e == NULL) { /* a real driver and GPU: not the situation under test */
        CHECK_OK(sluice_device_close(d));
        return CHILD_SKIP;
    }
    if (sluice_error_code(e) != SLUICE_ERROR_NO_DRIVER) {
        uint32_t n = 0;
        sluice_error_t *c = sluice_device_count(SLUICE_BACKEND_CUDA, &n);
        if (c == NULL) { /* a driver exists (e.g. with no GPU): not what we test */
            sluice_error_free(e);
            return CHILD_SKIP;
        }
        sluice_error_free(c);
    }
    CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_NO_DRIVER);
    const char *m = sluice_error_message(e);
    printf("open_default: %s\n", m);
    CHECK(strstr(m, "sluice_device_open_default") != NULL);
    CHECK(strstr(m, "CUDA") != NULL || strstr(m, "cuda") != NULL);
    CHECK(strstr(m, "driver") != NULL);
    CHECK_EQ(sluice_error_driver_code(e), 0);
    sluice_error_free(e);
    CHECK_EQ(d.bits, 0x1111);

    uint32_t n = 99;
    e = sluice_device_count(SLUICE_BACKEND_CUDA, &n);
    if (CHECK(e != NULL)) {
        CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_NO_DRIVER);
        m = sluice_error_message(e);
        printf("device_count: %s\n", m);
        CHECK(strstr(m, "sluice_device_count") != NULL);
        CHECK(strstr(m, "driver") != NULL);
        sluice_error_free(e);
    }
    CHECK_EQ(n, 99);
    /* the outcome is cached: asking again gives the same, cleanly */
    for (int i = 0; i < 3; i++) {
        CHECK_ERR(sluice_device_count(SLUICE_BACKEND_CUDA, &n), SLUICE_ERROR_NO_DRIVER);
        CHECK_ERR(sluice_device_open(SLUICE_BACKEND_CUDA, 0, &d), SLUICE_ERROR_NO_DRIVER);
        CHECK_ERR(sluice_device_open(SLUICE_BACKEND_CUDA, 7, &d), SLUICE_ERROR_NO_DRIVER);
        CHECK_ERR(sluice_device_open_default(&d), SLUICE_ERROR_NO_DRIVER);
    }
    CHECK_EQ(sluice_live_handles(), live);
    /* the host backend still works in that process */
    sluice_device_t h;
    if (CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 0, &h))) {
        sluice_stream_t s;
        if (CHECK_OK(sluice_stream_create(h, 0, 0, &s))) {
            static atomic_int flag;
            CHECK_OK(sluice_stream_launch_host_func(s, set_flag_cb, &flag, NULL, NULL, 0, NULL, 0));
            CHECK_OK(sluice_stream_synchronize(s));
            CHECK_EQ(atomic_load(&flag), 1);
            CHECK_OK(sluice_stream_destroy(s));
        }
        CHECK_OK(sluice_device_close(h));
    }
    CHECK_EQ(sluice_live_handles(), live);
    printf("%d failed checks\n", st_failures());
    return st_failures() ? 1 : 0;
}

TEST(missing_driver_is_a_clean_error) {
    uint32_t n = 0;
    sluice_error_t *e = sluice_device_count(SLUICE_BACKEND_CUDA, &n);
    if (e == NULL) SKIP("a CUDA driver is present on this machine");
    sluice_error_free(e);
    static child_result_t r;
    const char *set[] = {"SLUICE_BACKEND=cuda", NULL};
    REQUIRE(run_child("no_driver", set, NULL, &r, 60));
    if (r.exited && r.status == CHILD_SKIP) SKIP("the child found a CUDA driver");
    bool ok = CHECK(r.exited && !r.timed_out);
    ok &= CHECK_EQ(r.status, 0);
    ok &= CHECK_EQ(r.err_len, 0); /* nothing on stderr: no panic message, no log line */
    if (!ok) print_child("no_driver", &r);
}

/* ---- SLUICE_BACKEND values --------------------------------------------------------- */

CHILD(backend_env_bogus) {
    sluice_device_t d = {0x2222};
    CHECK_ERR_MSG(sluice_device_open_default(&d), SLUICE_ERROR_INVALID_ARGUMENT, "SLUICE_BACKEND");
    CHECK_EQ(d.bits, 0x2222);
    /* explicit opens do not look at SLUICE_BACKEND */
    if (CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 0, &d))) CHECK_OK(sluice_device_close(d));
    return st_failures() ? 1 : 0;
}

CHILD(backend_env_auto) {
    /* auto: cuda:0 where a usable driver and GPU exist, else host:0 */
    uint32_t n = 0;
    sluice_error_t *e = sluice_device_count(SLUICE_BACKEND_CUDA, &n);
    uint32_t want = (e == NULL && n > 0) ? SLUICE_BACKEND_CUDA : SLUICE_BACKEND_HOST;
    sluice_error_free(e);
    sluice_device_t d;
    if (CHECK_OK(sluice_device_open_default(&d))) {
        sluice_device_props_t p;
        if (CHECK_OK(sluice_device_props(d, &p))) {
            CHECK_EQ(p.backend, want);
            CHECK_EQ(p.ordinal, 0);
        }
        CHECK_OK(sluice_device_close(d));
    }
    return st_failures() ? 1 : 0;
}

CHILD(backend_env_host) {
    sluice_device_t d;
    if (CHECK_OK(sluice_device_open_default(&d))) {
        sluice_device_props_t p;
        if (CHECK_OK(sluice_device_props(d, &p))) CHECK_EQ(p.backend, SLUICE_BACKEND_HOST);
        CHECK_OK(sluice_device_close(d));
    }
    return st_failures() ? 1 : 0;
}

static void expect_child_ok(const char *mode, const char *const *set, const char *const *unset) {
    static child_result_t r;
    if (!run_child(mode, set, unset, &r, 60)) return;
    bool ok = CHECK(r.exited && !r.timed_out);
    ok &= CHECK_EQ(r.status, 0);
    ok &= CHECK_EQ(r.err_len, 0);
    if (!ok) print_child(mode, &r);
}

TEST(backend_env_selects_default_device) {
    const char *bogus[] = {"SLUICE_BACKEND=gpu-please", NULL};
    expect_child_ok("backend_env_bogus", bogus, NULL);
    const char *autov[] = {"SLUICE_BACKEND=auto", NULL};
    expect_child_ok("backend_env_auto", autov, NULL);
    const char *unset[] = {"SLUICE_BACKEND", NULL};
    expect_child_ok("backend_env_auto", NULL, unset); /* unset means auto */
    const char *host[] = {"SLUICE_BACKEND=host", NULL};
    expect_child_ok("backend_env_host", host, NULL);
}

/* ---- objects of two devices -------------------------------------------------------- */

CHILD(wrong_device) {
    uint32_t n = 0;
    if (!CHECK_OK(sluice_device_count(SLUICE_BACKEND_HOST, &n)) || !CHECK_EQ(n, 2)) return 1;
    sluice_device_t d0, d1, d2;
    if (!CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 0, &d0))) return 1;
    if (!CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 1, &d1))) return 1;
    CHECK_ERR(sluice_device_open(SLUICE_BACKEND_HOST, 2, &d2), SLUICE_ERROR_NO_DEVICE);
    sluice_device_props_t p;
    if (CHECK_OK(sluice_device_props(d1, &p))) CHECK_EQ(p.ordinal, 1);
    sluice_stream_t s0, s1;
    if (!CHECK_OK(sluice_stream_create(d0, 0, 0, &s0))) return 1;
    if (!CHECK_OK(sluice_stream_create(d1, 0, 0, &s1))) return 1;
    sluice_buffer_t b0, b1, p1;
    if (!CHECK_OK(sluice_buffer_alloc(s0, 64, &b0))) return 1;
    if (!CHECK_OK(sluice_buffer_alloc(s1, 64, &b1))) return 1;
    if (!CHECK_OK(sluice_buffer_alloc_pinned(d1, 64, &p1))) return 1;
    uint8_t h[64];
    fill_pattern(h, 64, 1);
    CHECK_OK(sluice_stream_copy_from_host(s0, b0, 0, h, 64));
    CHECK_OK(sluice_stream_copy_from_host(s1, b1, 0, h, 64));
    CHECK_ERR(sluice_stream_copy(s0, b0, 0, b1, 0, 64), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_copy(s0, b0, 0, p1, 0, 64), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_copy(s1, b0, 0, b1, 0, 64), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_copy_from_host(s0, b1, 0, h, 64), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_copy_to_host(s1, h, b0, 0, 64), SLUICE_ERROR_WRONG_DEVICE);
    CHECK_ERR(sluice_stream_memset(s0, b1, 0, 0, 64), SLUICE_ERROR_WRONG_DEVICE);
    sluice_event_t e1;
    if (CHECK_OK(sluice_event_record(s1, 0, &e1))) {
        CHECK_ERR(sluice_stream_wait_event(s0, e1), SLUICE_ERROR_WRONG_DEVICE);
        CHECK_OK(sluice_event_destroy(e1));
    }
    /* a sync object is not tied to a device: ops on both devices may use it */
    sluice_sync_t y;
    if (CHECK_OK(sluice_sync_create(&y))) {
        static atomic_int c;
        CHECK_OK(sluice_stream_launch_host_func(s0, incr_cb, &c, NULL, NULL, 0, &y, 1));
        sluice_error_t *e = sluice_stream_launch_host_func(s1, incr_cb, &c, NULL, &y, 1, NULL, 0);
        if (e) { /* either it works, or it is refused as a device mix-up */
            CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_WRONG_DEVICE);
            sluice_error_free(e);
        }
        CHECK_OK(sluice_sync_wait_write(y));
        CHECK_OK(sluice_sync_destroy(y));
    }
    uint8_t r[64];
    CHECK_OK(sluice_stream_copy_to_host(s1, r, b1, 0, 64));
    CHECK(memcmp(r, h, 64) == 0);
    CHECK_OK(sluice_buffer_free(b0));
    CHECK_OK(sluice_buffer_free(b1));
    CHECK_OK(sluice_buffer_free(p1));
    CHECK_OK(sluice_stream_destroy(s0));
    CHECK_OK(sluice_stream_destroy(s1));
    CHECK_OK(sluice_device_close(d0));
    CHECK_OK(sluice_device_close(d1));
    CHECK_EQ(sluice_live_handles(), 0);
    return st_failures() ? 1 : 0;
}

TEST(objects_of_two_devices_are_not_mixed) {
    /* two host devices, in a child started with SLUICE_HOST_DEVICES=2 */
    const char *set[] = {"SLUICE_HOST_DEVICES=2", NULL};
    expect_child_ok("wrong_device", set, NULL);
}

/* ---- a wrapper of a host stream whose owner was destroyed ---------------------------
 * On host, sluice_stream_wrap_external adopts a sluice host stream. When the owning
 * handle is destroyed first, using the wrapper must not crash the process: either the
 * stream stays alive for its wrapper, or the calls fail with an error. Run in a child,
 * so that a crash is reported as a failure instead of killing the suite. */
CHILD(wrapper_outlives_owner) {
    sluice_device_t d;
    if (!CHECK_OK(sluice_device_open(SLUICE_BACKEND_HOST, 0, &d))) return 1;
    sluice_stream_t s, w;
    void *raw = NULL;
    if (!CHECK_OK(sluice_stream_create(d, 0, 0, &s))) return 1;
    if (!CHECK_OK(sluice_stream_raw(s, &raw))) return 1;
    if (!CHECK_OK(sluice_stream_wrap_external(d, raw, &w))) return 1;
    CHECK_OK(sluice_stream_destroy(s));
    static atomic_int flag;
    sluice_error_t *e = sluice_stream_launch_host_func(w, set_flag_cb, &flag, NULL, NULL, 0, NULL, 0);
    bool enqueued = e == NULL;
    sluice_error_free(e);
    e = sluice_stream_synchronize(w);
    if (e == NULL && enqueued) CHECK_EQ(atomic_load(&flag), 1);
    sluice_error_free(e);
    bool idle;
    sluice_error_free(sluice_stream_query(w, &idle));
    CHECK_OK(sluice_stream_destroy(w));
    CHECK_OK(sluice_device_close(d));
    return st_failures() ? 1 : 0;
}

TEST(host_wrapper_outlives_owner_without_crash) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    uint32_t b = dev_backend(d);
    CHECK_OK(sluice_device_close(d));
    if (b != SLUICE_BACKEND_HOST) SKIP("host backend only (a CUDA stream is truly foreign)");
    expect_child_ok("wrapper_outlives_owner", NULL, NULL);
}
