/*
 * sluice_module_compile (issue 14): runtime compilation with NVRTC.
 *
 * On host: SLUICE_ERROR_UNSUPPORTED naming the export and the backend, and the
 * argument checks. On cuda (NVRTC must be installed): a kernel that includes
 * <sluice/rng.cuh> is compiled with options, launched and its data checked; a
 * syntax error gives SLUICE_ERROR_COMPILE with the compile log; a kernel using
 * 64 KiB of dynamic shared memory runs once sluice_function_set_max_dynamic_shared_memory
 * allows it.
 */
#include "helpers.h"

static const char k_source[] =
    "#include <sluice/rng.cuh>\n"
    "extern \"C\" __global__ void scale_plus(float* y, const float* x, float a, unsigned n) {\n"
    "    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a * x[i] + SCALE_PLUS_OFFSET;\n"
    "}\n";

TEST(module_compile_bad_arguments) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_module_t m = {0x55};
    CHECK_ERR(sluice_module_compile(d, NULL, NULL, NULL, 0, &m), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_module_compile(d, k_source, NULL, NULL, 0, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_module_compile(d, k_source, NULL, NULL, 2, &m), SLUICE_ERROR_NULL_ARGUMENT);
    const char *opts[] = {"-DX=1", NULL};
    CHECK_ERR_MSG(sluice_module_compile(d, k_source, NULL, opts, 2, &m), SLUICE_ERROR_NULL_ARGUMENT,
                  "options[1]");
    CHECK_ERR(sluice_module_compile(d, "", NULL, NULL, 0, &m), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_module_compile((sluice_device_t){0}, k_source, NULL, NULL, 0, &m),
              SLUICE_ERROR_INVALID_HANDLE);
    CHECK_EQ(m.bits, 0x55);
    CHECK_OK(sluice_device_close(d));
}

TEST(module_compile_unsupported_on_host) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    if (dev_backend(d) != SLUICE_BACKEND_HOST) {
        CHECK_OK(sluice_device_close(d));
        SKIP("host backend only");
    }
    uint64_t live = sluice_live_handles();
    sluice_module_t m = {0x66};
    const char *opts[] = {"-DSCALE_PLUS_OFFSET=1.0f"};
    sluice_error_t *e = sluice_module_compile(d, k_source, "scale_plus.cu", opts, 1, &m);
    if (CHECK(e != NULL)) {
        CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_UNSUPPORTED);
        const char *msg = sluice_error_message(e);
        CHECK(strstr(msg, "sluice_module_compile") != NULL);
        CHECK(strstr(msg, "host") != NULL);
        sluice_error_free(e);
    }
    CHECK_EQ(m.bits, 0x66);
    CHECK_EQ(sluice_live_handles(), live);
    CHECK_OK(sluice_device_close(d));
}

TEST(module_compile_runs_a_kernel_on_cuda) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    if (dev_backend(d) != SLUICE_BACKEND_CUDA) {
        CHECK_OK(sluice_device_close(d));
        SKIP("cuda backend only");
    }
    enum { N = 4099 };
    const char *opts[] = {"-DSCALE_PLUS_OFFSET=0.25f", "--std=c++17"};
    sluice_module_t m;
    REQUIRE_OK(sluice_module_compile(d, k_source, "scale_plus.cu", opts, 2, &m));
    sluice_function_t f;
    REQUIRE_OK(sluice_module_get_function(m, "scale_plus", &f));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t x, y;
    REQUIRE_OK(sluice_buffer_alloc(s, N * sizeof(float), &x));
    REQUIRE_OK(sluice_buffer_alloc(s, N * sizeof(float), &y));
    static float host[N];
    for (unsigned i = 0; i < N; i++) host[i] = (float)i;
    CHECK_OK(sluice_stream_copy_from_host(s, x, 0, host, sizeof host));
    sluice_buffer_info_t xi, yi;
    CHECK_OK(sluice_buffer_info(x, &xi));
    CHECK_OK(sluice_buffer_info(y, &yi));
    sluice_sync_t xs, ys;
    CHECK_OK(sluice_buffer_sync(x, &xs));
    CHECK_OK(sluice_buffer_sync(y, &ys));
    uint64_t py = yi.device_ptr, px = xi.device_ptr;
    float a = 2.0f;
    unsigned n = N;
    void *args[] = {&py, &px, &a, &n};
    sluice_launch_dims_t dims = {{(N + 255) / 256, 1, 1}, {256, 1, 1}, 0};
    /* Programmatic dependent launch: on from compute capability 9.0 (this kernel
       does not wait for the one ahead, so it is turned off again before use). */
    sluice_device_props_t props;
    CHECK_OK(sluice_device_props(d, &props));
    if (props.compute_capability_major >= 9) {
        CHECK_OK(sluice_function_set_programmatic_launch(f, true));
    } else {
        CHECK_ERR(sluice_function_set_programmatic_launch(f, true), SLUICE_ERROR_UNSUPPORTED);
    }
    CHECK_OK(sluice_function_set_programmatic_launch(f, false));
    CHECK_OK(sluice_stream_launch(s, f, &dims, args, 4, &xs, 1, &ys, 1));
    memset(host, 0, sizeof host);
    CHECK_OK(sluice_stream_copy_to_host(s, host, y, 0, sizeof host));
    unsigned bad = 0;
    for (unsigned i = 0; i < N; i++) bad += host[i] != 2.0f * (float)i + 0.25f;
    CHECK_EQ(bad, 0);

    /* A syntax error: SLUICE_ERROR_COMPILE, the log in the message. */
    sluice_module_t m2 = {0x77};
    sluice_error_t *e = sluice_module_compile(
        d, "extern \"C\" __global__ void k(int* p) { *p = }\n", "broken.cu", NULL, 0, &m2);
    if (CHECK(e != NULL)) {
        CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_COMPILE);
        const char *msg = sluice_error_message(e);
        CHECK(strstr(msg, "broken.cu(") != NULL);
        CHECK(strstr(msg, "error") != NULL);
        sluice_error_free(e);
    }
    CHECK_EQ(m2.bits, 0x77);

    CHECK_OK(sluice_sync_destroy(xs));
    CHECK_OK(sluice_sync_destroy(ys));
    CHECK_OK(sluice_buffer_free(x));
    CHECK_OK(sluice_buffer_free(y));
    CHECK_OK(sluice_function_destroy(f));
    CHECK_OK(sluice_module_unload(m));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

/* 64 KiB of dynamic shared memory: s[i] = 3i, then out[i] = s[n - 1 - i]. */
static const char k_big[] =
    "extern \"C\" __global__ void big(unsigned *out) {\n"
    "    extern __shared__ unsigned s[];\n"
    "    unsigned n = 64 * 1024 / 4;\n"
    "    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) s[i] = i * 3u;\n"
    "    __syncthreads();\n"
    "    for (unsigned i = threadIdx.x; i < n; i += blockDim.x) out[i] = s[n - 1 - i];\n"
    "}\n";

TEST(module_compile_more_than_48_kib_of_dynamic_shared_memory) {
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    if (dev_backend(d) != SLUICE_BACKEND_CUDA) {
        CHECK_OK(sluice_device_close(d));
        SKIP("cuda backend only");
    }
    enum { BYTES = 64 * 1024, WORDS = BYTES / 4 };
    sluice_module_t m;
    REQUIRE_OK(sluice_module_compile(d, k_big, "big.cu", NULL, 0, &m));
    sluice_function_t f;
    REQUIRE_OK(sluice_module_get_function(m, "big", &f));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t out;
    REQUIRE_OK(sluice_buffer_alloc(s, BYTES, &out));
    sluice_buffer_info_t oi;
    CHECK_OK(sluice_buffer_info(out, &oi));
    sluice_sync_t os;
    CHECK_OK(sluice_buffer_sync(out, &os));
    uint64_t po = oi.device_ptr;
    void *args[] = {&po};
    sluice_launch_dims_t dims = {{1, 1, 1}, {256, 1, 1}, BYTES};
    /* Over 48 KiB without opting in: the driver refuses the launch. */
    CHECK_ERR(sluice_stream_launch(s, f, &dims, args, 1, NULL, 0, &os, 1), SLUICE_ERROR_DRIVER);
    CHECK_OK(sluice_function_set_max_dynamic_shared_memory(f, BYTES));
    CHECK_OK(sluice_stream_launch(s, f, &dims, args, 1, NULL, 0, &os, 1));
    static unsigned host[WORDS];
    CHECK_OK(sluice_stream_copy_to_host(s, host, out, 0, sizeof host));
    unsigned bad = 0;
    for (unsigned i = 0; i < WORDS; i++) bad += host[i] != (WORDS - 1 - i) * 3u;
    CHECK_EQ(bad, 0);
    /* More than any device allows: refused before the driver, the limit named. */
    CHECK_ERR_MSG(sluice_function_set_max_dynamic_shared_memory(f, 1u << 30),
                  SLUICE_ERROR_INVALID_ARGUMENT, "the device allows at most");

    CHECK_OK(sluice_sync_destroy(os));
    CHECK_OK(sluice_buffer_free(out));
    CHECK_OK(sluice_function_destroy(f));
    CHECK_OK(sluice_module_unload(m));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}
