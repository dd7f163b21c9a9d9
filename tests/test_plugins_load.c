/* The plugin registry: plugins.yaml parsing and its errors, where the file comes from, how a
 * backend's library is found, loading (good and broken plugins) and choosing a backend. */
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

/* ---- helpers ------------------------------------------------------------------------------ */

static char g_tmp[256];   /* a fresh directory per test */
static char g_cwd[4096];  /* restored after tests that chdir */

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qvl-test-plugins-XXXXXX");
    if (!mkdtemp(g_tmp)) return -1;
    if (!getcwd(g_cwd, sizeof g_cwd)) return -1;
    unsetenv("QVL_PLUGINS");
    qvl_log_level_set(QVL_LOG_WARN);
    return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state) {
    (void)state;
    if (chdir(g_cwd) != 0) return -1;
    unsetenv("QVL_PLUGINS");
    return nftw(g_tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* g_tmp/name in buf */
static const char *tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", g_tmp, name);
    return buf;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

/* stderr into a file while the registry logs its warnings. */
static int g_saved_stderr = -1;
static char g_capture[512];

static void capture_begin(void) {
    tmp_path(g_capture, sizeof g_capture, "stderr.txt");
    fflush(stderr);
    g_saved_stderr = dup(2);
    assert_true(g_saved_stderr >= 0);
    int fd = open(g_capture, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_true(dup2(fd, 2) >= 0);
    close(fd);
}

static const char *capture_end(void) {
    fflush(stderr);
    dup2(g_saved_stderr, 2);
    close(g_saved_stderr);
    g_saved_stderr = -1;
    return read_text(g_capture);
}

static size_t count_lines(const char *s) {
    size_t n = 0;
    for (; *s; s++)
        if (*s == '\n') n++;
    return n;
}

#define FAKE_PATH "/etc/qvl-test/plugins.yaml"

static qvl_plugin_config *parse_ok(const char *text) {
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_plugins_parse_string(text, strlen(text), FAKE_PATH, &cfg, &err);
    if (st != QVL_OK) fail_msg("parse failed: %s", err.msg);
    assert_non_null(cfg);
    return cfg;
}

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

/* A plugins.yaml in g_tmp listing the given entries text; returns its path in buf. */
static const char *write_config(char *buf, size_t size, const char *entries) {
    char text[4096];
    snprintf(text, sizeof text, "backends:\n%s", entries);
    tmp_path(buf, size, "plugins.yaml");
    write_text(buf, text);
    return buf;
}

static qvl_plugin_config *config_of(const char *entries) {
    char path[512];
    write_config(path, sizeof path, entries);
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    if (qvl_plugins_parse_file(path, &cfg, &err) != QVL_OK) fail_msg("%s", err.msg);
    return cfg;
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
                                      "  - {name: d, priority: 7}\n"
                                      "  - name: e-2\n"
                                      "    priority: -3\n");
    assert_int_equal(cfg->n, 5);
    const char *order[] = {"b", "d", "a", "c", "e-2"};
    const long prio[] = {7, 7, 0, 0, -3};
    const bool required[] = {true, false, false, false, false};
    const int line[] = {3, 8, 2, 6, 9};
    for (size_t i = 0; i < 5; i++) {
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

/* ---- resolving libraries ------------------------------------------------------------------ */

static void test_resolve_library(void **state) {
    (void)state;
    qvl_plugin_config *cfg = parse_ok("backends:\n"
                                      "  - name: rel\n"
                                      "    library: lib/libqvl-rel.so\n"
                                      "  - name: abs\n"
                                      "    library: /opt/x/libqvl-abs.so\n"
                                      "  - name: up\n"
                                      "    library: ../build/libqvl-up.so\n"
                                      "  - name: nosuch_backend\n");
    char *path = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_plugin_resolve_library(cfg, &cfg->specs[0], &path, &err), QVL_OK);
    assert_string_equal(path, "/etc/qvl-test/lib/libqvl-rel.so");
    free(path);
    assert_int_equal(qvl_plugin_resolve_library(cfg, &cfg->specs[1], &path, &err), QVL_OK);
    assert_string_equal(path, "/opt/x/libqvl-abs.so");
    free(path);
    assert_int_equal(qvl_plugin_resolve_library(cfg, &cfg->specs[2], &path, &err), QVL_OK);
    assert_string_equal(path, "/etc/qvl-test/../build/libqvl-up.so");
    free(path);

    /* No library and nothing installed: an error listing where it looked. */
    assert_int_equal(qvl_plugin_resolve_library(cfg, &cfg->specs[3], &path, &err),
                     QVL_E_NOT_FOUND);
    assert_null(path);
    assert_contains(err.msg, "libqvl-nosuch_backend.so");
    assert_contains(err.msg, "/../backends/nosuch_backend");
    assert_contains(err.msg, "/../lib/qvl");
    qvl_plugins_free(cfg);

    /* A config file in the current directory still gives a path with a '/'. */
    const char *text = "backends:\n  - name: here\n    library: libqvl-here.so\n";
    assert_int_equal(qvl_plugins_parse_string(text, strlen(text), "plugins.yaml", &cfg, &err),
                     QVL_OK);
    assert_int_equal(qvl_plugin_resolve_library(cfg, &cfg->specs[0], &path, &err), QVL_OK);
    assert_string_equal(path, "./libqvl-here.so");
    free(path);
    qvl_plugins_free(cfg);

    /* Without a file there is nothing to be relative to. */
    assert_int_equal(qvl_plugins_parse_string(text, strlen(text), NULL, &cfg, &err), QVL_OK);
    assert_int_equal(qvl_plugin_resolve_library(cfg, &cfg->specs[0], &path, &err),
                     QVL_E_INVALID);
    assert_null(path);
    qvl_plugins_free(cfg);

    /* Names are checked before they become parts of paths. */
    qvl_plugin_spec evil = {0};
    evil.name = "../../tmp/evil";
    assert_int_equal(qvl_plugin_resolve_library(NULL, &evil, &path, &err), QVL_E_INVALID);
    assert_null(path);
    assert_contains(err.msg, "../../tmp/evil");
}

static void test_relative_library_loads(void **state) {
    (void)state;
    char conf[512], lib[512], link[600], yaml[600];
    tmp_path(conf, sizeof conf, "conf");
    tmp_path(lib, sizeof lib, "lib");
    assert_int_equal(mkdir(conf, 0700), 0);
    assert_int_equal(mkdir(lib, 0700), 0);
    snprintf(link, sizeof link, "%s/libqvl-dummy.so", lib);
    assert_int_equal(symlink(QVL_TEST_DUMMY_SO, link), 0);
    snprintf(yaml, sizeof yaml, "%s/plugins.yaml", conf);
    write_text(yaml, "backends:\n  - name: dummy\n    library: ../lib/libqvl-dummy.so\n");

    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_plugins_parse_file(yaml, &cfg, &err), QVL_OK);
    qvl_loaded_backend *lb = NULL;
    if (qvl_backend_select(cfg, NULL, &lb, &err) != QVL_OK) fail_msg("%s", err.msg);
    char expected[700];
    snprintf(expected, sizeof expected, "%s/../lib/libqvl-dummy.so", conf);
    assert_string_equal(lb->library_path, expected);
    assert_string_equal(lb->name, "dummy");
    qvl_backend_unload(lb);
    qvl_plugins_free(cfg);
}

/* ---- loading ------------------------------------------------------------------------------ */

/* Loading `name` from library `so` must fail with status; the message names the file. */
static void expect_load_error(const char *name, const char *so, qvl_status status,
                              const char *words) {
    char entry[1024];
    snprintf(entry, sizeof entry, "  - name: %s\n    library: %s\n", name, so);
    qvl_plugin_config *cfg = config_of(entry);
    qvl_loaded_backend *lb = (qvl_loaded_backend *)1;
    qvl_error err = {0};
    qvl_status st = qvl_backend_load(cfg, &cfg->specs[0], &lb, &err);
    assert_null(lb);
    if (st != status) fail_msg("status %d (%s), expected %d: %s", st, qvl_status_str(st), status,
                               err.msg);
    assert_contains(err.msg, so);
    assert_contains(err.msg, words);
    qvl_plugins_free(cfg);
}

static void test_load_broken_plugins(void **state) {
    (void)state;
    char expected[128];
    snprintf(expected, sizeof expected, "built for backend ABI %u, qvl expects %u",
             QVL_BACKEND_ABI + 1u, QVL_BACKEND_ABI);
    expect_load_error("wrong_abi", QVL_TEST_WRONG_ABI_SO, QVL_E_ABI, expected);
    expect_load_error("no_entry", QVL_TEST_NO_ENTRY_SO, QVL_E_ABI,
                      "not a qvl backend (no qvl_backend_entry symbol)");
    expect_load_error("null_entry", QVL_TEST_NULL_ENTRY_SO, QVL_E_ABI, "returned NULL");
    expect_load_error("incomplete", QVL_TEST_INCOMPLETE_SO, QVL_E_ABI, "has no release");
    /* The table's name must match the name it is listed under. */
    expect_load_error("other", QVL_TEST_DUMMY_SO, QVL_E_ABI, "'dummy'");

    char path[512];
    tmp_path(path, sizeof path, "libqvl-missing.so");
    expect_load_error("missing", path, QVL_E_NOT_FOUND, "missing");
    tmp_path(path, sizeof path, "libqvl-text.so");
    write_text(path, "this is not an ELF file\n");
    expect_load_error("text", path, QVL_E_IO, "cannot load");
}

static void test_load_dummy_with_options(void **state) {
    (void)state;
    char entry[1024];
    snprintf(entry, sizeof entry,
             "  - name: dummy\n    library: %s\n    options: { label: blue, fail: 0 }\n",
             QVL_TEST_DUMMY_SO);
    qvl_plugin_config *cfg = config_of(entry);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    if (qvl_backend_load(cfg, &cfg->specs[0], &lb, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_plugins_free(cfg); /* the loaded backend does not depend on the config */

    assert_string_equal(lb->name, "dummy");
    assert_string_equal(lb->library_path, QVL_TEST_DUMMY_SO);
    assert_non_null(lb->dl_handle);
    assert_int_equal(lb->iface->abi, QVL_BACKEND_ABI);
    qvl_device_info info;
    assert_int_equal(lb->iface->describe(lb->be, &info), QVL_OK);
    assert_string_equal(info.name, "dummy blue");
    assert_null(qvl_backend_kernel(lb->iface, (qvl_op)0));

    /* The table is usable: a buffer round trip. */
    qvl_buffer buf;
    assert_int_equal(lb->iface->buffer_alloc(lb->be, 16, &buf, &err), QVL_OK);
    const char in[16] = "fifteen chars..";
    char out[16] = {0};
    assert_int_equal(lb->iface->upload(lb->be, buf.data, in, sizeof in, &err), QVL_OK);
    assert_int_equal(lb->iface->download(lb->be, out, buf.data, sizeof out, &err), QVL_OK);
    assert_memory_equal(in, out, sizeof in);
    lb->iface->buffer_free(lb->be, &buf);
    qvl_backend_unload(lb);
    qvl_backend_unload(NULL);
}

static void test_init_failure(void **state) {
    (void)state;
    char entry[1024];
    snprintf(entry, sizeof entry, "  - name: dummy\n    library: %s\n    options: { fail: 1 }\n",
             QVL_TEST_DUMMY_SO);
    qvl_plugin_config *cfg = config_of(entry);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_backend_load(cfg, &cfg->specs[0], &lb, &err), QVL_E_UNSUPPORTED);
    assert_null(lb);
    assert_contains(err.msg, QVL_TEST_DUMMY_SO);
    assert_contains(err.msg, "init failed: dummy refuses to start (option fail: 1)");

    /* In a selection it is skipped like any other failure; alone, nothing is usable. */
    capture_begin();
    qvl_status st = qvl_backend_select(cfg, NULL, &lb, &err);
    const char *log = capture_end();
    assert_int_equal(st, QVL_E_NOT_FOUND);
    assert_null(lb);
    assert_contains(err.msg, "no usable backend (tried: dummy)");
    assert_int_equal(count_lines(log), 1);
    assert_contains(log, "refuses to start");
    qvl_plugins_free(cfg);

    /* An init that fails without a word still gives a line naming the library and the status. */
    snprintf(entry, sizeof entry, "  - name: dummy\n    library: %s\n    options: { fail: 2 }\n",
             QVL_TEST_DUMMY_SO);
    cfg = config_of(entry);
    assert_int_equal(qvl_backend_load(cfg, &cfg->specs[0], &lb, &err), QVL_E_BACKEND);
    assert_null(lb);
    assert_contains(err.msg, QVL_TEST_DUMMY_SO);
    assert_contains(err.msg, "init failed: backend failure");
    qvl_plugins_free(cfg);
}

/* ---- where libraries come from -------------------------------------------------------------- */

/* Child mode of this program (see main): load backend `name`, listed without a library, and
 * exit with the status, so the parent can run it with another LD_LIBRARY_PATH and directory
 * (the dynamic loader reads LD_LIBRARY_PATH once, at start-up). */
static int load_unlisted_child(const char *name) {
    char text[256];
    snprintf(text, sizeof text, "backends:\n  - name: %s\n", name);
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_plugins_parse_string(text, strlen(text), NULL, &cfg, &err);
    qvl_loaded_backend *lb = NULL;
    if (st == QVL_OK) st = qvl_backend_load(cfg, &cfg->specs[0], &lb, &err);
    printf("child: %s: %s\n", qvl_status_str(st), st == QVL_OK ? lb->library_path : err.msg);
    qvl_backend_unload(lb);
    qvl_plugins_free(cfg);
    return (int)st;
}

/* A libqvl-dummy.so in the current directory and in LD_LIBRARY_PATH is not found for a backend
 * listed without a library: only the documented search path is looked at, never the current
 * directory or the loader's own search (every path given to dlopen holds a '/'). */
static void test_no_library_from_cwd_or_ld_library_path(void **state) {
    (void)state;
    char dir[512], so[600];
    tmp_path(dir, sizeof dir, "planted");
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(so, sizeof so, "%s/libqvl-dummy.so", dir);
    assert_int_equal(symlink(QVL_TEST_DUMMY_SO, so), 0);

    /* The planted library itself is a good backend when named by path. */
    char entry[1024];
    snprintf(entry, sizeof entry, "  - name: dummy\n    library: %s\n", so);
    qvl_plugin_config *cfg = config_of(entry);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    if (qvl_backend_load(cfg, &cfg->specs[0], &lb, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_backend_unload(lb);
    qvl_plugins_free(cfg);

    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) skip();
    self[n] = '\0';
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (chdir(dir) != 0 || setenv("LD_LIBRARY_PATH", dir, 1) != 0) _exit(127);
        execl(self, self, "--load-unlisted", "dummy", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) != QVL_E_NOT_FOUND)
        fail_msg("child exited with %d, expected %d (not found)", WEXITSTATUS(status),
                 QVL_E_NOT_FOUND);
}

/* ---- selecting ------------------------------------------------------------------------------ */

static void test_select_falls_back(void **state) {
    (void)state;
    char entries[2048];
    snprintf(entries, sizeof entries,
             "  - name: dummy\n    library: %s\n    priority: 5\n    options: { label: low }\n"
             "  - name: wrong_abi\n    library: %s\n    priority: 10\n",
             QVL_TEST_DUMMY_SO, QVL_TEST_WRONG_ABI_SO);
    qvl_plugin_config *cfg = config_of(entries);
    assert_string_equal(cfg->specs[0].name, "wrong_abi");

    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    capture_begin();
    qvl_status st = qvl_backend_select(cfg, NULL, &lb, &err);
    const char *log = capture_end();
    if (st != QVL_OK) fail_msg("%s", err.msg);
    assert_string_equal(lb->name, "dummy");
    qvl_device_info info;
    assert_int_equal(lb->iface->describe(lb->be, &info), QVL_OK);
    assert_string_equal(info.name, "dummy low");
    qvl_backend_unload(lb);

    /* Exactly one warning line, naming the backend, its file and the reason. */
    assert_int_equal(count_lines(log), 1);
    assert_contains(log, "warning");
    assert_contains(log, "wrong_abi");
    assert_contains(log, QVL_TEST_WRONG_ABI_SO);
    assert_contains(log, "ABI");
    qvl_plugins_free(cfg);
}

static void test_select_all_fail(void **state) {
    (void)state;
    char entries[2048];
    snprintf(entries, sizeof entries,
             "  - name: wrong_abi\n    library: %s\n    priority: 3\n"
             "  - name: null_entry\n    library: %s\n    priority: 2\n"
             "  - name: not_built_anywhere\n    priority: 1\n",
             QVL_TEST_WRONG_ABI_SO, QVL_TEST_NULL_ENTRY_SO);
    qvl_plugin_config *cfg = config_of(entries);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    capture_begin();
    qvl_status st = qvl_backend_select(cfg, NULL, &lb, &err);
    const char *log = capture_end();
    assert_int_equal(st, QVL_E_NOT_FOUND);
    assert_null(lb);
    assert_contains(err.msg,
                    "no usable backend (tried: wrong_abi, null_entry, not_built_anywhere)");
    assert_int_equal(count_lines(log), 3);
    assert_contains(log, "libqvl-not_built_anywhere.so not found");
    qvl_plugins_free(cfg);
}

static void test_select_required_failure_is_an_error(void **state) {
    (void)state;
    char entries[2048];
    snprintf(entries, sizeof entries,
             "  - name: no_entry\n    library: %s\n    priority: 10\n    required: true\n"
             "  - name: dummy\n    library: %s\n    priority: 5\n",
             QVL_TEST_NO_ENTRY_SO, QVL_TEST_DUMMY_SO);
    qvl_plugin_config *cfg = config_of(entries);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_backend_select(cfg, NULL, &lb, &err), QVL_E_ABI);
    assert_null(lb);
    assert_contains(err.msg, "no_entry");
    assert_contains(err.msg, QVL_TEST_NO_ENTRY_SO);
    assert_contains(err.msg, "required");
    qvl_plugins_free(cfg);
}

static void test_select_forced(void **state) {
    (void)state;
    char entries[2048];
    snprintf(entries, sizeof entries,
             "  - name: dummy\n    library: %s\n    priority: 1\n    options: { label: forced }\n"
             "  - name: wrong_abi\n    library: %s\n    priority: 10\n",
             QVL_TEST_DUMMY_SO, QVL_TEST_WRONG_ABI_SO);
    qvl_plugin_config *cfg = config_of(entries);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};

    /* A listed backend: its own entry, options included, even at lower priority. */
    if (qvl_backend_select(cfg, "dummy", &lb, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_device_info info;
    assert_int_equal(lb->iface->describe(lb->be, &info), QVL_OK);
    assert_string_equal(info.name, "dummy forced");
    qvl_backend_unload(lb);
    lb = NULL;

    /* A forced backend that fails is an error, with no fallback. */
    assert_int_equal(qvl_backend_select(cfg, "wrong_abi", &lb, &err), QVL_E_ABI);
    assert_null(lb);
    assert_contains(err.msg, QVL_TEST_WRONG_ABI_SO);

    /* Not listed: the default search, and its failure is an error saying where it looked. */
    assert_int_equal(qvl_backend_select(cfg, "not_listed", &lb, &err), QVL_E_NOT_FOUND);
    assert_null(lb);
    assert_contains(err.msg, "libqvl-not_listed.so");
    assert_contains(err.msg, "looked in");

    assert_int_equal(qvl_backend_select(cfg, "a/b", &lb, &err), QVL_E_INVALID);
    assert_null(lb);
    qvl_plugins_free(cfg);
}

static void test_backend_open(void **state) {
    (void)state;
    char path[512], entries[2048];
    snprintf(entries, sizeof entries,
             "  - name: null_entry\n    library: %s\n    priority: 10\n"
             "  - name: dummy\n    library: %s\n",
             QVL_TEST_NULL_ENTRY_SO, QVL_TEST_DUMMY_SO);
    write_config(path, sizeof path, entries);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};

    capture_begin();
    qvl_status st = qvl_backend_open(path, NULL, &lb, &err);
    capture_end();
    if (st != QVL_OK) fail_msg("%s", err.msg);
    assert_string_equal(lb->name, "dummy");
    qvl_backend_unload(lb);
    lb = NULL;

    assert_int_equal(qvl_backend_open(path, "null_entry", &lb, &err), QVL_E_ABI);
    assert_null(lb);

    /* Through the environment as well. */
    setenv("QVL_PLUGINS", path, 1);
    assert_int_equal(qvl_backend_open(NULL, "dummy", &lb, &err), QVL_OK);
    qvl_backend_unload(lb);
}

/* The real reference backend, found with no `library:` next to this test executable. */
static void test_reference_by_default_search(void **state) {
    (void)state;
#ifdef QVL_REFERENCE_SO
    struct stat sb;
    if (stat(QVL_REFERENCE_SO, &sb) != 0) {
        printf("skipped: %s is not built\n", QVL_REFERENCE_SO);
        skip();
    }
    const char *text = "backends:\n  - name: reference\n";
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_plugins_parse_string(text, strlen(text), NULL, &cfg, &err), QVL_OK);
    qvl_loaded_backend *lb = NULL;
    if (qvl_backend_select(cfg, NULL, &lb, &err) != QVL_OK) fail_msg("%s", err.msg);
    char found[PATH_MAX], built[PATH_MAX];
    assert_non_null(realpath(lb->library_path, found));
    assert_non_null(realpath(QVL_REFERENCE_SO, built));
    assert_string_equal(found, built);
    assert_string_equal(lb->iface->name, "reference");
    qvl_device_info info;
    assert_int_equal(lb->iface->describe(lb->be, &info), QVL_OK);
    qvl_backend_unload(lb);
    qvl_plugins_free(cfg);
#else
    printf("skipped: the reference backend (target qvl-reference) is not part of this build\n");
    skip();
#endif
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--load-unlisted") == 0) return load_unlisted_child(argv[2]);
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
        cmocka_unit_test_setup_teardown(test_resolve_library, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relative_library_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_broken_plugins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_dummy_with_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_init_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_library_from_cwd_or_ld_library_path, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_select_falls_back, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_all_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_select_required_failure_is_an_error, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_select_forced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reference_by_default_search, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
