/* What the plugin registry tests (test_plugins_yaml.c, test_plugins_load.c) share: a fresh
 * temporary directory per test, files written into it, and parsing a plugins.yaml text. */
#ifndef QVL_TEST_PLUGINS_UTIL_H
#define QVL_TEST_PLUGINS_UTIL_H

#include <stddef.h>

#include "qvl/registry.h"

extern char g_tmp[256]; /* a fresh directory per test */

/* cmocka setup and teardown of every test: g_tmp made (and removed with its contents), the
 * working directory restored, $QVL_PLUGINS unset, warnings logged. */
int setup(void **state);
int teardown(void **state);

/* g_tmp/name in buf */
const char *tmp_path(char *buf, size_t size, const char *name);
void write_text(const char *path, const char *text);
void assert_contains(const char *haystack, const char *needle);

/* Where parsed strings say they come from. */
#define FAKE_PATH "/etc/qvl-test/plugins.yaml"

/* text parsed as if read from FAKE_PATH; the test fails if it does not parse. */
qvl_plugin_config *parse_ok(const char *text);
/* A plugins.yaml in g_tmp listing the given entries text; returns its path in buf. */
const char *write_config(char *buf, size_t size, const char *entries);

#endif
