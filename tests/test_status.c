/* Error records: messages, prefixes, and truncation that never overflows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/log.h"
#include "qvl/status.h"

static void test_fail_and_prefix(void **state) {
    (void)state;
    qvl_error err = {0};
    assert_int_equal(qvl_fail(&err, QVL_E_IO, "cannot open %s", "x.yaml"), QVL_E_IO);
    assert_string_equal(err.msg, "cannot open x.yaml");
    assert_int_equal(qvl_error_prefix(&err, "plugins %d", 2), QVL_E_IO);
    assert_string_equal(err.msg, "plugins 2: cannot open x.yaml");
    assert_int_equal(qvl_fail(NULL, QVL_E_PARSE, "ignored"), QVL_E_PARSE);
    qvl_error_clear(&err);
    assert_int_equal(err.status, QVL_OK);
    assert_string_equal(err.msg, "");
}

static void test_prefix_truncates(void **state) {
    (void)state;
    qvl_error err = {0};
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    qvl_fail(&err, QVL_E_INVALID, "%s", big);
    assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
    qvl_error_prefix(&err, "%s", big);
    assert_int_equal(strlen(err.msg), sizeof err.msg - 1);
    assert_memory_equal(err.msg, "aaa", 3);
    qvl_fail(&err, QVL_E_INVALID, "tail");
    qvl_error_prefix(&err, "ctx");
    assert_string_equal(err.msg, "ctx: tail");
}

static void test_status_names(void **state) {
    (void)state;
    for (int s = 0; s < QVL_STATUS_COUNT; s++) assert_non_null(qvl_status_str((qvl_status)s));
    assert_string_equal(qvl_status_str(QVL_E_ABI), "ABI mismatch");
    assert_string_equal(qvl_status_str((qvl_status)999), "unknown status");
}

static void test_log_levels(void **state) {
    (void)state;
    qvl_log_level l;
    assert_int_equal(qvl_log_level_parse("DEBUG", &l), 0);
    assert_int_equal(l, QVL_LOG_DEBUG);
    assert_int_equal(qvl_log_level_parse("loud", &l), -1);
    qvl_log_level_set(QVL_LOG_ERROR);
    assert_int_equal(qvl_log_level_get(), QVL_LOG_ERROR);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fail_and_prefix),
        cmocka_unit_test(test_prefix_truncates),
        cmocka_unit_test(test_status_names),
        cmocka_unit_test(test_log_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
