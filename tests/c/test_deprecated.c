/* The 0.1.0 names kept as deprecated aliases (docs/abi.md): each still works and
 * forwards to its new name. Nothing else in the project calls them. */
#include "helpers.h"

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

TEST(deprecated_aliases_forward_to_their_new_names) {
    enum { N = 4096 };
    sluice_device_t d;
    REQUIRE(open_dev(&d));
    sluice_stream_t s;
    REQUIRE(new_stream(d, &s));
    sluice_buffer_t a, b;
    REQUIRE_OK(sluice_buffer_alloc(s, N, &a));
    REQUIRE_OK(sluice_buffer_alloc(s, N, &b));
    static uint8_t in[N], out[N];
    fill_pattern(in, N, 7);
    /* sluice_copy_from_host, sluice_copy, sluice_memset, sluice_copy_to_host */
    CHECK_OK(sluice_copy_from_host(s, a, 0, in, N));
    CHECK_OK(sluice_copy(s, b, 0, a, 0, N));
    CHECK_OK(sluice_memset(s, b, 0, 0x5a, 16));
    CHECK_OK(sluice_copy_to_host(s, out, b, 0, N));
    CHECK_EQ(check_fill(out, 16, 0x5a), -1);
    CHECK_EQ(check_pattern(out + 16, N - 16, 7, 16), -1);
    /* the aliases' errors come from the new functions */
    CHECK_ERR_MSG(sluice_copy(s, b, 0, a, 1, N), SLUICE_ERROR_OUT_OF_RANGE, "sluice_stream_copy");
    /* sluice_stream_host_callback */
    static atomic_int flag;
    atomic_store(&flag, 0);
    CHECK_OK(sluice_stream_host_callback(s, set_flag_cb, &flag, NULL, NULL, 0, NULL, 0));
    CHECK_OK(sluice_stream_synchronize(s));
    CHECK_EQ(atomic_load(&flag), 1);
    /* sluice_sync_new, sluice_graph_cache_new, sluice_graphs_set_enabled */
    sluice_sync_t x;
    REQUIRE_OK(sluice_sync_new(&x));
    CHECK_OK(sluice_sync_destroy(x));
    sluice_graph_cache_t c;
    REQUIRE_OK(sluice_graph_cache_new(d, &c));
    CHECK_OK(sluice_graph_cache_destroy(c));
    CHECK_OK(sluice_graphs_set_enabled(true));
    /* sluice_module_function, sluice_launch: argument errors of the new functions */
    sluice_module_t no_module = {0};
    sluice_function_t f;
    CHECK_ERR_MSG(sluice_module_function(no_module, "k", &f), SLUICE_ERROR_INVALID_HANDLE,
                  "sluice_module_get_function");
    sluice_function_t no_function = {0};
    CHECK_ERR_MSG(sluice_launch(s, no_function, NULL, NULL, 0, NULL, 0, NULL, 0),
                  SLUICE_ERROR_NULL_ARGUMENT, "sluice_stream_launch");
    CHECK_OK(sluice_buffer_free(a));
    CHECK_OK(sluice_buffer_free(b));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}
