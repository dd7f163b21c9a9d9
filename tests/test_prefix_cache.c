/* Prefix reuse decisions of qvl serve (tools/serve/qvl_prefix.c): partitions by API key and
 * cache_salt never share a prefix, equal ones do; pictures are kept only whole and only when
 * their full SHA-256 digest matches. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/prefix_cache.h"

#define N 12

static void text_keys(const int32_t *ids, int64_t n, uint64_t *keys) {
    for (int64_t i = 0; i < n; i++) keys[i] = qvl_prefix_text_key(ids[i]);
}

static const int32_t prompt_ids[N] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};

/* A cache holding the prompt's first 10 tokens and two more of its own. */
static int64_t match_with(int cache_key, const char *cache_salt, int key, const char *salt) {
    int32_t cached_ids[N];
    memcpy(cached_ids, prompt_ids, sizeof cached_ids);
    cached_ids[10] = 99;
    cached_ids[11] = 98;
    uint64_t ck[N], pk[N];
    text_keys(cached_ids, N, ck);
    text_keys(prompt_ids, N, pk);
    qvl_partition cp, pp;
    qvl_partition_make(cache_key, cache_salt, &cp);
    qvl_partition_make(key, salt, &pp);
    const qvl_prefix cache = {.partition = &cp, .keys = ck, .n_keys = N};
    const qvl_prefix prompt = {.partition = &pp, .keys = pk, .n_keys = N};
    return qvl_prefix_match(&cache, &prompt);
}

static void test_same_partition_shares_prefix(void **state) {
    (void)state;
    assert_int_equal(match_with(QVL_PARTITION_NO_KEY, NULL, QVL_PARTITION_NO_KEY, NULL), 10);
    assert_int_equal(match_with(0, NULL, 0, NULL), 10);
    assert_int_equal(match_with(1, "team-a", 1, "team-a"), 10);
}

static void test_other_key_shares_nothing(void **state) {
    (void)state;
    assert_int_equal(match_with(0, NULL, 1, NULL), 0);
    assert_int_equal(match_with(1, NULL, 0, NULL), 0);
    assert_int_equal(match_with(QVL_PARTITION_NO_KEY, NULL, 0, NULL), 0);
    assert_int_equal(match_with(0, "s", 1, "s"), 0);
}

static void test_other_salt_shares_nothing(void **state) {
    (void)state;
    assert_int_equal(match_with(0, "a", 0, "b"), 0);
    assert_int_equal(match_with(0, NULL, 0, "a"), 0);
    assert_int_equal(match_with(0, "a", 0, NULL), 0);
    assert_int_equal(match_with(0, "", 0, NULL), 0); /* an empty salt is a salt */
    /* Key and salt are not confused by concatenation. */
    assert_int_equal(match_with(1, "2", 12, ""), 0);
}

static void test_last_token_run_again(void **state) {
    (void)state;
    uint64_t k[N];
    text_keys(prompt_ids, N, k);
    qvl_partition p;
    qvl_partition_make(0, NULL, &p);
    const qvl_prefix same = {.partition = &p, .keys = k, .n_keys = N};
    assert_int_equal(qvl_prefix_match(&same, &same), N - 1);
}

/* Tokens 2..5 are a picture's 4 pads; digest d in the prompt. */
static void picture_prompt(const uint8_t d[QVL_SHA256_BYTES], uint64_t *keys,
                           qvl_prefix_image *im) {
    text_keys(prompt_ids, N, keys);
    for (int64_t k = 0; k < 4; k++) keys[2 + k] = qvl_prefix_pad_key(d, k);
    im->at = 2;
    im->n_tokens = 4;
    memcpy(im->digest, d, QVL_SHA256_BYTES);
}

static void test_picture_by_full_digest(void **state) {
    (void)state;
    uint8_t a[QVL_SHA256_BYTES], b[QVL_SHA256_BYTES];
    qvl_sha256("picture a", 9, a);
    memcpy(b, a, sizeof b);
    b[31] ^= 1; /* same first 64 bits, so the same pad keys: only the digest tells them apart */
    qvl_partition p;
    qvl_partition_make(QVL_PARTITION_NO_KEY, NULL, &p);
    uint64_t ck[N], pk[N];
    qvl_prefix_image ci, pi;
    picture_prompt(a, ck, &ci);
    picture_prompt(a, pk, &pi);
    qvl_prefix cache = {.partition = &p, .keys = ck, .n_keys = N, .images = &ci, .n_images = 1};
    const qvl_prefix prompt = {.partition = &p, .keys = pk, .n_keys = N, .images = &pi,
                                 .n_images = 1};
    assert_int_equal(qvl_prefix_match(&cache, &prompt), N - 1);
    qvl_prefix_image other;
    picture_prompt(b, ck, &other);
    assert_memory_equal(ck, pk, sizeof ck); /* the keys alone cannot tell */
    cache.images = &other;
    assert_int_equal(qvl_prefix_match(&cache, &prompt), 2);
    /* No record of the picture in the cache: not kept either. */
    cache.n_images = 0;
    assert_int_equal(qvl_prefix_match(&cache, &prompt), 2);
}

static void test_picture_kept_only_whole(void **state) {
    (void)state;
    uint8_t a[QVL_SHA256_BYTES];
    qvl_sha256("picture a", 9, a);
    qvl_partition p;
    qvl_partition_make(QVL_PARTITION_NO_KEY, NULL, &p);
    uint64_t ck[N], pk[N];
    qvl_prefix_image ci, pi;
    picture_prompt(a, ck, &ci);
    picture_prompt(a, pk, &pi);
    const qvl_prefix prompt = {.partition = &p, .keys = pk, .n_keys = N, .images = &pi,
                                 .n_images = 1};
    /* The cache ends inside the picture (4 of its pads... only 2 kept): back to its start. */
    const qvl_prefix cut = {.partition = &p, .keys = ck, .n_keys = 4, .images = &ci,
                              .n_images = 1};
    assert_int_equal(qvl_prefix_match(&cut, &prompt), 2);
    /* A text token differs right after the picture: the picture is kept whole. */
    ck[6] = qvl_prefix_text_key(7);
    const qvl_prefix after = {.partition = &p, .keys = ck, .n_keys = N, .images = &ci,
                                .n_images = 1};
    assert_int_equal(qvl_prefix_match(&after, &prompt), 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_partition_shares_prefix),
        cmocka_unit_test(test_other_key_shares_nothing),
        cmocka_unit_test(test_other_salt_shares_nothing),
        cmocka_unit_test(test_last_token_run_again),
        cmocka_unit_test(test_picture_by_full_digest),
        cmocka_unit_test(test_picture_kept_only_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
