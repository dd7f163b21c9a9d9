/* qvl serve's Host check (tools/serve/serve_host.c): which listening addresses count as
 * loopback, and which Host values a loopback listener answers, with and without --allow-host.
 * The end-to-end cases run in tests/serve_hostile_conn_test.py; the non-loopback listener is
 * checked here only, since a test must not listen beyond loopback. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include <cmocka.h>

#include "serve_host.h"

static void test_loopback_addresses(void **state) {
    (void)state;
    assert_true(serve_host_is_loopback_address("127.0.0.1"));
    assert_true(serve_host_is_loopback_address("127.255.3.4"));
    assert_true(serve_host_is_loopback_address("::1"));
    assert_true(serve_host_is_loopback_address("::ffff:127.0.0.1"));
    assert_false(serve_host_is_loopback_address("0.0.0.0"));
    assert_false(serve_host_is_loopback_address("::"));
    assert_false(serve_host_is_loopback_address("10.1.2.3"));
    assert_false(serve_host_is_loopback_address("::ffff:10.0.0.1"));
    assert_false(serve_host_is_loopback_address("128.0.0.1"));
}

static void test_loopback_listener(void **state) {
    (void)state;
    static const char *const yes[] = {"localhost", "LOCALHOST:8080", "localhost.", "a.localhost",
                                      "b.a.localhost:1", "127.0.0.1", "127.9.9.9:65535",
                                      "[::1]", "[::1]:8080"};
    static const char *const no[] = {"evil.example", "localhost.evil.example", ".localhost",
                                     "127.1", "0x7f.0.0.1", "0.0.0.0", "[::2]", "[::1",
                                     "localhost:", "localhost:80a", "localhost:80:80", "",
                                     "evil.example:8080", "xlocalhost"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        assert_true(serve_host_allowed(yes[i], true, NULL));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        assert_false(serve_host_allowed(no[i], true, NULL));
    assert_true(serve_host_allowed(NULL, true, NULL)); /* HTTP/1.0: no Host at all */
}

static void test_allow_list(void **state) {
    (void)state;
    const char *allow = " qvl.example , Other.Example,,";
    assert_true(serve_host_allowed("qvl.example", true, allow));
    assert_true(serve_host_allowed("QVL.example:8080", true, allow));
    assert_true(serve_host_allowed("other.example", true, allow));
    assert_true(serve_host_allowed("localhost", true, allow));
    assert_false(serve_host_allowed("evil.example", true, allow));
    assert_false(serve_host_allowed("qvl.example.evil", true, allow));
    assert_false(serve_host_allowed("example", true, allow));
    assert_true(serve_host_allowed("anything.at.all", true, "*"));
    assert_true(serve_host_allowed("anything", true, "a.example,*"));
}

static void test_other_listener(void **state) {
    (void)state;
    /* Listening beyond loopback (--host 0.0.0.0) was asked for: every Host is answered. */
    assert_true(serve_host_allowed("evil.example", false, NULL));
    assert_true(serve_host_allowed("10.0.0.1:8080", false, NULL));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loopback_addresses),
        cmocka_unit_test(test_loopback_listener),
        cmocka_unit_test(test_allow_list),
        cmocka_unit_test(test_other_listener),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
