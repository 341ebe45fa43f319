/* Interop (issue 18): foreign device memory, DLPack import and export, the
 * buffer_sync handle contract, host-memory dereference of host-backend buffers. */
#include "helpers.h"

/* The DLPack 1.x structs, as dlpack.h declares them. */
typedef struct { uint32_t major, minor; } dl_version;
typedef struct { int32_t device_type, device_id; } dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct dl_managed_v {
    dl_version version;
    void *manager_ctx;
    void (*deleter)(struct dl_managed_v *);
    uint64_t flags;
    dl_tensor dl_tensor;
} dl_managed_v;
typedef struct dl_managed {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *);
} dl_managed;

enum { KDL_CPU = 1, KDL_CUDA = 2 };

static atomic_int g_released;
static void count_release(void *p) { atomic_fetch_add((atomic_int *)p, 1); }

static bool wait_count(atomic_int *c, int want) {
    for (int i = 0; i < 5000 && atomic_load(c) != want; i++) sleep_ms(1);
    return atomic_load(c) == want;
}

TEST(wrap_device_is_a_buffer_and_releases_once_after_free) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t owner;
    REQUIRE_OK(sluice_buffer_alloc(s, 4096, &owner));
    sluice_buffer_info_t oi;
    REQUIRE_OK(sluice_buffer_info(owner, &oi));
    REQUIRE_OK(sluice_stream_synchronize(s));

    atomic_store(&g_released, 0);
    sluice_buffer_t f = {0};
    REQUIRE_OK(sluice_buffer_wrap_device(d, oi.device_ptr, 4096, count_release, &g_released, &f));
    sluice_buffer_info_t fi;
    REQUIRE_OK(sluice_buffer_info(f, &fi));
    CHECK_EQ(fi.kind, SLUICE_BUFFER_FOREIGN);
    CHECK_EQ(fi.size, 4096);
    CHECK_EQ(fi.device_ptr, oi.device_ptr);
    CHECK(fi.host_ptr == NULL);

    uint8_t src[4096], out[4096];
    fill_pattern(src, sizeof src, 5);
    CHECK_OK(sluice_stream_copy_from_host(s, f, 0, src, sizeof src));
    CHECK_OK(sluice_stream_memset(s, f, 10, 0xEE, 20));
    CHECK_OK(sluice_stream_copy_to_host(s, out, owner, 0, sizeof out));
    memset(src + 10, 0xEE, 20);
    CHECK(memcmp(out, src, sizeof out) == 0);

    CHECK_EQ(atomic_load(&g_released), 0);
    CHECK_OK(sluice_buffer_free(f));
    CHECK(wait_count(&g_released, 1));
    sleep_ms(10);
    CHECK_EQ(atomic_load(&g_released), 1);
    CHECK_ERR(sluice_buffer_info(f, &fi), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(owner));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(wrap_device_errors_keep_the_memory_with_the_caller) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    atomic_store(&g_released, 0);
    sluice_buffer_t f = {0};
    CHECK_ERR_MSG(sluice_buffer_wrap_device(d, 0, 16, count_release, &g_released, &f),
                  SLUICE_ERROR_NULL_ARGUMENT, "device pointer is NULL");
    CHECK_ERR_MSG(sluice_buffer_wrap_device(d, 0x1000, 0, count_release, &g_released, &f),
                  SLUICE_ERROR_INVALID_ARGUMENT, "size must be > 0");
    CHECK_ERR_MSG(sluice_buffer_wrap_device(d, UINT64_MAX - 4, 16, count_release, &g_released, &f),
                  SLUICE_ERROR_OUT_OF_RANGE, "wraps around");
    CHECK_ERR_MSG(sluice_buffer_wrap_device(d, 0x1000, 16, count_release, &g_released, NULL),
                  SLUICE_ERROR_NULL_ARGUMENT, "buffer_out is NULL");
    sluice_device_t stale = {12345};
    CHECK_ERR(sluice_buffer_wrap_device(stale, 0x1000, 16, count_release, &g_released, &f),
              SLUICE_ERROR_INVALID_HANDLE);
    if (dev_backend(d) == SLUICE_BACKEND_CUDA) {
        char on_stack[64];
        CHECK_ERR_MSG(sluice_buffer_wrap_device(d, (uint64_t)(uintptr_t)on_stack, 64, NULL,
                                                NULL, &f),
                      SLUICE_ERROR_INVALID_ARGUMENT, "cuPointerGetAttribute");
    }
    CHECK(f.bits == 0);
    sleep_ms(10);
    CHECK_EQ(atomic_load(&g_released), 0);
    CHECK_OK(sluice_device_close(d));
}

/* A producer's tensor with a counting deleter. */
typedef struct {
    dl_managed_v m; /* first */
    int64_t shape[2];
    atomic_int *deleted;
} produced;

static void produced_deleter(dl_managed_v *m) {
    produced *p = (produced *)m;
    atomic_fetch_add(p->deleted, 1);
    free(p);
}

static produced *produce(sluice_device_t d, uint64_t addr, int64_t r, int64_t c,
                         atomic_int *deleted) {
    produced *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->m.version.major = 1;
    p->m.deleter = produced_deleter;
    p->m.dl_tensor.data = (void *)(uintptr_t)addr;
    p->m.dl_tensor.device.device_type = dev_backend(d) == SLUICE_BACKEND_CUDA ? KDL_CUDA : KDL_CPU;
    p->m.dl_tensor.device.device_id = 0;
    p->m.dl_tensor.ndim = 2;
    p->m.dl_tensor.dtype = (dl_dtype){2, 32, 1};
    p->shape[0] = r;
    p->shape[1] = c;
    p->m.dl_tensor.shape = p->shape;
    p->deleted = deleted;
    return p;
}

static atomic_int g_deleted;

TEST(dlpack_import_shape_dtype_and_deleter) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t owner;
    REQUIRE_OK(sluice_buffer_alloc(s, 2 * 3 * 4, &owner));
    sluice_buffer_info_t oi;
    REQUIRE_OK(sluice_buffer_info(owner, &oi));
    REQUIRE_OK(sluice_stream_synchronize(s));

    atomic_store(&g_deleted, 0);
    produced *p = produce(d, oi.device_ptr, 2, 3, &g_deleted);
    REQUIRE(p != NULL);
    sluice_stream_t none = {0};
    sluice_buffer_t b = {0};
    /* errors first: the caller keeps the tensor */
    CHECK_ERR_MSG(sluice_buffer_from_dlpack(d, p, 7, none, &b), SLUICE_ERROR_INVALID_ARGUMENT,
                  "not a SLUICE_DLPACK_* value");
    CHECK_ERR_MSG(sluice_buffer_from_dlpack(d, NULL, SLUICE_DLPACK_VERSIONED, none, &b),
                  SLUICE_ERROR_NULL_ARGUMENT, "tensor is NULL");
    p->m.version.major = 2;
    CHECK_ERR_MSG(sluice_buffer_from_dlpack(d, p, SLUICE_DLPACK_VERSIONED, none, &b),
                  SLUICE_ERROR_UNSUPPORTED, "DLPack version 2.0");
    p->m.version.major = 1;
    p->m.dl_tensor.device.device_type = 8;
    CHECK_ERR_MSG(sluice_buffer_from_dlpack(d, p, SLUICE_DLPACK_VERSIONED, none, &b),
                  SLUICE_ERROR_WRONG_DEVICE, "device type 8");
    p->m.dl_tensor.device.device_type = dev_backend(d) == SLUICE_BACKEND_CUDA ? KDL_CUDA : KDL_CPU;
    int64_t transposed[2] = {1, 2};
    p->m.dl_tensor.strides = transposed;
    CHECK_ERR_MSG(sluice_buffer_from_dlpack(d, p, SLUICE_DLPACK_VERSIONED, none, &b),
                  SLUICE_ERROR_INVALID_ARGUMENT, "not compact");
    int64_t compact[2] = {3, 1};
    p->m.dl_tensor.strides = compact;
    CHECK_EQ(atomic_load(&g_deleted), 0);

    REQUIRE_OK(sluice_buffer_from_dlpack(d, p, SLUICE_DLPACK_VERSIONED, s, &b));
    p->m.dl_tensor.strides = NULL; /* compact[] is on this stack frame */
    sluice_tensor_desc_t t;
    REQUIRE_OK(sluice_buffer_tensor(b, &t));
    CHECK_EQ(t.ndim, 2);
    CHECK_EQ(t.shape[0], 2);
    CHECK_EQ(t.shape[1], 3);
    CHECK_EQ(t.dtype_code, 2);
    CHECK_EQ(t.dtype_bits, 32);
    CHECK_EQ(t.dtype_lanes, 1);
    CHECK_EQ(t.read_only, 0);
    sluice_buffer_info_t bi;
    REQUIRE_OK(sluice_buffer_info(b, &bi));
    CHECK_EQ(bi.kind, SLUICE_BUFFER_FOREIGN);
    CHECK_EQ(bi.size, 24);

    /* a plain buffer has no tensor description */
    CHECK_ERR_MSG(sluice_buffer_tensor(owner, &t), SLUICE_ERROR_NOT_FOUND, "did not come from DLPack");
    CHECK_ERR_MSG(sluice_buffer_tensor(b, NULL), SLUICE_ERROR_NULL_ARGUMENT, "desc_out is NULL");

    CHECK_OK(sluice_stream_memset(s, b, 0, 0x11, 24));
    CHECK_OK(sluice_buffer_free(b));
    CHECK(wait_count(&g_deleted, 1));
    uint8_t out[24];
    CHECK_OK(sluice_stream_copy_to_host(s, out, owner, 0, sizeof out));
    CHECK_EQ(check_fill(out, sizeof out, 0x11), -1);
    CHECK_OK(sluice_buffer_free(owner));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(dlpack_export_fields_consumer_stream_and_deleter) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s, c;
    REQUIRE(new_stream(d, &s));
    REQUIRE(new_stream(d, &c));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &b));
    CHECK_OK(sluice_stream_memset(s, b, 0, 0x42, 64));
    sluice_buffer_info_t bi;
    REQUIRE_OK(sluice_buffer_info(b, &bi));

    int64_t shape[2] = {4, 4};
    sluice_tensor_desc_t desc = {1, 32, 1, 2, shape, 0};
    void *out = NULL;
    uint64_t waits0 = stream_waits(c);
    REQUIRE_OK(sluice_buffer_to_dlpack(b, c, SLUICE_DLPACK_VERSIONED, &desc, &out));
    CHECK_EQ(stream_waits(c), waits0 + 1); /* ordered on the device, not the host */
    dl_managed_v *m = out;
    CHECK_EQ(m->version.major, 1);
    CHECK_EQ(m->dl_tensor.ndim, 2);
    CHECK_EQ(m->dl_tensor.shape[0], 4);
    CHECK_EQ(m->dl_tensor.shape[1], 4);
    CHECK(m->dl_tensor.strides == NULL);
    CHECK_EQ(m->dl_tensor.dtype.bits, 32);
    CHECK_EQ((uint64_t)(uintptr_t)m->dl_tensor.data, bi.device_ptr);
    CHECK_EQ(m->dl_tensor.device.device_type,
             dev_backend(d) == SLUICE_BACKEND_CUDA ? KDL_CUDA : KDL_CPU);
    shape[0] = 99; /* copied */
    CHECK_EQ(m->dl_tensor.shape[0], 4);

    /* the tensor keeps the memory after the handle is freed */
    CHECK_OK(sluice_buffer_free(b));
    if (dev_backend(d) == SLUICE_BACKEND_HOST) {
        CHECK_OK(sluice_stream_synchronize(c));
        CHECK_EQ(check_fill(m->dl_tensor.data, 64, 0x42), -1);
    }
    m->deleter(m);

    /* unversioned, default description, host wait (no consumer) */
    REQUIRE_OK(sluice_buffer_alloc(s, 10, &b));
    CHECK_OK(sluice_stream_memset(s, b, 0, 9, 10));
    sluice_stream_t none = {0};
    REQUIRE_OK(sluice_buffer_to_dlpack(b, none, SLUICE_DLPACK_UNVERSIONED, NULL, &out));
    dl_managed *u = out;
    CHECK_EQ(u->dl_tensor.ndim, 1);
    CHECK_EQ(u->dl_tensor.shape[0], 10);
    CHECK_EQ(u->dl_tensor.dtype.code, 1);
    CHECK_EQ(u->dl_tensor.dtype.bits, 8);
    if (dev_backend(d) == SLUICE_BACKEND_HOST) /* written before return */
        CHECK_EQ(check_fill(u->dl_tensor.data, 10, 9), -1);
    u->deleter(u);

    /* errors */
    desc.shape = shape;
    shape[0] = 100;
    CHECK_ERR_MSG(sluice_buffer_to_dlpack(b, c, SLUICE_DLPACK_VERSIONED, &desc, &out),
                  SLUICE_ERROR_OUT_OF_RANGE, "needs 1600 bytes");
    desc.shape = NULL;
    CHECK_ERR_MSG(sluice_buffer_to_dlpack(b, c, SLUICE_DLPACK_VERSIONED, &desc, &out),
                  SLUICE_ERROR_NULL_ARGUMENT, "desc->shape is NULL");
    desc.shape = shape;
    desc.dtype_bits = 4;
    shape[0] = 1;
    CHECK_ERR_MSG(sluice_buffer_to_dlpack(b, c, SLUICE_DLPACK_VERSIONED, &desc, &out),
                  SLUICE_ERROR_INVALID_ARGUMENT, "whole number of bytes");
    CHECK_ERR_MSG(sluice_buffer_to_dlpack(b, c, 0, NULL, &out), SLUICE_ERROR_INVALID_ARGUMENT,
                  "not a SLUICE_DLPACK_* value");
    CHECK_ERR_MSG(sluice_buffer_to_dlpack(b, c, SLUICE_DLPACK_VERSIONED, NULL, NULL),
                  SLUICE_ERROR_NULL_ARGUMENT, "tensor_out is NULL");
    sluice_stream_t stale = {77};
    CHECK_ERR_MSG(sluice_buffer_to_dlpack(b, stale, SLUICE_DLPACK_VERSIONED, NULL, &out),
                  SLUICE_ERROR_INVALID_HANDLE, "consumer");
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_stream_destroy(c));
    CHECK_OK(sluice_device_close(d));
}

TEST(dlpack_export_then_import_round_trip) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b, back;
    REQUIRE_OK(sluice_buffer_alloc(s, 256, &b));
    uint8_t src[256], out[256];
    fill_pattern(src, sizeof src, 9);
    CHECK_OK(sluice_stream_copy_from_host(s, b, 0, src, sizeof src));
    void *t = NULL;
    REQUIRE_OK(sluice_buffer_to_dlpack(b, s, SLUICE_DLPACK_VERSIONED, NULL, &t));
    CHECK_OK(sluice_buffer_free(b));
    REQUIRE_OK(sluice_buffer_from_dlpack(d, t, SLUICE_DLPACK_VERSIONED, s, &back));
    CHECK_OK(sluice_stream_copy_to_host(s, out, back, 0, sizeof out));
    CHECK(memcmp(src, out, sizeof out) == 0);
    CHECK_OK(sluice_buffer_free(back)); /* runs the export's deleter: the memory goes */
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(buffer_sync_gives_a_new_handle_per_call) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 16, &b));
    uint64_t live0 = sluice_live_handles();
    sluice_sync_t a, c;
    REQUIRE_OK(sluice_buffer_sync(b, &a));
    REQUIRE_OK(sluice_buffer_sync(b, &c));
    CHECK(a.bits != c.bits);
    CHECK_EQ(sluice_live_handles(), live0 + 2); /* each needs its own destroy */
    sluice_sync_info_t ia, ic;
    REQUIRE_OK(sluice_sync_info(a, &ia));
    REQUIRE_OK(sluice_sync_info(c, &ic));
    CHECK_EQ(ia.id, ic.id); /* the same object */
    CHECK_OK(sluice_sync_destroy(a));
    CHECK_ERR(sluice_sync_info(a, &ia), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_sync_info(c, &ic)); /* the other handle is unaffected */
    CHECK_OK(sluice_stream_memset(s, b, 0, 1, 16)); /* and the buffer */
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_sync_wait_write(c)); /* outlives the buffer handle */
    CHECK_OK(sluice_sync_destroy(c));
    CHECK_EQ(sluice_live_handles(), live0 - 1);
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(host_backend_device_memory_is_host_memory) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    if (dev_backend(d) != SLUICE_BACKEND_HOST) {
        CHECK_OK(sluice_device_close(d));
        SKIP("host backend only");
    }
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t b;
    REQUIRE_OK(sluice_buffer_alloc(s, 32, &b));
    CHECK_OK(sluice_stream_memset(s, b, 0, 0x3C, 32));
    sluice_sync_t y;
    REQUIRE_OK(sluice_buffer_sync(b, &y));
    CHECK_OK(sluice_sync_wait_read(y)); /* then the documented dereference is safe */
    sluice_buffer_info_t i;
    REQUIRE_OK(sluice_buffer_info(b, &i));
    CHECK(i.host_ptr == NULL);
    CHECK_EQ(check_fill((const uint8_t *)(uintptr_t)i.device_ptr, 32, 0x3C), -1);
    CHECK_OK(sluice_sync_destroy(y));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}
