/* Memory: device, pinned and registered buffers; copies; memset; the pinned pool. */
#include "helpers.h"

static bool buffer_info(sluice_buffer_t b, sluice_buffer_info_t *i) {
    memset(i, 0, sizeof *i);
    return CHECK_OK(sluice_buffer_info(b, i));
}

/* Reads the whole buffer back through pageable memory. */
static uint8_t *read_back(sluice_stream_t s, sluice_buffer_t b, size_t size) {
    uint8_t *p = malloc(size);
    if (!CHECK(p != NULL)) return NULL;
    memset(p, 0xee, size);
    if (!CHECK_OK(sluice_stream_copy_to_host(s, p, b, 0, size))) {
        free(p);
        return NULL;
    }
    return p;
}

TEST(buffer_info_fields) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_info_t i;

    sluice_buffer_t dev = {0};
    REQUIRE_OK(sluice_buffer_alloc(s, 1000, &dev));
    CHECK(dev.bits != 0);
    if (buffer_info(dev, &i)) {
        CHECK_EQ(i.kind, SLUICE_BUFFER_DEVICE);
        CHECK_EQ(i.size, 1000);
        CHECK(i.device_ptr != 0);
        CHECK(i.host_ptr == NULL);
    }

    sluice_buffer_t pin = {0};
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 5000, &pin));
    if (buffer_info(pin, &i)) {
        CHECK_EQ(i.kind, SLUICE_BUFFER_PINNED);
        CHECK_EQ(i.size, 5000); /* the requested size, not the pool's rounding */
        CHECK(i.host_ptr != NULL);
        CHECK_EQ(i.device_ptr, (uint64_t)(uintptr_t)i.host_ptr);
        memset(i.host_ptr, 0x42, 5000); /* host-writable */
    }

    size_t len = 3 * 4096;
    uint8_t *mem = aligned_alloc(4096, len);
    REQUIRE(mem != NULL);
    sluice_buffer_t reg = {0};
    if (CHECK_OK(sluice_buffer_register_host(d, mem, len, &reg)) && buffer_info(reg, &i)) {
        CHECK_EQ(i.kind, SLUICE_BUFFER_REGISTERED);
        CHECK_EQ(i.size, len);
        CHECK(i.host_ptr == mem);
        CHECK_EQ(i.device_ptr, (uint64_t)(uintptr_t)mem);
        CHECK_OK(sluice_buffer_free(reg));
    }
    free(mem);
    CHECK_OK(sluice_buffer_free(dev));
    CHECK_OK(sluice_buffer_free(pin));
    CHECK_ERR(sluice_buffer_info(dev, &i), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(copy_roundtrip_h2d_d2d_d2h_at_offsets) {
    enum { SIZE = 70000, LEN = 50001, OFF_A = 123, OFF_B = 4567, SEED = 7 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t a, b;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &a));
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    CHECK_OK(sluice_stream_memset(s, a, 0, 0x11, SIZE));
    CHECK_OK(sluice_stream_memset(s, b, 0, 0xa5, SIZE));
    uint8_t *src = malloc(LEN);
    REQUIRE(src != NULL);
    fill_pattern(src, LEN, SEED);
    CHECK_OK(sluice_stream_copy_from_host(s, a, OFF_A, src, LEN));
    CHECK_OK(sluice_stream_copy(s, b, OFF_B, a, OFF_A, LEN));
    uint8_t *ra = read_back(s, a, SIZE), *rb = read_back(s, b, SIZE);
    if (ra && rb) {
        CHECK_EQ(check_fill(ra, OFF_A, 0x11), -1);
        CHECK_EQ(check_pattern(ra + OFF_A, LEN, SEED, 0), -1);
        CHECK_EQ(check_fill(ra + OFF_A + LEN, SIZE - OFF_A - LEN, 0x11), -1);
        CHECK_EQ(check_fill(rb, OFF_B, 0xa5), -1);
        CHECK_EQ(check_pattern(rb + OFF_B, LEN, SEED, 0), -1);
        CHECK_EQ(check_fill(rb + OFF_B + LEN, SIZE - OFF_B - LEN, 0xa5), -1);
    }
    /* a partial read at an offset */
    uint8_t part[777];
    memset(part, 0, sizeof part);
    CHECK_OK(sluice_stream_copy_to_host(s, part, b, OFF_B + 1000, sizeof part));
    CHECK_EQ(check_pattern(part, sizeof part, SEED, 1000), -1);
    /* copies within one buffer, to a disjoint range */
    CHECK_OK(sluice_stream_copy(s, b, 0, b, OFF_B, 1000));
    memset(part, 0, sizeof part);
    CHECK_OK(sluice_stream_copy_to_host(s, part, b, 0, sizeof part));
    CHECK_EQ(check_pattern(part, sizeof part, SEED, 0), -1);
    free(ra);
    free(rb);
    free(src);
    CHECK_OK(sluice_buffer_free(a));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(copy_pinned_and_registered_paths) {
    enum { SIZE = 3 * 4096, SEED = 21 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t pin, dev;
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &pin));
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &dev));
    sluice_buffer_info_t pi;
    REQUIRE(buffer_info(pin, &pi));
    fill_pattern(pi.host_ptr, SIZE, SEED);
    uint8_t *mem = aligned_alloc(4096, SIZE);
    REQUIRE(mem != NULL);
    memset(mem, 0, SIZE);
    sluice_buffer_t reg;
    if (CHECK_OK(sluice_buffer_register_host(d, mem, SIZE, &reg))) {
        CHECK_OK(sluice_stream_copy(s, dev, 0, pin, 0, SIZE));             /* pinned -> device */
        CHECK_OK(sluice_stream_copy(s, reg, 100, dev, 200, SIZE - 300));   /* device -> registered */
        CHECK_OK(sluice_stream_synchronize(s));
        CHECK_EQ(check_fill(mem, 100, 0), -1);
        CHECK_EQ(check_pattern(mem + 100, SIZE - 300, SEED, 200), -1);
        CHECK_EQ(check_fill(mem + SIZE - 200, 200, 0), -1);
        /* registered -> pinned, host to host through the stream */
        fill_pattern(mem, SIZE, SEED + 1);
        CHECK_OK(sluice_stream_copy(s, pin, 0, reg, 0, SIZE));
        sluice_sync_t ps;
        if (CHECK_OK(sluice_buffer_sync(pin, &ps))) {
            CHECK_OK(sluice_sync_wait_read(ps)); /* waits for the copy that wrote it */
            CHECK_EQ(check_pattern(pi.host_ptr, SIZE, SEED + 1, 0), -1);
            CHECK_OK(sluice_sync_destroy(ps));
        }
        CHECK_OK(sluice_buffer_free(reg));
    }
    free(mem);
    CHECK_OK(sluice_buffer_free(pin));
    CHECK_OK(sluice_buffer_free(dev));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(memset_ranges) {
    enum { SIZE = 10000 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    CHECK_OK(sluice_stream_memset(s, b, 0, 0x01, SIZE));
    CHECK_OK(sluice_stream_memset(s, b, 10, 0x5a, 50));
    CHECK_OK(sluice_stream_memset(s, b, SIZE - 7, 0xff, 7));
    CHECK_OK(sluice_stream_memset(s, b, 1000, 0x00, 3000));
    uint8_t *r = read_back(s, b, SIZE);
    if (r) {
        CHECK_EQ(check_fill(r, 10, 0x01), -1);
        CHECK_EQ(check_fill(r + 10, 50, 0x5a), -1);
        CHECK_EQ(check_fill(r + 60, 940, 0x01), -1);
        CHECK_EQ(check_fill(r + 1000, 3000, 0x00), -1);
        CHECK_EQ(check_fill(r + 4000, SIZE - 4007, 0x01), -1);
        CHECK_EQ(check_fill(r + SIZE - 7, 7, 0xff), -1);
        free(r);
    }
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(copy_from_host_source_reusable_on_return) {
    enum { SIZE = 8192, SEED = 5 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    static uint8_t src[SIZE];
    fill_pattern(src, SIZE, SEED);
    /* the copy itself runs 40 ms later */
    CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)40, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_copy_from_host(s, b, 0, src, SIZE));
    memset(src, 0, SIZE); /* allowed: the call returned */
    uint8_t *r = read_back(s, b, SIZE);
    if (r) {
        CHECK_EQ(check_pattern(r, SIZE, SEED, 0), -1);
        free(r);
    }
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(copies_across_streams_are_ordered_automatically) {
    /* X is written on A behind a slow callback, copied X -> Y on B, read from Y on C:
     * no events by hand; the buffers' sync objects order the streams. */
    enum { SIZE = 65536, SEED = 9 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b, c;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    REQUIRE(new_stream(d, &c));
    sluice_buffer_t x, y;
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &x));
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &y));
    CHECK_OK(sluice_stream_memset(a, x, 0, 0, SIZE));
    CHECK_OK(sluice_stream_memset(a, y, 0, 0, SIZE));
    CHECK_OK(sluice_stream_synchronize(a));
    static uint8_t src[SIZE];
    fill_pattern(src, SIZE, SEED);
    uint64_t wb = stream_waits(b), wc = stream_waits(c);
    CHECK_OK(sluice_stream_launch_host_func(a, sleep_cb, (void *)(uintptr_t)50, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_copy_from_host(a, x, 0, src, SIZE));
    CHECK_OK(sluice_stream_copy(b, y, 0, x, 0, SIZE));
    uint8_t *r = read_back(c, y, SIZE);
    if (r) {
        CHECK_EQ(check_pattern(r, SIZE, SEED, 0), -1);
        free(r);
    }
    CHECK(stream_waits(b) > wb);
    CHECK(stream_waits(c) > wc);
    CHECK_OK(sluice_buffer_free(x));
    CHECK_OK(sluice_buffer_free(y));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_stream_destroy(c));
    CHECK_OK(sluice_device_close(d));
}

TEST(buffer_free_while_in_use_on_other_stream) {
    enum { SIZE = 32768, SEED = 13 };
    static gate_t gate;
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_buffer_t x, y;
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &x)); /* x's free is ordered on a */
    REQUIRE_OK(sluice_buffer_alloc(b, SIZE, &y));
    static uint8_t src[SIZE];
    fill_pattern(src, SIZE, SEED);
    CHECK_OK(sluice_stream_copy_from_host(a, x, 0, src, SIZE));
    CHECK_OK(sluice_stream_memset(b, y, 0, 0, SIZE));
    REQUIRE(enqueue_gate_for_free(b, &gate));
    CHECK_OK(sluice_stream_copy(b, y, 0, x, 0, SIZE)); /* reads x on b, behind the gate */
    CHECK_OK(sluice_buffer_free(x));            /* x's memory must outlive that copy */
    /* reuse a's pool while x's copy is still pending (x's free is ordered on a after
     * b's read, so a now waits for the gate too: do not block on a here) */
    sluice_buffer_t z;
    bool have_z = CHECK_OK(sluice_buffer_alloc(a, SIZE, &z));
    if (have_z) CHECK_OK(sluice_stream_memset(a, z, 0, 0x77, SIZE));
    bool idle = true;
    CHECK_OK(sluice_stream_query(a, &idle));
    if (!under_sanitizer()) CHECK(!idle);
    gate_open(&gate);
    uint8_t *r = read_back(b, y, SIZE);
    if (r) {
        CHECK_EQ(check_pattern(r, SIZE, SEED, 0), -1);
        free(r);
    }
    if (have_z) {
        r = read_back(a, z, SIZE);
        if (r) {
            CHECK_EQ(check_fill(r, SIZE, 0x77), -1);
            free(r);
        }
        CHECK_OK(sluice_buffer_free(z));
    }
    CHECK_OK(sluice_buffer_free(y));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

TEST(registered_free_waits_for_pending_copies) {
    enum { SIZE = 4096 * 4, SEED = 17 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t dev;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &dev));
    static uint8_t src[SIZE];
    fill_pattern(src, SIZE, SEED);
    CHECK_OK(sluice_stream_copy_from_host(s, dev, 0, src, SIZE));
    uint8_t *mem = aligned_alloc(4096, SIZE);
    REQUIRE(mem != NULL);
    memset(mem, 0, SIZE);
    sluice_buffer_t reg;
    if (CHECK_OK(sluice_buffer_register_host(d, mem, SIZE, &reg))) {
        CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)40, NULL, NULL, 0, NULL, 0));
        CHECK_OK(sluice_stream_copy(s, reg, 0, dev, 0, SIZE));
        CHECK_OK(sluice_buffer_free(reg)); /* waits for the copy into mem */
        CHECK_EQ(check_pattern(mem, SIZE, SEED, 0), -1);
    }
    CHECK_OK(sluice_stream_synchronize(s));
    free(mem);
    CHECK_OK(sluice_buffer_free(dev));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(pinned_source_unmodified_until_copy_completes) {
    /* A pinned source freed right after its copy was enqueued goes back to the pool;
     * the next allocation of that block must not be handed out for host writes until
     * the copy has read it. */
    enum { SIZE = 16384, SEED = 23 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    CHECK_OK(sluice_device_pinned_set_limit(d, 256u << 20));
    CHECK_OK(sluice_device_pinned_trim(d)); /* so that pin2 gets pin's block back */
    sluice_buffer_t dev, pin;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &dev));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &pin));
    sluice_buffer_info_t pi;
    REQUIRE(buffer_info(pin, &pi));
    fill_pattern(pi.host_ptr, SIZE, SEED);
    CHECK_OK(sluice_stream_launch_host_func(s, sleep_cb, (void *)(uintptr_t)50, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_copy(s, dev, 0, pin, 0, SIZE));
    CHECK_OK(sluice_buffer_free(pin));
    sluice_pinned_stats_t before, after;
    CHECK_OK(sluice_device_pinned_stats(d, &before));
    sluice_buffer_t pin2;
    if (CHECK_OK(sluice_buffer_alloc_pinned(d, SIZE, &pin2))) {
        CHECK_OK(sluice_device_pinned_stats(d, &after));
        CHECK_EQ(after.hits, before.hits + 1); /* it is pin's block */
        sluice_buffer_info_t p2;
        if (buffer_info(pin2, &p2)) memset(p2.host_ptr, 0, SIZE); /* scribble at once */
        CHECK_OK(sluice_buffer_free(pin2));
    }
    uint8_t *r = read_back(s, dev, SIZE);
    if (r) {
        CHECK_EQ(check_pattern(r, SIZE, SEED, 0), -1);
        free(r);
    }
    CHECK_OK(sluice_buffer_free(dev));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(pinned_pool_stats_hits_misses_trim) {
    enum { SIZE = 100000 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    const uint64_t limit = 64u << 20;
    REQUIRE_OK(sluice_device_pinned_set_limit(d, limit));
    REQUIRE_OK(sluice_device_pinned_trim(d));
    sluice_pinned_stats_t s0, s1, s2, s3, s4, s5;
    REQUIRE_OK(sluice_device_pinned_stats(d, &s0));
    CHECK_EQ(s0.bytes_cached, 0);
    CHECK_EQ(s0.cache_limit, limit);

    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &b));
    REQUIRE_OK(sluice_device_pinned_stats(d, &s1));
    CHECK_EQ(s1.misses, s0.misses + 1);
    CHECK_EQ(s1.hits, s0.hits);
    uint64_t block = s1.bytes_in_use - s0.bytes_in_use;
    CHECK(block >= SIZE);
    CHECK(block < SIZE + (2u << 20)); /* rounded to a granularity, not to a power of two */
    CHECK_EQ(s1.bytes_cached, 0);
    CHECK_OK(sluice_buffer_free(b));

    REQUIRE_OK(sluice_device_pinned_stats(d, &s2));
    CHECK_EQ(s2.bytes_in_use, s0.bytes_in_use);
    CHECK_EQ(s2.bytes_cached, block);

    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &b)); /* served from the cache */
    REQUIRE_OK(sluice_device_pinned_stats(d, &s3));
    CHECK_EQ(s3.hits, s0.hits + 1);
    CHECK_EQ(s3.misses, s0.misses + 1);
    CHECK_EQ(s3.bytes_cached, 0);
    CHECK_EQ(s3.bytes_in_use, s0.bytes_in_use + block);
    CHECK_OK(sluice_buffer_free(b));

    CHECK_OK(sluice_device_pinned_trim(d));
    REQUIRE_OK(sluice_device_pinned_stats(d, &s4));
    CHECK_EQ(s4.bytes_cached, 0);
    CHECK_EQ(s4.bytes_in_use, s0.bytes_in_use);

    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &b)); /* the cache is empty: a miss */
    REQUIRE_OK(sluice_device_pinned_stats(d, &s5));
    CHECK_EQ(s5.misses, s0.misses + 2);
    CHECK_EQ(s5.hits, s0.hits + 1);

    /* a limit of 0 releases freed blocks at once */
    CHECK_OK(sluice_device_pinned_set_limit(d, 0));
    CHECK_OK(sluice_buffer_free(b));
    REQUIRE_OK(sluice_device_pinned_stats(d, &s5));
    CHECK_EQ(s5.cache_limit, 0);
    CHECK_EQ(s5.bytes_cached, 0);
    CHECK_EQ(s5.bytes_in_use, s0.bytes_in_use);

    /* a lower limit trims what is cached down to it */
    CHECK_OK(sluice_device_pinned_set_limit(d, limit));
    sluice_buffer_t many[4];
    for (int i = 0; i < 4; i++) REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &many[i]));
    for (int i = 0; i < 4; i++) CHECK_OK(sluice_buffer_free(many[i]));
    REQUIRE_OK(sluice_device_pinned_stats(d, &s5));
    CHECK_EQ(s5.bytes_cached, 4 * block);
    CHECK_OK(sluice_device_pinned_set_limit(d, 2 * block));
    REQUIRE_OK(sluice_device_pinned_stats(d, &s5));
    CHECK(s5.bytes_cached <= 2 * block);
    CHECK_EQ(s5.cache_limit, 2 * block);

    CHECK_OK(sluice_device_pinned_set_limit(d, 256u << 20)); /* the default */
    CHECK_OK(sluice_device_pinned_trim(d));
    CHECK_OK(sluice_device_close(d));
}

TEST(zero_length_copies_are_noops) {
    enum { SIZE = 256, SEED = 31 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t a, b;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &a));
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    uint8_t src[SIZE];
    fill_pattern(src, SIZE, SEED);
    CHECK_OK(sluice_stream_copy_from_host(s, a, 0, src, SIZE));
    CHECK_OK(sluice_stream_memset(s, b, 0, 0x33, SIZE));
    CHECK_OK(sluice_stream_copy(s, b, 0, a, 0, 0));
    CHECK_OK(sluice_stream_copy(s, b, SIZE, a, SIZE, 0)); /* an empty range at the very end */
    CHECK_OK(sluice_stream_copy(s, a, 5, b, 9, 0));
    CHECK_OK(sluice_stream_copy_from_host(s, b, 10, src, 0));
    CHECK_OK(sluice_stream_copy_from_host(s, b, 10, NULL, 0)); /* NULL is fine with length 0 */
    uint8_t dst[4] = {1, 2, 3, 4};
    CHECK_OK(sluice_stream_copy_to_host(s, dst, a, 3, 0));
    CHECK_OK(sluice_stream_copy_to_host(s, NULL, a, 3, 0));
    CHECK(dst[0] == 1 && dst[1] == 2 && dst[2] == 3 && dst[3] == 4);
    CHECK_OK(sluice_stream_memset(s, a, 7, 0x00, 0));
    uint8_t *ra = read_back(s, a, SIZE), *rb = read_back(s, b, SIZE);
    if (ra) CHECK_EQ(check_pattern(ra, SIZE, SEED, 0), -1);
    if (rb) CHECK_EQ(check_fill(rb, SIZE, 0x33), -1);
    free(ra);
    free(rb);
    CHECK_OK(sluice_buffer_free(a));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(buffer_outlives_its_home_stream) {
    enum { SIZE = 4096, SEED = 61 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_buffer_t x;
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &x));
    CHECK_OK(sluice_stream_destroy(a)); /* x's free stays ordered on a's stream */
    uint8_t src[SIZE], dst[SIZE];
    fill_pattern(src, SIZE, SEED);
    CHECK_OK(sluice_stream_copy_from_host(b, x, 0, src, SIZE));
    CHECK_OK(sluice_stream_copy_to_host(b, dst, x, 0, SIZE));
    CHECK(memcmp(src, dst, SIZE) == 0);
    CHECK_OK(sluice_buffer_free(x));
    CHECK_OK(sluice_stream_synchronize(b));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}

/* ---- a failed host callback is reported at its stream's next synchronize, whatever
 * else waited on that stream's work in between ---- */

TEST(callback_failure_not_swallowed_by_registered_free) {
    enum { SIZE = 4096 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    CHECK_OK(sluice_stream_memset(s, b, 0, 0x6b, SIZE));
    uint8_t *mem = aligned_alloc(4096, SIZE);
    REQUIRE(mem != NULL);
    sluice_buffer_t r;
    if (CHECK_OK(sluice_buffer_register_host(d, mem, SIZE, &r))) {
        CHECK_OK(sluice_stream_launch_host_func(s, return_cb, (void *)(intptr_t)9, NULL, NULL, 0, NULL, 0));
        CHECK_OK(sluice_stream_copy(s, r, 0, b, 0, SIZE));
        CHECK_OK(sluice_buffer_free(r)); /* waits for the copy on s */
        CHECK_EQ(check_fill(mem, SIZE, 0x6b), -1);
        CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_CALLBACK_FAILED);
    }
    CHECK_OK(sluice_stream_synchronize(s));
    free(mem);
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(callback_failure_not_swallowed_by_pinned_trim) {
    enum { SIZE = 8192 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    CHECK_OK(sluice_device_pinned_set_limit(d, 256u << 20));
    sluice_buffer_t b, p;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &p));
    CHECK_OK(sluice_stream_launch_host_func(s, return_cb, (void *)(intptr_t)9, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_copy(s, b, 0, p, 0, SIZE));
    CHECK_OK(sluice_buffer_free(p)); /* cached with its pending copy */
    CHECK_OK(sluice_device_pinned_trim(d)); /* waits for that copy */
    CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_CALLBACK_FAILED);
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(pinned_reuse_unaffected_by_callback_failure) {
    /* a cached pinned block whose last copy ran on a stream with a failed callback is
     * handed out normally: the failure belongs to that stream's next synchronize, not
     * to an unrelated allocation (which must not lose the block either) */
    enum { SIZE = 8192 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    CHECK_OK(sluice_device_pinned_set_limit(d, 256u << 20));
    CHECK_OK(sluice_device_pinned_trim(d));
    sluice_pinned_stats_t st0, st1;
    REQUIRE_OK(sluice_device_pinned_stats(d, &st0));
    sluice_buffer_t b, p;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &b));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, SIZE, &p));
    CHECK_OK(sluice_stream_launch_host_func(s, return_cb, (void *)(intptr_t)9, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_copy(s, b, 0, p, 0, SIZE));
    CHECK_OK(sluice_buffer_free(p));
    sluice_buffer_t p2 = {0};
    CHECK_OK(sluice_buffer_alloc_pinned(d, SIZE, &p2)); /* the cached block */
    CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_CALLBACK_FAILED);
    if (p2.bits) CHECK_OK(sluice_buffer_free(p2));
    REQUIRE_OK(sluice_device_pinned_stats(d, &st1));
    CHECK_EQ(st1.bytes_in_use, st0.bytes_in_use); /* no block went missing */
    CHECK_OK(sluice_device_pinned_trim(d));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(stream_ordered_alloc_then_use_on_other_stream) {
    /* X is read on A behind a gate, then freed (the free is ordered on A after that
     * read) and Z is allocated on A: the stream-ordered pool may hand Z X's memory,
     * valid only from that point of A on. Writing Z on B must therefore not clobber
     * X before A's read ran. */
    enum { SIZE = 1 << 20, SEED = 71 };
    static gate_t gate;
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t a, b;
    REQUIRE(new_stream(d, &a));
    REQUIRE(new_stream(d, &b));
    sluice_buffer_t x, y, z;
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &x));
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &y));
    uint8_t *src = malloc(SIZE);
    REQUIRE(src != NULL);
    fill_pattern(src, SIZE, SEED);
    CHECK_OK(sluice_stream_copy_from_host(a, x, 0, src, SIZE));
    CHECK_OK(sluice_stream_synchronize(a));
    sluice_buffer_info_t xi, zi;
    REQUIRE_OK(sluice_buffer_info(x, &xi));
    REQUIRE(enqueue_gate_for_free(a, &gate));
    CHECK_OK(sluice_stream_copy(a, y, 0, x, 0, SIZE));
    CHECK_OK(sluice_buffer_free(x));
    REQUIRE_OK(sluice_buffer_alloc(a, SIZE, &z));
    if (CHECK_OK(sluice_buffer_info(z, &zi)) && zi.device_ptr == xi.device_ptr)
        printf("    note: z reuses x's memory\n");
    CHECK_OK(sluice_stream_memset(b, z, 0, 0x00, SIZE));
    sleep_ms(20);
    gate_open(&gate);
    uint8_t *r = read_back(a, y, SIZE);
    if (r) {
        CHECK_EQ(check_pattern(r, SIZE, SEED, 0), -1);
        free(r);
    }
    r = read_back(b, z, SIZE);
    if (r) {
        CHECK_EQ(check_fill(r, SIZE, 0x00), -1);
        free(r);
    }
    free(src);
    CHECK_OK(sluice_buffer_free(y));
    CHECK_OK(sluice_buffer_free(z));
    CHECK_OK(sluice_stream_destroy(a));
    CHECK_OK(sluice_stream_destroy(b));
    CHECK_OK(sluice_device_close(d));
}
