/* qvl_read_file (qvl/file.h) and the loaders built on it: a path that is not a regular file
 * (FIFO, directory, device) is refused at once with one line naming it instead of blocking or
 * reading forever; size limits are exact; missing and empty files behave as documented. */
#define _GNU_SOURCE
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

#include "qvl/file.h"
#include "qvl/gen_config.h"
#include "qvl/image.h"
#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/registry.h"
#include "qvl/tokenizer.h"

static char dir[256];

static void assert_one_line_naming(const qvl_error *err, const char *path, const char *what) {
    assert_true(err->msg[0] != '\0');
    assert_null(strchr(err->msg, '\n'));
    if (strncmp(err->msg, path, strlen(path)) != 0)
        fail_msg("expected the message to start with %s: \"%s\"", path, err->msg);
    if (what && !strstr(err->msg, what)) fail_msg("expected \"%s\" in \"%s\"", what, err->msg);
}

static void path_in_dir(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static int setup(void **state) {
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/qvl-read-file-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_reads_a_regular_file_whole(void **state) {
    (void)state;
    char path[300];
    path_in_dir(path, sizeof path, "data.bin");
    const char data[] = "ab\0cd\n"; /* a NUL inside is kept */
    write_file(path, data, sizeof data - 1);
    char *buf = NULL;
    size_t len = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(path, 1024, QVL_E_IO, &buf, &len, &err), QVL_OK);
    assert_int_equal(len, sizeof data - 1);
    assert_memory_equal(buf, data, len);
    assert_int_equal(buf[len], '\0');
    free(buf);

    /* Exactly at the limit is fine, one byte over is not, and the limit is named. */
    assert_int_equal(qvl_read_file(path, len, QVL_E_IO, &buf, &len, &err), QVL_OK);
    free(buf);
    assert_int_equal(qvl_read_file(path, sizeof data - 2, QVL_E_IO, &buf, &len, &err),
                     QVL_E_LIMIT);
    assert_null(buf);
    assert_int_equal(len, 0);
    assert_one_line_naming(&err, path, "limit of 5 bytes");
}

static void test_empty_file_is_empty_text(void **state) {
    (void)state;
    char path[300];
    path_in_dir(path, sizeof path, "empty");
    write_file(path, "", 0);
    char *buf = NULL;
    size_t len = 99;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(path, 16, QVL_E_IO, &buf, &len, &err), QVL_OK);
    assert_non_null(buf);
    assert_int_equal(len, 0);
    assert_string_equal(buf, "");
    free(buf);
}

/* A file larger than a 4 KiB first guess and larger than the growth steps. */
static void test_large_file_read_in_steps(void **state) {
    (void)state;
    char path[300];
    path_in_dir(path, sizeof path, "large");
    const size_t n = 300000;
    char *data = malloc(n);
    assert_non_null(data);
    for (size_t i = 0; i < n; i++) data[i] = (char)(i * 7 + 3);
    write_file(path, data, n);
    char *buf = NULL;
    size_t len = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(path, n, QVL_E_IO, &buf, &len, &err), QVL_OK);
    assert_int_equal(len, n);
    assert_memory_equal(buf, data, n);
    free(buf);
    assert_int_equal(qvl_read_file(path, n - 1, QVL_E_IO, &buf, &len, &err), QVL_E_LIMIT);
    free(data);
}

/* /proc files say size 0 but have content: the size is only a hint. */
static void test_size_is_only_a_hint(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    qvl_error err = {0};
    if (access("/proc/self/status", R_OK) != 0) skip();
    assert_int_equal(qvl_read_file("/proc/self/status", 1 << 20, QVL_E_IO, &buf, &len, &err),
                     QVL_OK);
    assert_true(len > 0);
    assert_non_null(strstr(buf, "Pid:"));
    free(buf);
}

static void test_missing_file_status_is_the_callers(void **state) {
    (void)state;
    char path[300];
    path_in_dir(path, sizeof path, "absent.json");
    char *buf = (char *)1;
    size_t len = 7;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(path, 16, QVL_E_NOT_FOUND, &buf, &len, &err), QVL_E_NOT_FOUND);
    assert_null(buf);
    assert_int_equal(len, 0);
    assert_one_line_naming(&err, path, "cannot open");
    assert_int_equal(qvl_read_file(path, 16, QVL_E_IO, &buf, &len, &err), QVL_E_IO);
    assert_int_equal(qvl_read_file("", 16, QVL_E_IO, &buf, &len, &err), QVL_E_INVALID);
}

static void test_directory_is_refused(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(dir, 16, QVL_E_NOT_FOUND, &buf, &len, &err), QVL_E_IO);
    assert_one_line_naming(&err, dir, "not a regular file (a directory)");
}

/* Without a writer, opening a FIFO for reading blocks and reading it never ends: refused at
 * once instead (a hang here fails the test by its ctest timeout). */
static void test_fifo_is_refused_without_blocking(void **state) {
    (void)state;
    char path[300];
    path_in_dir(path, sizeof path, "fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    char *buf = NULL;
    size_t len = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_read_file(path, 16, QVL_E_IO, &buf, &len, &err), QVL_E_IO);
    assert_null(buf);
    assert_one_line_naming(&err, path, "not a regular file (a FIFO)");
}

static void test_endless_device_is_refused(void **state) {
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    qvl_error err = {0};
    if (access("/dev/zero", R_OK) != 0) skip();
    assert_int_equal(qvl_read_file("/dev/zero", 1 << 30, QVL_E_IO, &buf, &len, &err), QVL_E_IO);
    assert_null(buf);
    assert_one_line_naming(&err, "/dev/zero", "a character device");
}

/* Every loader of a stranger's file goes through the same check: a FIFO named as config.json,
 * generation_config.json, preprocessor_config.json, tokenizer.json, plugins.yaml or a picture
 * is refused at once with the path in the message. */
static void test_loaders_refuse_a_fifo(void **state) {
    (void)state;
    char path[300];
    path_in_dir(path, sizeof path, "loader-fifo");
    assert_int_equal(mkfifo(path, 0600), 0);
    qvl_error err = {0};

    qvl_qwen3vl_config cfg;
    assert_int_equal(qvl_qwen3vl_config_load(path, &cfg, &err), QVL_E_IO);
    assert_one_line_naming(&err, path, "FIFO");

    qvl_gen_config gc;
    assert_int_equal(qvl_gen_config_load(path, &gc, &err), QVL_E_IO);
    assert_one_line_naming(&err, path, "FIFO");

    qvl_preprocess_config pc;
    assert_int_equal(qvl_preprocess_config_load(path, NULL, &pc, &err), QVL_E_IO);
    assert_one_line_naming(&err, path, "FIFO");

    qvl_tokenizer *tok = NULL;
    assert_int_equal(qvl_tokenizer_load(path, &tok, &err), QVL_E_IO);
    assert_null(tok);
    assert_one_line_naming(&err, path, "FIFO");

    qvl_plugin_config *plugins = NULL;
    assert_int_equal(qvl_plugins_parse_file(path, &plugins, &err), QVL_E_IO);
    assert_null(plugins);
    assert_one_line_naming(&err, path, "FIFO");

    qvl_image img;
    assert_int_equal(qvl_image_load(path, &img, &err), QVL_E_IO);
    assert_null(img.rgb);
    assert_one_line_naming(&err, path, "FIFO");
}

static void test_loaders_refuse_a_device(void **state) {
    (void)state;
    if (access("/dev/zero", R_OK) != 0) skip();
    qvl_error err = {0};
    qvl_tokenizer *tok = NULL;
    assert_int_equal(qvl_tokenizer_load("/dev/zero", &tok, &err), QVL_E_IO);
    assert_one_line_naming(&err, "/dev/zero", "device");
    qvl_image img;
    assert_int_equal(qvl_image_load("/dev/zero", &img, &err), QVL_E_IO);
    assert_one_line_naming(&err, "/dev/zero", "device");
    qvl_qwen3vl_config cfg;
    assert_int_equal(qvl_qwen3vl_config_load("/dev/zero", &cfg, &err), QVL_E_IO);
    assert_one_line_naming(&err, "/dev/zero", "device");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_a_regular_file_whole),
        cmocka_unit_test(test_empty_file_is_empty_text),
        cmocka_unit_test(test_large_file_read_in_steps),
        cmocka_unit_test(test_size_is_only_a_hint),
        cmocka_unit_test(test_missing_file_status_is_the_callers),
        cmocka_unit_test(test_directory_is_refused),
        cmocka_unit_test(test_fifo_is_refused_without_blocking),
        cmocka_unit_test(test_endless_device_is_refused),
        cmocka_unit_test(test_loaders_refuse_a_fifo),
        cmocka_unit_test(test_loaders_refuse_a_device),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
