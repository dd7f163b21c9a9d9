#define _XOPEN_SOURCE 700
/* What the plugin registry tests share: see test_plugins_util.h. */
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

char g_tmp[256];
static char g_cwd[4096];  /* restored after tests that chdir */

int setup(void **state) {
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

int teardown(void **state) {
    (void)state;
    if (chdir(g_cwd) != 0) return -1;
    unsetenv("QVL_PLUGINS");
    return nftw(g_tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "%s/%s", g_tmp, name);
    return buf;
}

void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle))
        fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

qvl_plugin_config *parse_ok(const char *text) {
    qvl_plugin_config *cfg = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_plugins_parse_string(text, strlen(text), FAKE_PATH, &cfg, &err);
    if (st != QVL_OK) fail_msg("parse failed: %s", err.msg);
    assert_non_null(cfg);
    return cfg;
}

const char *write_config(char *buf, size_t size, const char *entries) {
    char text[4096];
    snprintf(text, sizeof text, "backends:\n%s", entries);
    tmp_path(buf, size, "plugins.yaml");
    write_text(buf, text);
    return buf;
}
