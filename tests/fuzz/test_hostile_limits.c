/* Limits and error-message rules added while fuzzing (tests/fuzz/README.md): hostile inputs
 * must be refused quickly with one line that names the file and the problem. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/registry.h"
#include "qvl/safetensors.h"
#include "qvl/status.h"

static void assert_one_line(const qvl_error *err) {
    assert_true(err->msg[0] != '\0');
    for (const unsigned char *p = (const unsigned char *)err->msg; *p; p++)
        if (*p < 0x20 || *p == 0x7f) fail_msg("control byte 0x%02x in \"%s\"", *p, err->msg);
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

/* Values quoted from a file may hold newlines or terminal escapes; the message stays one
 * harmless line, also after a prefix is added. */
static void test_messages_stay_one_line(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_status st = qvl_fail(&err, QVL_E_PARSE, "x.json: key '%s' is bad", "a\nb\x1b[31m\r\x7f");
    assert_int_equal(st, QVL_E_PARSE);
    assert_one_line(&err);
    assert_string_equal(err.msg, "x.json: key 'a?b?[31m?" "?' is bad"); /* split: no trigraph */
    qvl_error_prefix(&err, "loading\t%s", "model\n");
    assert_one_line(&err);
    assert_contains(err.msg, "loading?model?: x.json");
}

static char *repeat_entries(const char *head, const char *fmt, int n, const char *tail) {
    size_t cap = strlen(head) + strlen(tail) + (size_t)n * 64 + 1, len = 0;
    char *s = malloc(cap);
    assert_non_null(s);
    len += (size_t)snprintf(s + len, cap - len, "%s", head);
    for (int i = 0; i < n; i++) len += (size_t)snprintf(s + len, cap - len, fmt, i ? ", " : "", i);
    snprintf(s + len, cap - len, "%s", tail);
    return s;
}

/* The duplicate checks of plugins.yaml are quadratic: the counts are bounded so a large file
 * is refused at once instead of after minutes. */
static void test_plugins_counts_are_bounded(void **state) {
    (void)state;
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    char *ok = repeat_entries("backends: [", "%s{name: n%d}", 256, "]\n");
    assert_int_equal(qvl_plugins_parse_string(ok, strlen(ok), "p.yaml", &cfg, &err), QVL_OK);
    assert_int_equal(cfg->n, 256);
    qvl_plugins_free(cfg);
    free(ok);

    char *many = repeat_entries("backends: [", "%s{name: n%d}", 257, "]\n");
    assert_int_equal(qvl_plugins_parse_string(many, strlen(many), "p.yaml", &cfg, &err),
                     QVL_E_LIMIT);
    assert_null(cfg);
    assert_contains(err.msg, "p.yaml:1: 257 backends listed, at most 256");
    free(many);

    char *opts = repeat_entries("backends:\n  - name: a\n    options: {", "%sk%d: 1", 257, "}\n");
    assert_int_equal(qvl_plugins_parse_string(opts, strlen(opts), "p.yaml", &cfg, &err),
                     QVL_E_LIMIT);
    assert_contains(err.msg, "p.yaml:3: backend 'a' has 257 options, at most 256");
    free(opts);

    /* The size limit of files holds for text in memory too (the text is not even read). */
    size_t big = ((size_t)1 << 20) + 1;
    char *huge = malloc(big);
    assert_non_null(huge);
    memset(huge, '#', big);
    assert_int_equal(qvl_plugins_parse_string(huge, big, "p.yaml", &cfg, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "p.yaml: 1048577 bytes, larger than 1048576");
    assert_one_line(&err);
    free(huge);
}

/* A FIFO where a model file should be must be refused, not block open() forever. */
static void test_safetensors_fifo_is_refused(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    char path[256];
    snprintf(path, sizeof path, "%s/qvl-fifo-%ld.safetensors", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    unlink(path);
    if (mkfifo(path, 0600) != 0) skip();
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    qvl_status s = qvl_safetensors_open(path, &st, &err);
    unlink(path);
    assert_int_equal(s, QVL_E_IO);
    assert_null(st);
    assert_contains(err.msg, "not a regular file");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_messages_stay_one_line),
        cmocka_unit_test(test_plugins_counts_are_bounded),
        cmocka_unit_test(test_safetensors_fifo_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
