/* The data checks every backend shares (backend_helpers.h, core/src/data_check.c): indices,
 * segment bounds and `at` positions, in range and out, negative, empty, strided, and the one
 * shape of their messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/backend_helpers.h"

static const qvl_node get_rows = {.op = QVL_OP_GET_ROWS, .name = "tok_embd"};
static const qvl_node mask = {.op = QVL_OP_MASK_SEGMENTS, .name = "v.mask"};
static const qvl_node store = {.op = QVL_OP_STORE_ROWS_AT, .name = "k.cache"};

/* err.msg is exactly want (the backends' tests and users read these words). */
static void expect_msg(const qvl_error *err, const char *want) {
    if (strcmp(err->msg, want) != 0) fail_msg("message '%s', expected '%s'", err->msg, want);
}

static void test_indices_in_range(void **state) {
    (void)state;
    const int32_t ids[5] = {0, 4, 2, 4, 0};
    qvl_error err = {0};
    assert_int_equal(qvl_check_indices("be", &get_rows, ids, 5, 1, 5, "id", &err), QVL_OK);
    assert_string_equal(err.msg, ""); /* untouched */
    /* every other element (a strided view), the ones between are never read */
    const int32_t strided[5] = {1, -9, 3, 99, 0};
    assert_int_equal(qvl_check_indices("be", &get_rows, strided, 3, 2, 4, "id", &err), QVL_OK);
    /* step 0: one value broadcast */
    assert_int_equal(qvl_check_indices("be", &get_rows, strided, 7, 0, 2, "id", &err), QVL_OK);
}

static void test_indices_out_of_range(void **state) {
    (void)state;
    const int32_t ids[4] = {1, 2, 9, 10};
    qvl_error err = {0};
    assert_int_equal(qvl_check_indices("cpu_avx2", &get_rows, ids, 4, 1, 9, "id", &err),
                     QVL_E_INVALID);
    expect_msg(&err, "cpu_avx2: get_rows 'tok_embd': id 9 at position 2 is outside [0, 9)");
    /* the bad one hidden by the stride is found at its position k, not its element */
    const int32_t strided[6] = {0, 99, 1, 99, 7, 99};
    assert_int_equal(qvl_check_indices("be", &get_rows, strided, 3, 2, 7, "row index", &err),
                     QVL_E_INVALID);
    expect_msg(&err, "be: get_rows 'tok_embd': row index 7 at position 2 is outside [0, 7)");
}

static void test_indices_negative(void **state) {
    (void)state;
    const int32_t ids[3] = {0, -1, 2};
    qvl_error err = {0};
    assert_int_equal(qvl_check_indices("reference", &get_rows, ids, 3, 1, 3, "id", &err),
                     QVL_E_INVALID);
    expect_msg(&err, "reference: get_rows 'tok_embd': id -1 at position 1 is outside [0, 3)");
    const int32_t lowest = INT32_MIN;
    assert_int_equal(qvl_check_indices("be", &get_rows, &lowest, 1, 1, 3, "id", NULL),
                     QVL_E_INVALID); /* no err: the status alone */
}

static void test_indices_empty(void **state) {
    (void)state;
    qvl_error err = {0};
    /* nothing to read: not even the pointer */
    assert_int_equal(qvl_check_indices("be", &get_rows, NULL, 0, 1, 3, "id", &err), QVL_OK);
    /* no rows: any index is out */
    const int32_t zero = 0;
    assert_int_equal(qvl_check_indices("be", &get_rows, &zero, 1, 1, 0, "id", &err),
                     QVL_E_INVALID);
    expect_msg(&err, "be: get_rows 'tok_embd': id 0 at position 0 is outside [0, 0)");
}

static void test_segments_good(void **state) {
    (void)state;
    const int32_t b[4] = {0, 3, 3, 6}; /* an empty middle segment */
    int32_t id[6];
    memset(id, 0x7f, sizeof id);
    qvl_error err = {0};
    assert_int_equal(qvl_check_segments("be", &mask, b, 4, 1, 6, id, &err), QVL_OK);
    const int32_t want[6] = {0, 0, 0, 2, 2, 2};
    assert_memory_equal(id, want, sizeof want);
    /* strided bounds, no ids asked for */
    const int32_t s[5] = {0, -5, 2, -5, 2};
    assert_int_equal(qvl_check_segments("be", &mask, s, 3, 2, 2, NULL, &err), QVL_OK);
    /* one bound, nothing to split: [0, 0) */
    const int32_t only = 0;
    assert_int_equal(qvl_check_segments("be", &mask, &only, 1, 1, 0, id, &err), QVL_OK);
}

static void test_segments_bad(void **state) {
    (void)state;
    qvl_error err = {0};
    int32_t id[9];
    const int32_t not_n[3] = {0, 5, 8};
    assert_int_equal(qvl_check_segments("cpu_avx2", &mask, not_n, 3, 1, 9, id, &err),
                     QVL_E_INVALID);
    expect_msg(&err, "cpu_avx2: mask_segments 'v.mask': segments must start at 0 and end at 9");
    const int32_t not_0[3] = {1, 5, 9};
    assert_int_equal(qvl_check_segments("be", &mask, not_0, 3, 1, 9, id, &err), QVL_E_INVALID);
    expect_msg(&err, "be: mask_segments 'v.mask': segments must start at 0 and end at 9");
    const int32_t decreasing[4] = {0, 6, 5, 9};
    memset(id, 0x7f, sizeof id);
    assert_int_equal(qvl_check_segments("be", &mask, decreasing, 4, 1, 9, id, &err),
                     QVL_E_INVALID);
    expect_msg(&err, "be: mask_segments 'v.mask': segment bounds decrease at 2");
    for (int i = 0; i < 9; i++) assert_int_equal(id[i], 0x7f7f7f7f); /* nothing written */
    /* a negative bound in between, beyond the range: decreases at 2 as well */
    const int32_t negative[4] = {0, 4, -3, 9};
    assert_int_equal(qvl_check_segments("be", &mask, negative, 4, 1, 9, NULL, &err),
                     QVL_E_INVALID);
    expect_msg(&err, "be: mask_segments 'v.mask': segment bounds decrease at 2");
    /* no bounds at all */
    assert_int_equal(qvl_check_segments("be", &mask, NULL, 0, 1, 4, NULL, &err), QVL_E_INVALID);
    expect_msg(&err, "be: mask_segments 'v.mask': segments must start at 0 and end at 4");
}

static void test_at(void **state) {
    (void)state;
    qvl_error err = {0};
    /* 2 rows into a cache of 10: at 0 .. 8 fit */
    assert_int_equal(qvl_check_at("be", &store, 0, 2, 10, "rows", &err), QVL_OK);
    assert_int_equal(qvl_check_at("be", &store, 8, 2, 10, "rows", &err), QVL_OK);
    assert_int_equal(qvl_check_at("reference", &store, 9, 2, 10, "rows", &err), QVL_E_INVALID);
    expect_msg(&err, "reference: store_rows_at 'k.cache': at = 9: rows [9, 11) do not fit in [0, 10)");
    assert_int_equal(qvl_check_at("be", &store, -1, 2, 10, "rows", &err), QVL_E_INVALID);
    expect_msg(&err, "be: store_rows_at 'k.cache': at = -1 is negative");
    assert_int_equal(qvl_check_at("be", &store, INT32_MAX, 2, 10, "rows", &err), QVL_E_INVALID);
    expect_msg(&err, "be: store_rows_at 'k.cache': at = 2147483647: rows [2147483647, 2147483649) "
                     "do not fit in [0, 10)");
    /* no rows: any at in [0, limit] */
    assert_int_equal(qvl_check_at("be", &store, 10, 0, 10, "rows", &err), QVL_OK);
    assert_int_equal(qvl_check_at("be", &store, 11, 0, 10, "rows", &err), QVL_E_INVALID);
    /* MASK_CAUSAL_AT: any at >= 0 */
    assert_int_equal(qvl_check_at("be", &store, INT64_MAX, 0, INT64_MAX, "queries", &err), QVL_OK);
    assert_int_equal(qvl_check_at("be", &store, -7, 0, INT64_MAX, "queries", NULL), QVL_E_INVALID);
    /* at + count past INT64_MAX is refused, not wrapped */
    assert_int_equal(qvl_check_at("be", &store, INT64_MAX - 1, 2, INT64_MAX, "queries", &err),
                     QVL_E_INVALID);
}

/* A node without a name: "<backend>: <op>: <why>". */
static void test_unnamed_node(void **state) {
    (void)state;
    const qvl_node n = {.op = QVL_OP_SET_ROWS};
    const int32_t idx[2] = {0, 11};
    qvl_error err = {0};
    assert_int_equal(qvl_check_indices("minimal", &n, idx, 2, 1, 11, "row index", &err),
                     QVL_E_INVALID);
    expect_msg(&err, "minimal: set_rows: row index 11 at position 1 is outside [0, 11)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_indices_in_range),  cmocka_unit_test(test_indices_out_of_range),
        cmocka_unit_test(test_indices_negative),  cmocka_unit_test(test_indices_empty),
        cmocka_unit_test(test_segments_good),     cmocka_unit_test(test_segments_bad),
        cmocka_unit_test(test_at),                cmocka_unit_test(test_unnamed_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
