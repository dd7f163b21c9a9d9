/* SHA-256 against the FIPS 180-2 appendix B examples (one block, two blocks, a million 'a'),
 * the empty message, fed whole and in every split, and the padding's block boundaries. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/sha256.h"

static void hex(const uint8_t d[QVL_SHA256_BYTES], char out[2 * QVL_SHA256_BYTES + 1]) {
    for (int i = 0; i < QVL_SHA256_BYTES; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check(const void *data, size_t n, const char *want) {
    uint8_t d[QVL_SHA256_BYTES];
    char got[2 * QVL_SHA256_BYTES + 1];
    qvl_sha256(data, n, d);
    hex(d, got);
    assert_string_equal(got, want);
}

static void test_fips_one_block(void **state) {
    (void)state;
    check("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_fips_two_blocks(void **state) {
    (void)state;
    static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check(m, sizeof m - 1, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_fips_million_a(void **state) {
    (void)state;
    char *m = malloc(1000000);
    assert_non_null(m);
    memset(m, 'a', 1000000);
    check(m, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* The same fed in uneven pieces. */
    qvl_sha256_ctx s;
    qvl_sha256_init(&s);
    size_t at = 0, step = 1;
    while (at < 1000000) {
        size_t n = step < 1000000 - at ? step : 1000000 - at;
        qvl_sha256_update(&s, m + at, n);
        at += n;
        step = step * 7 % 997 + 1;
    }
    uint8_t d[QVL_SHA256_BYTES];
    char got[2 * QVL_SHA256_BYTES + 1];
    qvl_sha256_final(&s, d);
    hex(d, got);
    assert_string_equal(got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
}

static void test_empty(void **state) {
    (void)state;
    check("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* Every split of the two-block message gives the same digest as one call. */
static void test_every_split(void **state) {
    (void)state;
    static const char m[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    const size_t n = sizeof m - 1;
    for (size_t cut = 0; cut <= n; cut++) {
        qvl_sha256_ctx s;
        qvl_sha256_init(&s);
        qvl_sha256_update(&s, m, cut);
        qvl_sha256_update(&s, m + cut, n - cut);
        uint8_t d[QVL_SHA256_BYTES];
        char got[2 * QVL_SHA256_BYTES + 1];
        qvl_sha256_final(&s, d);
        hex(d, got);
        assert_string_equal(got, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    }
}

/* Lengths around the padding's edge (55, 56, 63, 64 bytes): values from Python's hashlib. */
static void test_padding_edges(void **state) {
    (void)state;
    char m[64];
    memset(m, 'a', sizeof m);
    check(m, 55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
    check(m, 56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
    check(m, 63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34");
    check(m, 64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips_one_block),  cmocka_unit_test(test_fips_two_blocks),
        cmocka_unit_test(test_fips_million_a),  cmocka_unit_test(test_empty),
        cmocka_unit_test(test_every_split),     cmocka_unit_test(test_padding_edges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
