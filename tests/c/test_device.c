/* Devices: count, open, properties, priority range, close, wait_all. */
#include "helpers.h"

static void check_props(sluice_device_t d, uint32_t backend, uint32_t ordinal) {
    sluice_device_props_t p;
    memset(&p, 0x5a, sizeof p);
    if (!CHECK_OK(sluice_device_props(d, &p))) return;
    CHECK(memchr(p.name, '\0', sizeof p.name) != NULL); /* NUL-terminated */
    CHECK(p.name[0] != '\0');
    CHECK_EQ(p.backend, backend);
    CHECK_EQ(p.ordinal, ordinal);
    CHECK(p.total_memory > 0);
    CHECK(p.multiprocessor_count >= 1);
    if (backend == SLUICE_BACKEND_HOST) {
        CHECK_EQ(p.compute_capability_major, 0);
        CHECK_EQ(p.compute_capability_minor, 0);
    } else {
        CHECK(p.compute_capability_major >= 3);
    }
}

TEST(device_host_count_open_props) {
    uint32_t n = 0;
    REQUIRE_OK(sluice_device_count(SLUICE_BACKEND_HOST, &n));
    CHECK(n >= 1);
    sluice_device_t d = {0};
    REQUIRE_OK(sluice_device_open(SLUICE_BACKEND_HOST, 0, &d));
    CHECK(d.bits != 0);
    check_props(d, SLUICE_BACKEND_HOST, 0);
    CHECK_OK(sluice_device_close(d));
}

TEST(device_default_matches_env) {
    sluice_device_t d = {0};
    REQUIRE(open_dev(&d));
    CHECK(d.bits != 0);
    uint32_t b = dev_backend(d);
    const char *env = getenv("SLUICE_BACKEND");
    if (env && strcmp(env, "host") == 0) CHECK_EQ(b, SLUICE_BACKEND_HOST);
    else if (env && strcmp(env, "cuda") == 0) CHECK_EQ(b, SLUICE_BACKEND_CUDA);
    else CHECK(b == SLUICE_BACKEND_HOST || b == SLUICE_BACKEND_CUDA);
    uint32_t n = 0;
    CHECK_OK(sluice_device_count(b, &n));
    CHECK(n >= 1);
    check_props(d, b, 0);
    CHECK_OK(sluice_device_close(d));
}

TEST(device_open_twice_gives_distinct_handles) {
    sluice_device_t a = {0}, b = {0};
    REQUIRE(open_dev(&a));
    REQUIRE(open_dev(&b));
    CHECK(a.bits != b.bits);
    CHECK_OK(sluice_device_close(a));
    /* the other handle to the same device stays usable */
    sluice_device_props_t p;
    CHECK_OK(sluice_device_props(b, &p));
    CHECK_OK(sluice_device_close(b));
}

TEST(device_priority_range) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    int32_t least = 12345, greatest = 12345;
    REQUIRE_OK(sluice_device_priority_range(d, &least, &greatest));
    if (dev_backend(d) == SLUICE_BACKEND_HOST) {
        CHECK_EQ(least, 0);
        CHECK_EQ(greatest, 0);
    } else {
        /* CUDA: greatest (highest priority) is numerically lowest */
        CHECK(greatest <= least);
    }
    /* priorities outside the range are clamped, not refused */
    const int32_t prios[] = {least, greatest, INT32_MIN, INT32_MAX, -1, 1};
    for (size_t i = 0; i < sizeof prios / sizeof prios[0]; i++) {
        sluice_stream_t s;
        if (!CHECK_OK(sluice_stream_create(d, 0, prios[i], &s))) continue;
        CHECK_OK(sluice_stream_synchronize(s));
        CHECK_OK(sluice_stream_destroy(s));
    }
    CHECK_OK(sluice_device_close(d));
}

TEST(device_bad_backend_value) {
    const uint32_t bad[] = {0, 3, 4, 0x100, UINT32_MAX};
    uint64_t live = sluice_live_handles();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t n = 777;
        CHECK_ERR_MSG(sluice_device_count(bad[i], &n), SLUICE_ERROR_INVALID_ARGUMENT,
                      "sluice_device_count");
        CHECK_EQ(n, 777); /* outputs are written only on success */
        sluice_device_t d = {0x1234};
        CHECK_ERR_MSG(sluice_device_open(bad[i], 0, &d), SLUICE_ERROR_INVALID_ARGUMENT,
                      "sluice_device_open");
        CHECK_EQ(d.bits, 0x1234);
    }
    CHECK_EQ(sluice_live_handles(), live);
}

TEST(device_ordinal_out_of_range) {
    uint32_t n = 0;
    REQUIRE_OK(sluice_device_count(SLUICE_BACKEND_HOST, &n));
    uint64_t live = sluice_live_handles();
    sluice_device_t d = {0x77};
    CHECK_ERR(sluice_device_open(SLUICE_BACKEND_HOST, n, &d), SLUICE_ERROR_NO_DEVICE);
    CHECK_ERR(sluice_device_open(SLUICE_BACKEND_HOST, n + 1000, &d), SLUICE_ERROR_NO_DEVICE);
    CHECK_ERR(sluice_device_open(SLUICE_BACKEND_HOST, UINT32_MAX, &d), SLUICE_ERROR_NO_DEVICE);
    CHECK_EQ(d.bits, 0x77);
    /* the same on the default backend (cuda on a GPU machine) */
    sluice_device_t def;
    REQUIRE(open_dev(&def));
    uint32_t b = dev_backend(def);
    CHECK_OK(sluice_device_close(def));
    uint32_t nb = 0;
    REQUIRE_OK(sluice_device_count(b, &nb));
    CHECK_ERR(sluice_device_open(b, nb, &d), SLUICE_ERROR_NO_DEVICE);
    CHECK_EQ(sluice_live_handles(), live);
}

TEST(device_close_then_use) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    CHECK_OK(sluice_device_close(d));
    sluice_device_props_t p;
    CHECK_ERR(sluice_device_props(d, &p), SLUICE_ERROR_INVALID_HANDLE);
    int32_t a, b;
    CHECK_ERR(sluice_device_priority_range(d, &a, &b), SLUICE_ERROR_INVALID_HANDLE);
    sluice_stream_t s;
    CHECK_ERR(sluice_stream_create(d, 0, 0, &s), SLUICE_ERROR_INVALID_HANDLE);
    sluice_buffer_t buf;
    CHECK_ERR(sluice_buffer_alloc_pinned(d, 64, &buf), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_device_wait_all(d), SLUICE_ERROR_INVALID_HANDLE);
    sluice_pinned_stats_t ps;
    CHECK_ERR(sluice_device_pinned_stats(d, &ps), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_device_pinned_trim(d), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR(sluice_device_pinned_set_limit(d, 0), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_ERR_MSG(sluice_device_close(d), SLUICE_ERROR_INVALID_HANDLE, "sluice_device_close");
}

TEST(device_objects_outlive_device_handle) {
    static atomic_int flag;
    atomic_store(&flag, 0);
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 256, &b));
    CHECK_OK(sluice_device_close(d)); /* children keep their device alive */
    uint8_t src[256], dst[256];
    fill_pattern(src, sizeof src, 3);
    CHECK_OK(sluice_stream_copy_from_host(s, b, 0, src, sizeof src));
    CHECK_OK(sluice_stream_launch_host_func(s, set_flag_cb, &flag, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_copy_to_host(s, dst, b, 0, sizeof dst));
    CHECK(memcmp(src, dst, sizeof dst) == 0);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_EQ(atomic_load(&flag), 1);
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
}

TEST(device_wait_all_drains_every_stream) {
    enum { NS = 4 };
    static atomic_int flags[NS];
    static slow_set_t args[NS];
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s[NS];
    for (int i = 0; i < NS; i++) {
        atomic_store(&flags[i], 0);
        args[i] = (slow_set_t){(unsigned)(10 + 10 * i), &flags[i], 1};
        REQUIRE(new_stream(d, &s[i]));
        CHECK_OK(sluice_stream_launch_host_func(s[i], slow_set_cb, &args[i], NULL, NULL, 0, NULL, 0));
    }
    CHECK_OK(sluice_device_wait_all(d));
    for (int i = 0; i < NS; i++) CHECK_EQ(atomic_load(&flags[i]), 1);
    /* a failed callback on one stream is reported by wait_all, after draining all */
    static atomic_int late;
    atomic_store(&late, 0);
    static slow_set_t late_arg;
    late_arg = (slow_set_t){40, &late, 1};
    CHECK_OK(sluice_stream_launch_host_func(s[1], return_cb, (void *)(intptr_t)5, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_launch_host_func(s[3], slow_set_cb, &late_arg, NULL, NULL, 0, NULL, 0));
    CHECK_ERR(sluice_device_wait_all(d), SLUICE_ERROR_CALLBACK_FAILED);
    CHECK_EQ(atomic_load(&late), 1);
    CHECK_OK(sluice_device_wait_all(d)); /* reported once */
    for (int i = 0; i < NS; i++) CHECK_OK(sluice_stream_destroy(s[i]));
    CHECK_OK(sluice_device_close(d));
}
