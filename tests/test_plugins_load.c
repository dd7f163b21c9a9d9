/* The plugin registry, part 2: how a backend's library is found, loading (good and broken
 * plugins), where libraries may come from, and choosing a backend. Part 1 (plugins.yaml parsing
 * and where the file comes from) is test_plugins_yaml.c; the helpers both use are
 * test_plugins_util.c. */
#define _XOPEN_SOURCE 700

#include <dlfcn.h>
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

static char *read_text(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    static char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
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

static qvl_plugin_config *config_of(const char *entries) {
    char path[512];
    write_config(path, sizeof path, entries);
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    if (qvl_plugins_parse_file(path, &cfg, &err) != QVL_OK) fail_msg("%s", err.msg);
    return cfg;
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

/* Lifetime (backend.h): unloading releases the instance, but the library stays mapped until
 * the process exits, so threads a plugin's runtime keeps (OpenMP, BLAS pools) never run in
 * unmapped code. The entry's `fallback: false` reaches the loaded backend. */
static void test_library_stays_mapped(void **state) {
    (void)state;
    char entry[1024];
    snprintf(entry, sizeof entry,
             "  - name: dummy\n    library: %s\n    fallback: false\n", QVL_TEST_DUMMY_SO);
    qvl_plugin_config *cfg = config_of(entry);
    qvl_loaded_backend *lb = NULL;
    qvl_error err = {0};
    if (qvl_backend_load(cfg, &cfg->specs[0], &lb, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_plugins_free(cfg);
    assert_true(lb->no_fallback);
    qvl_backend_unload(lb);
    /* RTLD_NOLOAD finds a library only while it is loaded. */
    void *still = dlopen(QVL_TEST_DUMMY_SO, RTLD_NOW | RTLD_NOLOAD);
    assert_non_null(still);
    dlclose(still);
}

/* qvl_backend_select with the log at info level (what -v shows; skipped backends are info
 * lines), its log lines returned in *log. */
static qvl_status select_at_verbose(const qvl_plugin_config *cfg, qvl_loaded_backend **lb,
                                    qvl_error *err, const char **log) {
    qvl_log_level_set(QVL_LOG_INFO);
    capture_begin();
    qvl_status st = qvl_backend_select(cfg, NULL, lb, err);
    *log = capture_end();
    qvl_log_level_set(QVL_LOG_WARN);
    return st;
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

    /* In a selection it is skipped like any other failure; alone, nothing is usable. A skip
     * is one info line (shown at -v: a lower-priority backend taking over is by design). */
    const char *log = NULL;
    qvl_status st = select_at_verbose(cfg, &lb, &err, &log);
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
    const char *log = NULL;
    qvl_status st = select_at_verbose(cfg, &lb, &err, &log);
    if (st != QVL_OK) fail_msg("%s", err.msg);
    assert_string_equal(lb->name, "dummy");
    qvl_device_info info;
    assert_int_equal(lb->iface->describe(lb->be, &info), QVL_OK);
    assert_string_equal(info.name, "dummy low");
    qvl_backend_unload(lb);

    /* Exactly one line (at -v), naming the backend, its file and the reason. */
    assert_int_equal(count_lines(log), 1);
    assert_contains(log, "skipped");
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
    const char *log = NULL;
    qvl_status st = select_at_verbose(cfg, &lb, &err, &log);
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
        cmocka_unit_test_setup_teardown(test_resolve_library, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relative_library_loads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_broken_plugins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_dummy_with_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_library_stays_mapped, setup, teardown),
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
