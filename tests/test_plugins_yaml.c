/* The plugin registry, part 1: plugins.yaml parsing and its errors, and where the file comes
 * from. Part 2 (how a backend's library is found, loading good and broken plugins, choosing a
 * backend) is test_plugins_load.c; the helpers both use are test_plugins_util.c. */
#define _XOPEN_SOURCE 700

#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/log.h"
#include "qvl/registry.h"
#include "test_plugins_util.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* Parsing text must fail with status and a message containing each of the NULL-terminated
 * strings that follow. */
static void expect_parse_error(const char *text, qvl_status status, ...) {
    qvl_plugin_config *cfg = (qvl_plugin_config *)1;
    qvl_error err = {0};
    qvl_status st = qvl_plugins_parse_string(text, strlen(text), FAKE_PATH, &cfg, &err);
    if (st == QVL_OK) fail_msg("parsing succeeded but should not have:\n%s", text);
    assert_null(cfg);
    assert_int_equal(st, status);
    assert_int_equal(err.status, status);
    assert_contains(err.msg, FAKE_PATH);
    assert_null(strchr(err.msg, '\n'));
    va_list ap;
    va_start(ap, status);
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
        assert_contains(err.msg, s);
    va_end(ap);
}

/* ---- parsing ----------------------------------------------------------------------------- */

static const char example_yaml[] =
    "backends:\n"
    "  - name: cuda_sm61\n"
    "    library: build/backends/cuda_sm61/libqvl-cuda_sm61.so   # relative to this file\n"
    "    priority: 100\n"
    "    options: { device: 0 }\n"
    "  - name: cpu_avx2\n"
    "    priority: 50\n"
    "    options: { threads: 0 }        # 0 = all cores\n"
    "  - name: reference\n"
    "    priority: 0\n";

static void test_parse_example(void **state) {
    (void)state;
    /* Listed lowest priority first: the order must come from the priorities. */
    static const char reversed[] =
        "backends:\n"
        "  - name: reference\n"
        "    priority: 0\n"
        "  - name: cpu_avx2\n"
        "    priority: 50\n"
        "    options: { threads: 0 }        # 0 = all cores\n"
        "  - name: cuda_sm61\n"
        "    library: build/backends/cuda_sm61/libqvl-cuda_sm61.so\n"
        "    priority: 100\n"
        "    options:\n"
        "      device: 1\n"
        "      mode: \"fast path\"\n";
    qvl_plugin_config *cfg = parse_ok(example_yaml);
    assert_string_equal(cfg->path, FAKE_PATH);
    assert_string_equal(cfg->dir, "/etc/qvl-test");
    assert_int_equal(cfg->n, 3);
    assert_string_equal(cfg->specs[0].name, "cuda_sm61");
    assert_string_equal(cfg->specs[1].name, "cpu_avx2");
    assert_string_equal(cfg->specs[2].name, "reference");
    assert_int_equal(cfg->specs[0].priority, 100);
    assert_int_equal(cfg->specs[1].priority, 50);
    assert_int_equal(cfg->specs[2].priority, 0);
    assert_int_equal(cfg->specs[0].line, 2);
    assert_int_equal(cfg->specs[1].line, 6);
    assert_int_equal(cfg->specs[2].line, 9);
    assert_string_equal(cfg->specs[0].library, "build/backends/cuda_sm61/libqvl-cuda_sm61.so");
    assert_null(cfg->specs[1].library);
    assert_null(cfg->specs[2].library);
    assert_string_equal(qvl_options_get(&cfg->specs[0].options, "device"), "0");
    assert_string_equal(qvl_options_get(&cfg->specs[1].options, "threads"), "0");
    assert_int_equal(cfg->specs[0].options.n, 1);
    assert_int_equal(cfg->specs[2].options.n, 0);
    assert_null(qvl_options_get(&cfg->specs[2].options, "threads"));
    for (size_t i = 0; i < cfg->n; i++) assert_false(cfg->specs[i].required);
    qvl_plugins_free(cfg);

    cfg = parse_ok(reversed);
    assert_int_equal(cfg->n, 3);
    assert_string_equal(cfg->specs[0].name, "cuda_sm61");
    assert_int_equal(cfg->specs[0].line, 7);
    assert_string_equal(cfg->specs[1].name, "cpu_avx2");
    assert_string_equal(cfg->specs[2].name, "reference");
    assert_int_equal(cfg->specs[0].options.n, 2);
    assert_string_equal(qvl_options_get(&cfg->specs[0].options, "device"), "1");
    assert_string_equal(qvl_options_get(&cfg->specs[0].options, "mode"), "fast path");
    long device = -1;
    assert_int_equal(qvl_options_get_int(&cfg->specs[0].options, "device", 0, &device, NULL),
                     QVL_OK);
    assert_int_equal(device, 1);
    qvl_plugins_free(cfg);
}

static void test_parse_defaults_required_and_stable_order(void **state) {
    (void)state;
    qvl_plugin_config *cfg = parse_ok("backends:\n"
                                      "  - name: a\n"
                                      "  - name: b\n"
                                      "    priority: 7\n"
                                      "    required: true\n"
                                      "  - name: c\n"
                                      "    required: false\n"
                                      "    fallback: false\n"
                                      "  - {name: d, priority: 7, fallback: true}\n"
                                      "  - name: e-2\n"
                                      "    priority: -3\n");
    assert_int_equal(cfg->n, 5);
    const char *order[] = {"b", "d", "a", "c", "e-2"};
    const long prio[] = {7, 7, 0, 0, -3};
    const bool required[] = {true, false, false, false, false};
    const bool no_fallback[] = {false, false, false, true, false}; /* fallback: true unless said */
    const int line[] = {3, 9, 2, 6, 10};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(cfg->specs[i].no_fallback, no_fallback[i]);
        assert_string_equal(cfg->specs[i].name, order[i]);
        assert_int_equal(cfg->specs[i].priority, prio[i]);
        assert_int_equal(cfg->specs[i].required, required[i]);
        assert_int_equal(cfg->specs[i].line, line[i]);
    }
    qvl_plugins_free(cfg);
}

static void test_parse_syntax_errors(void **state) {
    (void)state;
    /* A tab where block indentation is expected: libyaml stops at line 2, column 1. */
    expect_parse_error("backends:\n\t- name: a\n", QVL_E_PARSE, FAKE_PATH ":2:1: ", NULL);

    /* An unclosed flow sequence: FILE:LINE:COL: followed by libyaml's words. */
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    const char *text = "backends:\n  - name: a\n    options: [1, 2\n  - name: b\n";
    assert_int_equal(qvl_plugins_parse_string(text, strlen(text), FAKE_PATH, &cfg, &err),
                     QVL_E_PARSE);
    assert_null(cfg);
    unsigned line = 0, col = 0;
    char rest[256] = "";
    int got = sscanf(err.msg, FAKE_PATH ":%u:%u: %255[^\n]", &line, &col, rest);
    if (got != 3) fail_msg("not FILE:LINE:COL: problem: %s", err.msg);
    assert_true(line >= 3 && line <= 5);
    assert_true(col >= 1);
    assert_true(strlen(rest) > 3);

    /* Invalid UTF-8 (a reader error) still gets a line and column. */
    expect_parse_error("backends:\n  - name: a\xff\n", QVL_E_PARSE, FAKE_PATH ":2:", NULL);
}

static void test_parse_unknown_keys(void **state) {
    (void)state;
    expect_parse_error("backends:\n  - name: a\nplugin_dir: /x\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "unknown key 'plugin_dir'", NULL);
    expect_parse_error("backends:\n  - name: a\n    prio: 3\n", QVL_E_INVALID, FAKE_PATH ":3:",
                       "unknown key 'prio'", NULL);
    expect_parse_error("backends:\n  - name: a\n    name: b\n", QVL_E_INVALID, FAKE_PATH ":3:",
                       "'name'", "twice", NULL);
}

static void test_parse_wrong_types(void **state) {
    (void)state;
    expect_parse_error("backends:\n  - name: a\n    priority: high\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "priority", "high", NULL);
    expect_parse_error("backends:\n  - name: a\n    priority: 1.5\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "priority", NULL);
    expect_parse_error("backends:\n  - name: a\n    priority: \"5\"\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "priority", NULL);
    expect_parse_error("backends:\n  - name: a\n    priority: 123456789012345678901234567890\n",
                       QVL_E_INVALID, FAKE_PATH ":3:", "priority", NULL);
    expect_parse_error("backends:\n  - name: a\n    priority: [1]\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "priority", NULL);
    expect_parse_error("backends:\n  - name: a\n    required: yes\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "required", "yes", NULL);
    expect_parse_error("backends:\n  - name: a\n    fallback: maybe\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "fallback must be true or false", "maybe", NULL);
    expect_parse_error("backends:\n  - name: a\n    required: 1\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "required", NULL);
    expect_parse_error("backends:\n  - name: a\n    options: [device, 0]\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "options", "mapping", NULL);
    expect_parse_error("backends:\n  - name: a\n    options: { device: [0, 1] }\n",
                       QVL_E_INVALID, FAKE_PATH ":3:", "option 'device'", NULL);
    expect_parse_error("backends:\n  - name: a\n    options:\n      device: { id: 0 }\n",
                       QVL_E_INVALID, FAKE_PATH ":4:", "option 'device'", NULL);
    expect_parse_error("backends:\n  - name: a\n    options: { t: 1, t: 2 }\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "'t'", "twice", NULL);
    expect_parse_error("backends: reference\n", QVL_E_INVALID, FAKE_PATH ":1:", "sequence",
                       NULL);
    expect_parse_error("backends:\n  name: reference\n", QVL_E_INVALID, "sequence", NULL);
    expect_parse_error("backends:\n  - reference\n", QVL_E_INVALID, FAKE_PATH ":2:", "mapping",
                       NULL);
    expect_parse_error("- name: reference\n", QVL_E_INVALID, "top level", NULL);
    expect_parse_error("backends:\n  - name: a\n    library: [x]\n", QVL_E_INVALID,
                       FAKE_PATH ":3:", "library", NULL);
}

static void test_parse_names(void **state) {
    (void)state;
    expect_parse_error("backends:\n  - priority: 3\n", QVL_E_INVALID, FAKE_PATH ":2:", "no name",
                       NULL);
    expect_parse_error("backends:\n  - name:\n    priority: 3\n", QVL_E_INVALID, "no name",
                       NULL);
    expect_parse_error("backends:\n  - name: ref\n  - name: cpu\n  - name: ref\n"
                       "    priority: 9\n",
                       QVL_E_INVALID, FAKE_PATH ":4:", "'ref'", "line 2", NULL);
    expect_parse_error("backends:\n  - name: ../../evil\n", QVL_E_INVALID, FAKE_PATH ":2:",
                       "'../../evil'", NULL);
    expect_parse_error("backends:\n  - name: \"a b\"\n", QVL_E_INVALID, "'a b'", NULL);
}

static void test_parse_no_backends(void **state) {
    (void)state;
    expect_parse_error("", QVL_E_INVALID, "no backends listed", NULL);
    expect_parse_error("# nothing here\n\n", QVL_E_INVALID, "no backends listed", NULL);
    expect_parse_error("---\n", QVL_E_INVALID, "no backends listed", NULL);
    expect_parse_error("backends:\n", QVL_E_INVALID, "no backends listed", NULL);
    expect_parse_error("backends: []\n", QVL_E_INVALID, "no backends listed", NULL);
    expect_parse_error("backends:\n  - name: a\n---\nbackends:\n  - name: b\n", QVL_E_INVALID,
                       "one YAML document", NULL);
}

static void test_parse_file(void **state) {
    (void)state;
    char path[512];
    qvl_plugin_config *cfg = (qvl_plugin_config *)1;
    qvl_error err = {0};
    tmp_path(path, sizeof path, "absent.yaml");
    assert_int_equal(qvl_plugins_parse_file(path, &cfg, &err), QVL_E_NOT_FOUND);
    assert_null(cfg);
    assert_contains(err.msg, path);

    tmp_path(path, sizeof path, "plugins.yaml");
    write_text(path, example_yaml);
    assert_int_equal(qvl_plugins_parse_file(path, &cfg, &err), QVL_OK);
    assert_string_equal(cfg->path, path);
    assert_string_equal(cfg->dir, g_tmp);
    assert_int_equal(cfg->n, 3);
    qvl_plugins_free(cfg);

    /* Errors in a real file name it. */
    write_text(path, "backends:\n  - name: a\n    colour: red\n");
    assert_int_equal(qvl_plugins_parse_file(path, &cfg, &err), QVL_E_INVALID);
    assert_null(cfg);
    char where[600];
    snprintf(where, sizeof where, "%s:3:", path);
    assert_contains(err.msg, where);
    assert_contains(err.msg, "colour");
}

/* ---- locating plugins.yaml ---------------------------------------------------------------- */

static void test_locate_explicit_and_env(void **state) {
    (void)state;
    char good[512], missing[512];
    write_config(good, sizeof good, "  - name: from_file\n");
    tmp_path(missing, sizeof missing, "missing.yaml");
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};

    /* Explicit path that does not exist: an error naming it, even with a good $QVL_PLUGINS. */
    setenv("QVL_PLUGINS", good, 1);
    assert_int_not_equal(qvl_plugins_locate(missing, &cfg, &err), QVL_OK);
    assert_null(cfg);
    assert_contains(err.msg, missing);

    /* Explicit beats the environment. */
    char other[512];
    tmp_path(other, sizeof other, "other.yaml");
    write_text(other, "backends:\n  - name: explicit\n");
    assert_int_equal(qvl_plugins_locate(other, &cfg, &err), QVL_OK);
    assert_string_equal(cfg->specs[0].name, "explicit");
    qvl_plugins_free(cfg);

    /* $QVL_PLUGINS is used when no path is given. */
    assert_int_equal(qvl_plugins_locate(NULL, &cfg, &err), QVL_OK);
    assert_string_equal(cfg->path, good);
    assert_string_equal(cfg->specs[0].name, "from_file");
    qvl_plugins_free(cfg);

    /* $QVL_PLUGINS naming a missing file is an error naming the variable and the file. */
    setenv("QVL_PLUGINS", missing, 1);
    assert_int_not_equal(qvl_plugins_locate(NULL, &cfg, &err), QVL_OK);
    assert_null(cfg);
    assert_contains(err.msg, "QVL_PLUGINS");
    assert_contains(err.msg, missing);

    /* ... and one that does not parse too. */
    write_text(other, "backends: [\n");
    setenv("QVL_PLUGINS", other, 1);
    assert_int_equal(qvl_plugins_locate(NULL, &cfg, &err), QVL_E_PARSE);
    assert_contains(err.msg, other);
}

static void test_locate_current_dir_and_builtin(void **state) {
    (void)state;
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    assert_int_equal(chdir(g_tmp), 0);

    /* A plugins.yaml in the current directory is never read, broken or not: it would choose
     * the libraries loaded into the process. */
    write_text("plugins.yaml", "backends:\n  - name: here\n    bogus: 1\n");
    assert_int_equal(qvl_plugins_locate(NULL, &cfg, &err), QVL_OK);
    assert_true(cfg->path == NULL || strcmp(cfg->path, "./plugins.yaml") != 0);
    for (size_t i = 0; i < cfg->n; i++) assert_string_not_equal(cfg->specs[i].name, "here");
    if (cfg->path) {
        /* the build tree's copy next to this test's directory, or an installed default */
        printf("note: using %s\n", cfg->path);
        assert_non_null(strstr(cfg->path, "plugins.yaml"));
    } else {
        /* nothing anywhere: the built-in list */
        assert_null(cfg->dir);
        assert_int_equal(cfg->n, 1);
        assert_string_equal(cfg->specs[0].name, "reference");
        assert_null(cfg->specs[0].library);
    }
    assert_int_equal(unlink("plugins.yaml"), 0);
    qvl_plugins_free(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_parse_example, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_defaults_required_and_stable_order, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_parse_syntax_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_unknown_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_wrong_types, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_no_backends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parse_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locate_explicit_and_env, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locate_current_dir_and_builtin, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
