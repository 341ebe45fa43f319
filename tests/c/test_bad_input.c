/* Bad input: NULL pointers, NULL arrays, stale/forged/wrong-type handles, double
 * destroys, out-of-range copies, zero sizes, unsupported operations. */
#include "helpers.h"

/* Fixture: one of every kind of object. */
typedef struct {
    sluice_device_t dev;
    sluice_stream_t s;
    sluice_event_t ev;
    sluice_buffer_t buf;
    sluice_buffer_t pin;
    sluice_sync_t sync;
} fx_t;

static bool fx_open(fx_t *f) {
    memset(f, 0, sizeof *f);
    if (!open_dev(&f->dev)) return false;
    if (!new_stream(f->dev, &f->s)) return false;
    if (!CHECK_OK(sluice_event_record(f->s, SLUICE_EVENT_TIMING, &f->ev))) return false;
    if (!CHECK_OK(sluice_buffer_alloc(f->s, 64, &f->buf))) return false;
    if (!CHECK_OK(sluice_buffer_alloc_pinned(f->dev, 64, &f->pin))) return false;
    if (!CHECK_OK(sluice_sync_create(&f->sync))) return false;
    return CHECK_OK(sluice_stream_synchronize(f->s));
}

static void fx_close(fx_t *f) {
    if (f->sync.bits) CHECK_OK(sluice_sync_destroy(f->sync));
    if (f->pin.bits) CHECK_OK(sluice_buffer_free(f->pin));
    if (f->buf.bits) CHECK_OK(sluice_buffer_free(f->buf));
    if (f->ev.bits) CHECK_OK(sluice_event_destroy(f->ev));
    if (f->s.bits) CHECK_OK(sluice_stream_destroy(f->s));
    if (f->dev.bits) CHECK_OK(sluice_device_close(f->dev));
}

/* Asserts a NULL_ARGUMENT error naming the function, and that no handle appeared. */
#define CHECK_NULL_OUT(fn, ...)                                                        \
    do {                                                                               \
        uint64_t live_ = sluice_live_handles();                                        \
        CHECK_ERR_MSG(fn(__VA_ARGS__), SLUICE_ERROR_NULL_ARGUMENT, #fn);               \
        if (!CHECK_EQ(sluice_live_handles(), live_)) FAIL("%s created a handle", #fn); \
    } while (0)

TEST(null_out_pointers) {
    fx_t f;
    if (!fx_open(&f)) {
        fx_close(&f);
        return;
    }
    int32_t i32;
    uint64_t u64;
    static uint8_t host[8192] __attribute__((aligned(4096)));
    CHECK_NULL_OUT(sluice_device_count, SLUICE_BACKEND_HOST, NULL);
    CHECK_NULL_OUT(sluice_device_open, SLUICE_BACKEND_HOST, 0, NULL);
    CHECK_NULL_OUT(sluice_device_open_default, NULL);
    CHECK_NULL_OUT(sluice_device_props, f.dev, NULL);
    CHECK_NULL_OUT(sluice_device_priority_range, f.dev, NULL, &i32);
    CHECK_NULL_OUT(sluice_device_priority_range, f.dev, &i32, NULL);
    CHECK_NULL_OUT(sluice_device_priority_range, f.dev, NULL, NULL);
    CHECK_NULL_OUT(sluice_device_pinned_stats, f.dev, NULL);
    CHECK_NULL_OUT(sluice_stream_create, f.dev, 0, 0, NULL);
    CHECK_NULL_OUT(sluice_stream_create, f.dev, 0xff, 0, NULL); /* NULL wins over flags */
    void *raw = NULL;
    CHECK_OK(sluice_stream_raw(f.s, &raw));
    CHECK_NULL_OUT(sluice_stream_wrap_external, f.dev, raw, NULL);
    CHECK_NULL_OUT(sluice_stream_raw, f.s, NULL);
    CHECK_NULL_OUT(sluice_stream_query, f.s, NULL);
    CHECK_NULL_OUT(sluice_stream_stats, f.s, NULL);
    CHECK_NULL_OUT(sluice_event_record, f.s, 0, NULL);
    CHECK_NULL_OUT(sluice_event_record, f.s, SLUICE_EVENT_TIMING, NULL);
    CHECK_NULL_OUT(sluice_event_query, f.ev, NULL);
    CHECK_NULL_OUT(sluice_event_elapsed_ms, f.ev, f.ev, NULL);
    CHECK_NULL_OUT(sluice_event_sequence, f.ev, NULL, &u64);
    CHECK_NULL_OUT(sluice_event_sequence, f.ev, &u64, NULL);
    CHECK_NULL_OUT(sluice_buffer_alloc, f.s, 64, NULL);
    CHECK_NULL_OUT(sluice_buffer_alloc_pinned, f.dev, 64, NULL);
    CHECK_NULL_OUT(sluice_buffer_register_host, f.dev, host, sizeof host, NULL);
    CHECK_NULL_OUT(sluice_buffer_info, f.buf, NULL);
    CHECK_NULL_OUT(sluice_buffer_sync, f.buf, NULL);
    CHECK_NULL_OUT(sluice_module_load, f.dev, "x", 1, NULL);
    CHECK_NULL_OUT(sluice_module_get_function, (sluice_module_t){0}, "kernel", NULL);
    CHECK_NULL_OUT(sluice_sync_create, NULL);
    CHECK_NULL_OUT(sluice_sync_info, f.sync, NULL);
    uint64_t w = stream_waits(f.s);
    CHECK_NULL_OUT(sluice_op_begin, f.s, NULL, 0, &f.sync, 1, NULL);
    CHECK_EQ(stream_waits(f.s), w);
    /* nothing was taken from the pinned pool by the failed pinned allocation */
    sluice_pinned_stats_t a, b;
    CHECK_OK(sluice_device_pinned_stats(f.dev, &a));
    CHECK_NULL_OUT(sluice_buffer_alloc_pinned, f.dev, 100000, NULL);
    CHECK_OK(sluice_device_pinned_stats(f.dev, &b));
    CHECK_EQ(b.bytes_in_use, a.bytes_in_use);
    CHECK_EQ(b.hits + b.misses, a.hits + a.misses);
    fx_close(&f);
}

TEST(null_arrays_with_nonzero_counts) {
    fx_t f;
    if (!fx_open(&f)) {
        fx_close(&f);
        return;
    }
    static atomic_int ran;
    atomic_store(&ran, 0);
    uint64_t live = sluice_live_handles();
    CHECK_ERR_MSG(sluice_stream_launch_host_func(f.s, set_flag_cb, &ran, NULL, NULL, 1, NULL, 0),
                  SLUICE_ERROR_NULL_ARGUMENT, "reads");
    CHECK_ERR_MSG(sluice_stream_launch_host_func(f.s, set_flag_cb, &ran, NULL, NULL, 0, NULL, 2),
                  SLUICE_ERROR_NULL_ARGUMENT, "writes");
    sluice_op_t op = {0x42};
    CHECK_ERR_MSG(sluice_op_begin(f.s, NULL, 1, NULL, 0, &op), SLUICE_ERROR_NULL_ARGUMENT, "reads");
    CHECK_ERR_MSG(sluice_op_begin(f.s, NULL, 0, NULL, 3, &op), SLUICE_ERROR_NULL_ARGUMENT, "writes");
    CHECK_EQ(op.bits, 0x42);
    CHECK_ERR_MSG(sluice_stream_copy_from_host(f.s, f.buf, 0, NULL, 10), SLUICE_ERROR_NULL_ARGUMENT,
                  "sluice_stream_copy_from_host");
    CHECK_ERR_MSG(sluice_stream_copy_to_host(f.s, NULL, f.buf, 0, 10), SLUICE_ERROR_NULL_ARGUMENT,
                  "sluice_stream_copy_to_host");
    sluice_buffer_t b = {0x43};
    CHECK_ERR(sluice_buffer_register_host(f.dev, NULL, 4096, &b), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_EQ(b.bits, 0x43);
    sluice_module_t m = {0x44};
    CHECK_ERR(sluice_module_load(f.dev, NULL, 100, &m), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_EQ(m.bits, 0x44);
    sluice_function_t fn = {0x45};
    CHECK_ERR(sluice_module_get_function((sluice_module_t){0x0700000100000001ull}, NULL, &fn),
              SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR_MSG(sluice_stream_launch(f.s, fn, NULL, NULL, 0, NULL, 0, NULL, 0),
                  SLUICE_ERROR_NULL_ARGUMENT, "dims");
    sluice_launch_dims_t dims = {{1, 1, 1}, {1, 1, 1}, 0};
    CHECK_ERR_MSG(sluice_stream_launch(f.s, fn, &dims, NULL, 3, NULL, 0, NULL, 0),
                  SLUICE_ERROR_NULL_ARGUMENT, "args");
    CHECK_ERR(sluice_stream_launch(f.s, fn, &dims, NULL, 0, NULL, 2, NULL, 0), SLUICE_ERROR_INVALID_HANDLE);
    /* a count whose byte size overflows is refused before anything is read */
    CHECK_ERR(sluice_stream_launch_host_func(f.s, set_flag_cb, &ran, NULL, &f.sync, SIZE_MAX, NULL, 0),
              SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR(sluice_op_begin(f.s, NULL, 0, &f.sync, SIZE_MAX / 2, &op), SLUICE_ERROR_OUT_OF_RANGE);
    /* a bad handle inside an array is named by its index; nothing is enqueued */
    sluice_sync_t mixed[2] = {f.sync, {0x0400000100777777ull}};
    CHECK_ERR_MSG(sluice_stream_launch_host_func(f.s, set_flag_cb, &ran, NULL, NULL, 0, mixed, 2),
                  SLUICE_ERROR_INVALID_HANDLE, "writes[1]");
    CHECK_ERR_MSG(sluice_op_begin(f.s, mixed, 2, NULL, 0, &op), SLUICE_ERROR_INVALID_HANDLE,
                  "reads[1]");
    CHECK_OK(sluice_stream_synchronize(f.s));
    CHECK_EQ(atomic_load(&ran), 0);
    sluice_sync_info_t info;
    if (CHECK_OK(sluice_sync_info(f.sync, &info))) {
        CHECK_EQ(info.reader_count, 0);
        CHECK_EQ(info.has_writer, 0);
    }
    CHECK_EQ(sluice_live_handles(), live);
    fx_close(&f);
}

static void bad_handle_result(const char *what, uint64_t bits, sluice_error_t *err) {
    if (err == NULL) {
        FAIL("%s accepted handle 0x%016llx", what, (unsigned long long)bits);
        return;
    }
    if (sluice_error_code(err) != SLUICE_ERROR_INVALID_HANDLE)
        FAIL("%s with 0x%016llx: %s: %s", what, (unsigned long long)bits,
             sluice_error_code_name(sluice_error_code(err)), sluice_error_message(err));
    else if (bits != 0 && !msg_names_handle(sluice_error_message(err), bits))
        FAIL("%s: message does not name handle 0x%llx: %s", what, (unsigned long long)bits,
             sluice_error_message(err));
    sluice_error_free(err);
}

/* Passes `bits` as the handle of every type to every call taking that type (except
 * type `skip`: `bits` is a live handle of that type). Each call must fail with
 * INVALID_HANDLE and name the handle (unless bits is 0). Type tags here are only
 * labels: 1 device, 2 stream, 3 event, 4 sync, 5 op, 6 buffer, 7 module, 8 function. */
static void check_bad_handles(uint64_t bits, int skip) {
    sluice_device_t dev = {bits};
    sluice_stream_t s = {bits};
    sluice_event_t e = {bits};
    sluice_buffer_t b = {bits};
    sluice_sync_t y = {bits};
    sluice_op_t op = {bits};
    sluice_module_t m = {bits};
    sluice_function_t fn = {bits};
    uint8_t host[16] = {0};
    bool bo;
    uint64_t u, u2;
    float fl;
    void *raw;
    sluice_device_props_t props;
    sluice_stream_stats_t sst;
    sluice_buffer_info_t bi;
    sluice_sync_info_t si;
    sluice_pinned_stats_t ps;
    sluice_stream_t s_out;
    sluice_event_t e_out;
    sluice_buffer_t b_out;
    sluice_sync_t y_out;
    sluice_op_t op_out;
    sluice_function_t fn_out;
    sluice_module_t m_out;
    sluice_launch_dims_t dims = {{1, 1, 1}, {1, 1, 1}, 0};
    int32_t i1, i2;
#define BH(tag, call)                                                  \
    do {                                                               \
        if ((tag) != skip) bad_handle_result(#call, bits, (call));     \
    } while (0)
    BH(1, sluice_device_props(dev, &props));
    BH(1, sluice_device_priority_range(dev, &i1, &i2));
    BH(1, sluice_device_wait_all(dev));
    BH(1, sluice_device_pinned_stats(dev, &ps));
    BH(1, sluice_device_pinned_trim(dev));
    BH(1, sluice_device_pinned_set_limit(dev, 1));
    BH(1, sluice_stream_create(dev, 0, 0, &s_out));
    BH(1, sluice_stream_wrap_external(dev, (void *)(uintptr_t)0x1000, &s_out));
    BH(1, sluice_buffer_alloc_pinned(dev, 64, &b_out));
    BH(1, sluice_buffer_register_host(dev, host, sizeof host, &b_out));
    BH(1, sluice_module_load(dev, "x", 1, &m_out));
    BH(2, sluice_stream_raw(s, &raw));
    BH(2, sluice_stream_query(s, &bo));
    BH(2, sluice_stream_synchronize(s));
    BH(2, sluice_stream_set_label(s, "x"));
    BH(2, sluice_stream_stats(s, &sst));
    BH(2, sluice_stream_launch_host_func(s, return_cb, NULL, NULL, NULL, 0, NULL, 0));
    BH(2, sluice_event_record(s, 0, &e_out));
    BH(2, sluice_buffer_alloc(s, 64, &b_out));
    BH(2, sluice_op_begin(s, NULL, 0, NULL, 0, &op_out));
    BH(3, sluice_event_query(e, &bo));
    BH(3, sluice_event_synchronize(e));
    BH(3, sluice_event_sequence(e, &u, &u2));
    BH(3, sluice_event_elapsed_ms(e, e, &fl));
    BH(4, sluice_sync_info(y, &si));
    BH(4, sluice_sync_wait_read(y));
    BH(4, sluice_sync_wait_write(y));
    BH(6, sluice_buffer_info(b, &bi));
    BH(6, sluice_buffer_sync(b, &y_out));
    BH(7, sluice_module_get_function(m, "k", &fn_out));
    BH(8, sluice_function_set_programmatic_launch(fn, true));
    BH(8, sluice_function_set_max_dynamic_shared_memory(fn, 65536));
    BH(8, sluice_function_set_non_portable_cluster_size_allowed(fn, true));
    /* destroys */
    BH(1, sluice_device_close(dev));
    BH(2, sluice_stream_destroy(s));
    BH(3, sluice_event_destroy(e));
    BH(4, sluice_sync_destroy(y));
    BH(5, sluice_op_end(op));
    BH(6, sluice_buffer_free(b));
    BH(7, sluice_module_unload(m));
    BH(8, sluice_function_destroy(fn));
    /* calls taking several handles, all of them bad */
    if (skip != 2 && skip != 3) BH(0, sluice_stream_wait_event(s, e));
    if (skip != 2 && skip != 6) {
        BH(0, sluice_stream_memset(s, b, 0, 0, 1));
        BH(0, sluice_stream_copy(s, b, 0, b, 0, 1));
        BH(0, sluice_stream_copy_from_host(s, b, 0, host, 1));
        BH(0, sluice_stream_copy_to_host(s, host, b, 0, 1));
    }
    if (skip != 2 && skip != 4) {
        BH(0, sluice_stream_launch_host_func(s, return_cb, NULL, NULL, &y, 1, NULL, 0));
        BH(0, sluice_op_begin(s, NULL, 0, &y, 1, &op_out));
    }
    if (skip != 2 && skip != 8) BH(0, sluice_stream_launch(s, fn, &dims, NULL, 0, NULL, 0, NULL, 0));
#undef BH
}

TEST(zero_and_all_ones_handles) {
    uint64_t live = sluice_live_handles();
    check_bad_handles(0, -1);
    check_bad_handles(UINT64_MAX, -1);
    CHECK_EQ(sluice_live_handles(), live);
}

TEST(forged_random_handles) {
    uint64_t live = sluice_live_handles();
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int f0 = st_failures();
    for (int i = 0; i < 3000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t bits = x;
        if (i % 4 == 1) bits = (bits & 0x00ffffffffffffffull) | ((uint64_t)(1 + i % 8) << 56);
        if (i % 4 == 2) bits &= 0xff00ffff000fffffull; /* small generation and index */
        check_bad_handles(bits, -1);
        if (st_failures() > f0) break; /* one report is enough */ /* one report is enough */
    }
    CHECK_EQ(sluice_live_handles(), live);
}

TEST(handle_bits_of_another_type) {
    fx_t f;
    if (!fx_open(&f)) {
        fx_close(&f);
        return;
    }
    uint64_t live = sluice_live_handles();
    /* each live handle's bits, passed as every other type */
    check_bad_handles(f.dev.bits, 1);
    check_bad_handles(f.s.bits, 2);
    check_bad_handles(f.ev.bits, 3);
    check_bad_handles(f.sync.bits, 4);
    check_bad_handles(f.buf.bits, 6);
    CHECK_EQ(sluice_live_handles(), live);
    /* and the originals still work */
    CHECK_OK(sluice_stream_synchronize(f.s));
    CHECK_OK(sluice_event_synchronize(f.ev));
    sluice_buffer_info_t bi;
    CHECK_OK(sluice_buffer_info(f.buf, &bi));
    fx_close(&f);
}

TEST(single_bit_flips_of_live_handles) {
    fx_t f;
    if (!fx_open(&f)) {
        fx_close(&f);
        return;
    }
    for (int bit = 0; bit < 64; bit++) {
        uint64_t m = 1ull << bit;
        sluice_stream_t s = {f.s.bits ^ m};
        sluice_event_t e = {f.ev.bits ^ m};
        sluice_buffer_t b = {f.buf.bits ^ m};
        sluice_sync_t y = {f.sync.bits ^ m};
        if (!CHECK_ERR(sluice_stream_synchronize(s), SLUICE_ERROR_INVALID_HANDLE)) FAIL("bit %d", bit);
        if (!CHECK_ERR(sluice_event_synchronize(e), SLUICE_ERROR_INVALID_HANDLE)) FAIL("bit %d", bit);
        sluice_buffer_info_t bi;
        if (b.bits != f.pin.bits && /* the fixture's other buffer */
            !CHECK_ERR(sluice_buffer_info(b, &bi), SLUICE_ERROR_INVALID_HANDLE))
            FAIL("bit %d", bit);
        sluice_sync_info_t si;
        if (!CHECK_ERR(sluice_sync_info(y, &si), SLUICE_ERROR_INVALID_HANDLE)) FAIL("bit %d", bit);
    }
    fx_close(&f);
}

TEST(stale_handles_after_destroy) {
    enum { N = 64 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t dead[N];
    sluice_stream_t live_s[N];
    for (int i = 0; i < N; i++) {
        REQUIRE(new_stream(d, &dead[i]));
        CHECK_OK(sluice_stream_destroy(dead[i]));
        /* a new stream may reuse the slot; the old handle must stay dead */
        REQUIRE(new_stream(d, &live_s[i]));
        CHECK(live_s[i].bits != dead[i].bits);
    }
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < N; j++) CHECK(dead[i].bits != live_s[j].bits);
        CHECK_ERR(sluice_stream_synchronize(dead[i]), SLUICE_ERROR_INVALID_HANDLE);
        CHECK_ERR(sluice_stream_destroy(dead[i]), SLUICE_ERROR_INVALID_HANDLE);
        CHECK_OK(sluice_stream_synchronize(live_s[i]));
    }
    /* the other types */
    sluice_stream_t s = live_s[0];
    sluice_event_t e;
    REQUIRE_OK(sluice_event_record(s, 0, &e));
    CHECK_OK(sluice_event_destroy(e));
    bool bo;
    CHECK_ERR_MSG(sluice_event_query(e, &bo), SLUICE_ERROR_INVALID_HANDLE, "sluice_event_query");
    CHECK_ERR(sluice_stream_wait_event(s, e), SLUICE_ERROR_INVALID_HANDLE);
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 16, &b));
    CHECK_OK(sluice_buffer_free(b));
    uint8_t h[16];
    CHECK_ERR(sluice_stream_copy_to_host(s, h, b, 0, 16), SLUICE_ERROR_INVALID_HANDLE);
    sluice_buffer_t b2;
    REQUIRE_OK(sluice_buffer_alloc(s, 16, &b2));
    CHECK_ERR_MSG(sluice_stream_copy(s, b2, 0, b, 0, 16), SLUICE_ERROR_INVALID_HANDLE, "src");
    CHECK_ERR_MSG(sluice_stream_copy(s, b, 0, b2, 0, 16), SLUICE_ERROR_INVALID_HANDLE, "dst");
    CHECK_OK(sluice_buffer_free(b2));
    sluice_sync_t y;
    REQUIRE_OK(sluice_sync_create(&y));
    CHECK_OK(sluice_sync_destroy(y));
    CHECK_ERR(sluice_stream_launch_host_func(s, return_cb, NULL, NULL, &y, 1, NULL, 0),
              SLUICE_ERROR_INVALID_HANDLE);
    sluice_op_t op;
    REQUIRE_OK(sluice_op_begin(s, NULL, 0, NULL, 0, &op));
    CHECK_OK(sluice_op_end(op));
    CHECK_ERR(sluice_op_end(op), SLUICE_ERROR_INVALID_HANDLE);
    for (int i = 0; i < N; i++) CHECK_OK(sluice_stream_destroy(live_s[i]));
    CHECK_OK(sluice_device_close(d));
}

TEST(double_destroy_every_type) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_event_t e;
    REQUIRE_OK(sluice_event_record(s, 0, &e));
    sluice_buffer_t b, p;
    REQUIRE_OK(sluice_buffer_alloc(s, 16, &b));
    REQUIRE_OK(sluice_buffer_alloc_pinned(d, 16, &p));
    static uint8_t host[4096] __attribute__((aligned(4096)));
    sluice_buffer_t r;
    REQUIRE_OK(sluice_buffer_register_host(d, host, sizeof host, &r));
    sluice_sync_t y, by;
    REQUIRE_OK(sluice_sync_create(&y));
    REQUIRE_OK(sluice_buffer_sync(b, &by));
    sluice_op_t op;
    REQUIRE_OK(sluice_op_begin(s, NULL, 0, &y, 1, &op));
    sluice_device_t d2;
    REQUIRE(open_dev(&d2));

    CHECK_OK(sluice_op_end(op));
    CHECK_ERR_MSG(sluice_op_end(op), SLUICE_ERROR_INVALID_HANDLE, "sluice_op_end");
    CHECK_OK(sluice_event_destroy(e));
    CHECK_ERR_MSG(sluice_event_destroy(e), SLUICE_ERROR_INVALID_HANDLE, "sluice_event_destroy");
    CHECK_OK(sluice_sync_destroy(y));
    CHECK_ERR_MSG(sluice_sync_destroy(y), SLUICE_ERROR_INVALID_HANDLE, "sluice_sync_destroy");
    CHECK_OK(sluice_sync_destroy(by));
    CHECK_ERR(sluice_sync_destroy(by), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(b));
    CHECK_ERR_MSG(sluice_buffer_free(b), SLUICE_ERROR_INVALID_HANDLE, "sluice_buffer_free");
    CHECK_OK(sluice_buffer_free(p));
    CHECK_ERR(sluice_buffer_free(p), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(r));
    CHECK_ERR(sluice_buffer_free(r), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_ERR_MSG(sluice_stream_destroy(s), SLUICE_ERROR_INVALID_HANDLE, "sluice_stream_destroy");
    CHECK_OK(sluice_device_close(d2));
    CHECK_ERR(sluice_device_close(d2), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_device_close(d));
    CHECK_ERR_MSG(sluice_device_close(d), SLUICE_ERROR_INVALID_HANDLE, "sluice_device_close");
}

TEST(out_of_range_copies_change_nothing) {
    enum { SIZE = 64 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t dst, src;
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &dst));
    REQUIRE_OK(sluice_buffer_alloc(s, SIZE, &src));
    uint8_t pat[SIZE];
    fill_pattern(pat, SIZE, 51);
    CHECK_OK(sluice_stream_copy_from_host(s, dst, 0, pat, SIZE));
    CHECK_OK(sluice_stream_memset(s, src, 0, 0xc3, SIZE));
    uint8_t big[2 * SIZE];
    memset(big, 0x99, sizeof big);
    const struct {
        size_t doff, soff, len;
    } bad[] = {
        {SIZE - 4, 0, 8},        /* dst end past the buffer */
        {0, SIZE - 4, 8},        /* src end past the buffer */
        {SIZE + 1, 0, 0},        /* empty range starting past the end */
        {SIZE, 0, 1},            /* starts at the end */
        {0, 0, SIZE + 1},        /* longer than both */
        {SIZE_MAX, 0, 1},        /* offset near SIZE_MAX */
        {0, SIZE_MAX, 1},
        {1, 0, SIZE_MAX},        /* offset + len overflows */
        {SIZE_MAX - 3, 0, 8},    /* offset + len wraps to a small number */
        {0, SIZE_MAX - 3, 8},
        {SIZE_MAX, SIZE_MAX, SIZE_MAX},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (!CHECK_ERR_MSG(sluice_stream_copy(s, dst, bad[i].doff, src, bad[i].soff, bad[i].len),
                           SLUICE_ERROR_OUT_OF_RANGE, "sluice_stream_copy"))
            FAIL("case %zu", i);
        bool dst_bad = bad[i].doff > SIZE || bad[i].len > SIZE - bad[i].doff;
        if (dst_bad &&
            !CHECK_ERR(sluice_stream_memset(s, dst, bad[i].doff, 0, bad[i].len), SLUICE_ERROR_OUT_OF_RANGE))
            FAIL("memset case %zu", i);
    }
    /* pageable copies: lengths bounded by the host arrays we own */
    const struct {
        size_t off, len;
    } hb[] = {{SIZE - 4, 8}, {SIZE + 1, 1}, {SIZE, 1}, {SIZE_MAX, 1}, {SIZE_MAX - 3, 8}, {0, SIZE + 1}};
    for (size_t i = 0; i < sizeof hb / sizeof hb[0]; i++) {
        if (!CHECK_ERR_MSG(sluice_stream_copy_from_host(s, dst, hb[i].off, big, hb[i].len),
                           SLUICE_ERROR_OUT_OF_RANGE, "sluice_stream_copy_from_host"))
            FAIL("from_host case %zu", i);
        if (!CHECK_ERR_MSG(sluice_stream_copy_to_host(s, big, src, hb[i].off, hb[i].len),
                           SLUICE_ERROR_OUT_OF_RANGE, "sluice_stream_copy_to_host"))
            FAIL("to_host case %zu", i);
    }
    /* a host length no array can have is refused before any slice is formed */
    CHECK_ERR_MSG(sluice_stream_copy_to_host(s, big, src, 0, SIZE_MAX), SLUICE_ERROR_OUT_OF_RANGE,
                  "too large");
    CHECK_ERR_MSG(sluice_stream_copy_from_host(s, dst, 0, big, SIZE_MAX), SLUICE_ERROR_OUT_OF_RANGE,
                  "too large");
    CHECK_EQ(check_fill(big, sizeof big, 0x99), -1); /* the host destination is untouched */
    uint8_t r[SIZE];
    CHECK_OK(sluice_stream_copy_to_host(s, r, dst, 0, SIZE));
    CHECK_EQ(check_pattern(r, SIZE, 51, 0), -1); /* the device destination too */
    /* a pinned destination, checked through its host pointer */
    sluice_buffer_t pin;
    if (CHECK_OK(sluice_buffer_alloc_pinned(d, SIZE, &pin))) {
        sluice_buffer_info_t pi;
        if (CHECK_OK(sluice_buffer_info(pin, &pi))) {
            memset(pi.host_ptr, 0x5e, SIZE);
            CHECK_ERR(sluice_stream_copy(s, pin, 1, src, 0, SIZE), SLUICE_ERROR_OUT_OF_RANGE);
            CHECK_ERR(sluice_stream_copy(s, pin, SIZE_MAX - 10, src, 0, 16), SLUICE_ERROR_OUT_OF_RANGE);
            CHECK_OK(sluice_stream_synchronize(s));
            CHECK_EQ(check_fill(pi.host_ptr, SIZE, 0x5e), -1);
        }
        CHECK_OK(sluice_buffer_free(pin));
    }
    CHECK_OK(sluice_buffer_free(dst));
    CHECK_OK(sluice_buffer_free(src));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(zero_size_allocations) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    uint64_t live = sluice_live_handles();
    sluice_buffer_t b = {0x31};
    CHECK_ERR_MSG(sluice_buffer_alloc(s, 0, &b), SLUICE_ERROR_INVALID_ARGUMENT, "sluice_buffer_alloc");
    CHECK_ERR_MSG(sluice_buffer_alloc_pinned(d, 0, &b), SLUICE_ERROR_INVALID_ARGUMENT,
                  "sluice_buffer_alloc_pinned");
    static uint8_t host[64];
    CHECK_ERR_MSG(sluice_buffer_register_host(d, host, 0, &b), SLUICE_ERROR_INVALID_ARGUMENT,
                  "sluice_buffer_register_host");
    CHECK_EQ(b.bits, 0x31);
    CHECK_EQ(sluice_live_handles(), live);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(huge_allocations_fail_cleanly) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    uint64_t live = sluice_live_handles();
    sluice_buffer_t b = {0x32};
    sluice_error_t *e = sluice_buffer_alloc_pinned(d, SIZE_MAX, &b);
    CHECK(e != NULL);
    if (e) {
        uint32_t c = sluice_error_code(e);
        CHECK(c == SLUICE_ERROR_OUT_OF_RANGE || c == SLUICE_ERROR_OUT_OF_MEMORY);
        sluice_error_free(e);
    }
    e = sluice_buffer_alloc(s, SIZE_MAX - 4095, &b);
    CHECK(e != NULL);
    if (e) {
        uint32_t c = sluice_error_code(e);
        CHECK(c == SLUICE_ERROR_OUT_OF_RANGE || c == SLUICE_ERROR_OUT_OF_MEMORY);
        sluice_error_free(e);
    }
    e = sluice_buffer_alloc_pinned(d, SIZE_MAX - 4095, &b);
    CHECK(e != NULL);
    if (e) {
        uint32_t c = sluice_error_code(e);
        CHECK(c == SLUICE_ERROR_OUT_OF_RANGE || c == SLUICE_ERROR_OUT_OF_MEMORY);
        sluice_error_free(e);
    }
    /* a registration whose range wraps around the address space */
    e = sluice_buffer_register_host(d, (void *)(uintptr_t)(UINTPTR_MAX - 15), 64, &b);
    CHECK(e != NULL);
    if (e) {
        CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_OUT_OF_RANGE);
        sluice_error_free(e);
    }
    CHECK_EQ(b.bits, 0x32);
    CHECK_EQ(sluice_live_handles(), live);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(modules_and_kernels_unsupported_on_host) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    if (dev_backend(d) != SLUICE_BACKEND_HOST) {
        CHECK_OK(sluice_device_close(d));
        SKIP("host backend only (module loading works on CUDA)");
    }
    uint64_t live = sluice_live_handles();
    static const char ptx[] = ".version 7.0\n.target sm_50\n.address_size 64\n";
    sluice_module_t m = {0x33};
    sluice_error_t *e = sluice_module_load(d, ptx, sizeof ptx, &m);
    if (CHECK(e != NULL)) {
        CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_UNSUPPORTED);
        const char *msg = sluice_error_message(e);
        CHECK(strstr(msg, "sluice_module_load") != NULL);
        CHECK(strstr(msg, "module") != NULL); /* names the operation */
        CHECK(strstr(msg, "host") != NULL);   /* and the backend */
        sluice_error_free(e);
    }
    CHECK_EQ(m.bits, 0x33);
    CHECK_ERR(sluice_module_load(d, "\x7f" "ELF garbage", 11, &m), SLUICE_ERROR_UNSUPPORTED);
    /* an empty image is an invalid argument everywhere */
    e = sluice_module_load(d, ptx, 0, &m);
    CHECK(e != NULL);
    sluice_error_free(e);
    /* no function handle can exist on host: launches name the bad handle */
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_launch_dims_t dims = {{1, 1, 1}, {1, 1, 1}, 0};
    CHECK_ERR_MSG(sluice_stream_launch(s, (sluice_function_t){0x0800000100000000ull}, &dims, NULL, 0,
                                NULL, 0, NULL, 0),
                  SLUICE_ERROR_INVALID_HANDLE, "sluice_stream_launch");
    CHECK_EQ(sluice_live_handles(), live + 1);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}
