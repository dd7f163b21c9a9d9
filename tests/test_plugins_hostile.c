/* plugins.yaml that would hang qvl: a `library:` that is a FIFO (dlopen would block forever
 * waiting for a writer) and flow collections nested deep enough to make libyaml crawl. Both
 * must fail at once with one line; before the checks the first hung and the second took
 * minutes. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/registry.h"

static void fifo_library_is_refused(void **state) {
    (void)state;
    char dir[] = "/tmp/qvl-test-fifo-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[64], yaml[256];
    snprintf(fifo, sizeof fifo, "%s/libqvl-fifo.so", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int n = snprintf(yaml, sizeof yaml, "backends:\n  - name: fifo\n    library: %s\n", fifo);
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_plugins_parse_string(yaml, (size_t)n, NULL, &cfg, &err), QVL_OK);
    qvl_loaded_backend *lb = NULL;
    assert_int_equal(qvl_backend_load(cfg, &cfg->specs[0], &lb, &err), QVL_E_INVALID);
    assert_null(lb);
    assert_non_null(strstr(err.msg, "not a regular file"));
    qvl_plugins_free(cfg);
    unlink(fifo);
    rmdir(dir);
}

static void deep_flow_nesting_is_refused(void **state) {
    (void)state;
    enum { DEPTH = 80000 };
    size_t len = 2 * DEPTH + 64;
    char *text = malloc(len);
    assert_non_null(text);
    int head = snprintf(text, len, "backends: ");
    size_t k = (size_t)head;
    for (int i = 0; i < DEPTH; i++) text[k++] = '[';
    for (int i = 0; i < DEPTH; i++) text[k++] = ']';
    text[k++] = '\n';
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_plugins_parse_string(text, k, "deep.yaml", &cfg, &err), QVL_E_LIMIT);
    assert_null(cfg);
    assert_non_null(strstr(err.msg, "deep.yaml:1:"));
    assert_non_null(strstr(err.msg, "nest more than"));

    /* brackets inside quotes and comments are text, not nesting */
    const char *ok = "# [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\n"
                     "backends:\n  - name: reference\n"
                     "    options: { note: \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\" }\n";
    assert_int_equal(qvl_plugins_parse_string(ok, strlen(ok), NULL, &cfg, &err), QVL_OK);
    qvl_plugins_free(cfg);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fifo_library_is_refused),
        cmocka_unit_test(deep_flow_nesting_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
