/* The RNG (issue 13) through the C ABI: cuRAND's draws, save and restore in stream
 * order, serialize with its size query, corrupt bytes, and bad arguments. */
#include "helpers.h"

/* cuRAND's curand() of curand_init(0x243F6A8885A308D3, i, 0) (tests/data). */
static const uint32_t CURAND_STATE0[9] = {0xefda3f46, 0x7982a02b, 0x0751b542,
                                          0x0fd3dfbf, 0xd5461dd6, 0xb95c1713,
                                          0xf5311ba0, 0xda6995a8, 0xe403028f};
static const uint32_t CURAND_STATE3[9] = {0x257e7b05, 0x1d5cee2d, 0x9946c593,
                                          0xace1c32c, 0xbcaec71a, 0x71e98fad,
                                          0xf561ab59, 0xacf5cba6, 0x02240b86};

static bool draw_words(sluice_stream_t s, sluice_rng_t rng, uint32_t dist, sluice_buffer_t out,
                       size_t words_per_state, size_t n, uint32_t *host) {
    if (!CHECK_OK(sluice_rng_generate(s, rng, dist, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, out, 0,
                                      words_per_state)))
        return false;
    return CHECK_OK(sluice_stream_copy_to_host(s, host, out, 0, 4 * n * words_per_state));
}

TEST(rng_draws_equal_curand) {
    sluice_device_t d;
    sluice_stream_t s;
    REQUIRE(open_dev(&d));
    REQUIRE(new_stream(d, &s));
    sluice_rng_t rng;
    sluice_buffer_t out;
    REQUIRE_OK(sluice_rng_create(s, 0x243F6A8885A308D3ull, 8, &rng));
    REQUIRE_OK(sluice_buffer_alloc(s, 8 * 9 * 4, &out));
    uint32_t host[72];
    /* State-major this time: state i's 9 draws together. */
    REQUIRE_OK(sluice_rng_generate(s, rng, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_STATE_MAJOR, out, 0, 9));
    REQUIRE_OK(sluice_stream_copy_to_host(s, host, out, 0, sizeof host));
    for (int j = 0; j < 9; j++) {
        CHECK_EQ(host[j], CURAND_STATE0[j]);
        CHECK_EQ(host[3 * 9 + j], CURAND_STATE3[j]);
    }
    size_t n = 0;
    uint64_t seed = 0;
    CHECK_OK(sluice_rng_info(rng, &n, &seed));
    CHECK_EQ(n, 8u);
    CHECK_EQ(seed, 0x243F6A8885A308D3ull);
    /* The states buffer: 8 cuRAND states of 64 bytes. */
    sluice_buffer_t states;
    sluice_buffer_info_t info;
    REQUIRE_OK(sluice_rng_states(rng, &states));
    CHECK_OK(sluice_buffer_info(states, &info));
    CHECK_EQ(info.size, 8u * 64u);
    CHECK_OK(sluice_buffer_free(states));
    CHECK_OK(sluice_buffer_free(out));
    CHECK_OK(sluice_rng_destroy(rng));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(rng_save_restore_and_serialize_round_trip) {
    sluice_device_t d;
    sluice_stream_t s;
    REQUIRE(open_dev(&d));
    REQUIRE(new_stream(d, &s));
    enum { N = 100, C = 6 };
    sluice_rng_t rng, other;
    sluice_rng_checkpoint_t ck, back;
    sluice_buffer_t out;
    REQUIRE_OK(sluice_rng_create(s, 77, N, &rng));
    REQUIRE_OK(sluice_rng_create(s, 1, N, &other));
    REQUIRE_OK(sluice_buffer_alloc(s, N * C * 4, &out));
    static uint32_t a[N * C], b[N * C], c[N * C];
    REQUIRE(draw_words(s, rng, SLUICE_RNG_NORMAL, out, C, N, a));
    REQUIRE_OK(sluice_rng_checkpoint_create(s, rng, &ck));
    REQUIRE_OK(sluice_rng_save(s, rng, ck));
    REQUIRE(draw_words(s, rng, SLUICE_RNG_UNIFORM, out, C, N, a));
    REQUIRE_OK(sluice_rng_restore(s, rng, ck));
    REQUIRE(draw_words(s, rng, SLUICE_RNG_UNIFORM, out, C, N, b));
    CHECK(memcmp(a, b, sizeof a) == 0);

    /* Size query, then the bytes. */
    size_t len = 0;
    REQUIRE_OK(sluice_rng_checkpoint_serialize(ck, NULL, 0, &len));
    CHECK_EQ(len, 32u + N * 64u + 4u);
    uint8_t *bytes = malloc(len);
    REQUIRE(bytes != NULL);
    size_t got = 0;
    CHECK_ERR_MSG(sluice_rng_checkpoint_serialize(ck, bytes, len - 1, &got),
                  SLUICE_ERROR_OUT_OF_RANGE, "capacity");
    CHECK_EQ(got, len);
    REQUIRE_OK(sluice_rng_checkpoint_serialize(ck, bytes, len, &got));
    CHECK(memcmp(bytes, "SLRNGCK", 8) == 0);
    REQUIRE_OK(sluice_rng_checkpoint_deserialize(d, bytes, len, &back));
    size_t n = 0;
    uint64_t seed = 0;
    CHECK_OK(sluice_rng_checkpoint_info(back, &n, &seed));
    CHECK_EQ(n, (size_t)N);
    CHECK_EQ(seed, 77u);
    REQUIRE_OK(sluice_rng_restore(s, other, back));
    REQUIRE(draw_words(s, other, SLUICE_RNG_UNIFORM, out, C, N, c));
    CHECK(memcmp(a, c, sizeof a) == 0);

    /* A flipped bit and a truncation: CORRUPT_DATA, no handle. */
    sluice_rng_checkpoint_t bad = {0};
    bytes[100] ^= 0x10;
    CHECK_ERR_MSG(sluice_rng_checkpoint_deserialize(d, bytes, len, &bad),
                  SLUICE_ERROR_CORRUPT_DATA, "CRC32C");
    bytes[100] ^= 0x10;
    CHECK_ERR_MSG(sluice_rng_checkpoint_deserialize(d, bytes, len - 7, &bad),
                  SLUICE_ERROR_CORRUPT_DATA, "truncated");
    CHECK_EQ(bad.bits, 0u);
    free(bytes);
    CHECK_OK(sluice_rng_checkpoint_destroy(back));
    CHECK_OK(sluice_rng_checkpoint_destroy(ck));
    CHECK_OK(sluice_buffer_free(out));
    CHECK_OK(sluice_rng_destroy(other));
    CHECK_OK(sluice_rng_destroy(rng));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}

TEST(rng_bad_arguments) {
    sluice_device_t d;
    sluice_stream_t s;
    REQUIRE(open_dev(&d));
    REQUIRE(new_stream(d, &s));
    sluice_rng_t rng, small;
    sluice_rng_checkpoint_t ck;
    sluice_buffer_t out;
    CHECK_ERR_MSG(sluice_rng_create(s, 1, 0, &rng), SLUICE_ERROR_INVALID_ARGUMENT, "state");
    CHECK_ERR(sluice_rng_create(s, 1, 4, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    REQUIRE_OK(sluice_rng_create(s, 1, 4, &rng));
    REQUIRE_OK(sluice_rng_create(s, 1, 3, &small));
    REQUIRE_OK(sluice_buffer_alloc(s, 64, &out));
    CHECK_ERR_MSG(sluice_rng_generate(s, rng, 9, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, out, 0, 1),
                  SLUICE_ERROR_INVALID_ARGUMENT, "distribution 9");
    CHECK_ERR_MSG(sluice_rng_generate(s, rng, SLUICE_RNG_U32, 0, out, 0, 1),
                  SLUICE_ERROR_INVALID_ARGUMENT, "layout 0");
    CHECK_ERR(sluice_rng_generate(s, rng, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, out, 0, 5),
              SLUICE_ERROR_OUT_OF_RANGE);
    CHECK_ERR_MSG(sluice_rng_generate(s, rng, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, out, 2, 1),
                  SLUICE_ERROR_INVALID_ARGUMENT, "multiple of 4");
    REQUIRE_OK(sluice_rng_checkpoint_create(s, small, &ck));
    CHECK_ERR_MSG(sluice_rng_save(s, rng, ck), SLUICE_ERROR_INVALID_ARGUMENT, "3 states");
    CHECK_ERR(sluice_rng_restore(s, rng, ck), SLUICE_ERROR_INVALID_ARGUMENT);
    CHECK_ERR(sluice_rng_checkpoint_serialize(ck, NULL, 0, NULL), SLUICE_ERROR_NULL_ARGUMENT);
    CHECK_ERR(sluice_rng_checkpoint_deserialize(d, NULL, 10, &ck), SLUICE_ERROR_NULL_ARGUMENT);
    /* Handles of the wrong type and destroyed ones. */
    sluice_rng_t wrong = {out.bits};
    CHECK_ERR(sluice_rng_info(wrong, NULL, NULL), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_rng_checkpoint_destroy(ck));
    CHECK_ERR(sluice_rng_checkpoint_destroy(ck), SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_rng_destroy(small));
    CHECK_ERR(sluice_rng_generate(s, small, SLUICE_RNG_U32, SLUICE_RNG_LAYOUT_SAMPLE_MAJOR, out, 0, 1),
              SLUICE_ERROR_INVALID_HANDLE);
    CHECK_OK(sluice_buffer_free(out));
    CHECK_OK(sluice_rng_destroy(rng));
    CHECK_OK(sluice_stream_destroy(s));
    CHECK_OK(sluice_device_close(d));
}
