/* Version, ABI version, error codes and the error object accessors. */
#include "helpers.h"

TEST(version_string_matches_header) {
    const char *v = sluice_version();
    REQUIRE(v != NULL);
    CHECK_STREQ(v, SLUICE_VERSION_STRING);
    char built[64];
    snprintf(built, sizeof built, "%d.%d.%d", SLUICE_VERSION_MAJOR, SLUICE_VERSION_MINOR,
             SLUICE_VERSION_PATCH);
    CHECK_STREQ(v, built);
    /* static string: the same pointer every time */
    CHECK(sluice_version() == v);
}

TEST(abi_version_matches_header) {
    CHECK_EQ(sluice_abi_version(), SLUICE_ABI_VERSION);
    CHECK(SLUICE_ABI_VERSION >= 1);
}

#define CODE_ENTRY(c) {c, #c}
static const struct {
    uint32_t code;
    const char *name;
} k_codes[] = {
    CODE_ENTRY(SLUICE_ERROR_PANIC),
    CODE_ENTRY(SLUICE_ERROR_NULL_ARGUMENT),
    CODE_ENTRY(SLUICE_ERROR_INVALID_ARGUMENT),
    CODE_ENTRY(SLUICE_ERROR_INVALID_HANDLE),
    CODE_ENTRY(SLUICE_ERROR_OUT_OF_RANGE),
    CODE_ENTRY(SLUICE_ERROR_UNSUPPORTED),
    CODE_ENTRY(SLUICE_ERROR_NO_DRIVER),
    CODE_ENTRY(SLUICE_ERROR_NO_DEVICE),
    CODE_ENTRY(SLUICE_ERROR_DRIVER),
    CODE_ENTRY(SLUICE_ERROR_OUT_OF_MEMORY),
    CODE_ENTRY(SLUICE_ERROR_CAPTURE_UNSUPPORTED),
    CODE_ENTRY(SLUICE_ERROR_CAPTURE_FAILED),
    CODE_ENTRY(SLUICE_ERROR_DEVICE_FAULT),
    CODE_ENTRY(SLUICE_ERROR_CALLBACK_FAILED),
    CODE_ENTRY(SLUICE_ERROR_MODULE_LOAD),
    CODE_ENTRY(SLUICE_ERROR_NOT_FOUND),
    CODE_ENTRY(SLUICE_ERROR_WRONG_DEVICE),
    CODE_ENTRY(SLUICE_ERROR_INVALID_STATE),
    CODE_ENTRY(SLUICE_ERROR_END_OF_DATA),
    CODE_ENTRY(SLUICE_ERROR_TIMEOUT),
    CODE_ENTRY(SLUICE_ERROR_CORRUPT_DATA),
    CODE_ENTRY(SLUICE_ERROR_COMPILE),
};
#define NCODES (sizeof k_codes / sizeof k_codes[0])

TEST(error_code_names_match_macros) {
    CHECK_EQ(NCODES, 22);
    for (size_t i = 0; i < NCODES; i++) {
        /* codes are stable: 1..22 in this order, never renumbered */
        CHECK_EQ(k_codes[i].code, i + 1);
        const char *n = sluice_error_code_name(k_codes[i].code);
        REQUIRE(n != NULL);
        CHECK_STREQ(n, k_codes[i].name);
        CHECK(sluice_error_code_name(k_codes[i].code) == n); /* static */
    }
}

TEST(error_code_name_unknown) {
    const uint32_t unknown[] = {23, 24, 100, 1000, 0x7fffffffu, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        const char *n = sluice_error_code_name(unknown[i]);
        REQUIRE(n != NULL);
        CHECK_STREQ(n, "SLUICE_ERROR_UNKNOWN");
    }
    /* 0 is "no error", not a code: whatever its name, it is not one of the codes' names */
    const char *z = sluice_error_code_name(0);
    REQUIRE(z != NULL);
    CHECK(z[0] != '\0');
    for (size_t i = 0; i < NCODES; i++) CHECK(strcmp(z, k_codes[i].name) != 0);
}

TEST(error_accessors_accept_null) {
    CHECK_EQ(sluice_error_code(NULL), 0);
    CHECK_EQ(sluice_error_driver_code(NULL), 0);
    const char *m = sluice_error_message(NULL);
    REQUIRE(m != NULL);
    CHECK_STREQ(m, "");
    sluice_error_free(NULL); /* ignored */
}

TEST(error_object_fields) {
    /* a host-side error: code, message naming the operation and the handle, no driver code */
    sluice_stream_t bogus = {0x0200000100000abcull};
    sluice_error_t *e = sluice_stream_synchronize(bogus);
    REQUIRE(e != NULL);
    CHECK_EQ(sluice_error_code(e), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_EQ(sluice_error_driver_code(e), 0);
    const char *m = sluice_error_message(e);
    REQUIRE(m != NULL);
    CHECK(strstr(m, "sluice_stream_synchronize") != NULL);
    CHECK(msg_names_handle(m, bogus.bits));
    /* the message stays valid and stable until the free */
    CHECK(sluice_error_message(e) == m);
    sluice_error_free(e);
}

TEST(handle_types_are_64_bit_values) {
    CHECK_EQ(sizeof(sluice_device_t), 8);
    CHECK_EQ(sizeof(sluice_stream_t), 8);
    CHECK_EQ(sizeof(sluice_event_t), 8);
    CHECK_EQ(sizeof(sluice_buffer_t), 8);
    CHECK_EQ(sizeof(sluice_sync_t), 8);
    CHECK_EQ(sizeof(sluice_op_t), 8);
    CHECK_EQ(sizeof(sluice_module_t), 8);
    CHECK_EQ(sizeof(sluice_function_t), 8);
}

TEST(engine_mode_get_set) {
    uint32_t initial = sluice_engine_mode();
    const char *env = getenv("SLUICE_ENGINE");
    CHECK_EQ(initial, (env && strcmp(env, "sync") == 0) ? SLUICE_ENGINE_SYNC : SLUICE_ENGINE_ASYNC);
    CHECK_OK(sluice_engine_set_mode(SLUICE_ENGINE_SYNC));
    CHECK_EQ(sluice_engine_mode(), SLUICE_ENGINE_SYNC);
    CHECK_OK(sluice_engine_set_mode(SLUICE_ENGINE_ASYNC));
    CHECK_EQ(sluice_engine_mode(), SLUICE_ENGINE_ASYNC);
    CHECK_ERR(sluice_engine_set_mode(2), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_engine_set_mode(UINT32_MAX), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_EQ(sluice_engine_mode(), SLUICE_ENGINE_ASYNC);
    CHECK_OK(sluice_engine_set_mode(initial));
}
