/* Streaming output never splits a UTF-8 character and replaces what cannot be one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/text_stream.h"

typedef struct sink {
    char buf[256];
    size_t len;
    int calls;
    int bad_cuts; /* emits that ended inside a character */
} sink;

static void collect(const char *text, size_t len, void *user) {
    sink *s = user;
    memcpy(s->buf + s->len, text, len);
    s->len += len;
    s->calls++;
    unsigned char last = (unsigned char)text[len - 1];
    /* A chunk ends inside a character when its last byte is a lead byte of a longer one, or
     * a continuation byte that does not complete its character: check by re-scanning. */
    size_t i = 0;
    while (i < len) {
        unsigned char c = (unsigned char)text[i];
        size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (i + n > len) s->bad_cuts++;
        i += n;
    }
    (void)last;
}

static void test_split_character_held_back(void **state) {
    (void)state;
    sink s = {0};
    qvl_text_stream ts;
    qvl_text_stream_init(&ts, collect, &s);
    const char *euro = "a\xE2\x82\xAC"; /* "a€" fed one byte at a time */
    for (size_t i = 0; i < 4; i++) qvl_text_stream_feed(&ts, euro + i, 1);
    qvl_text_stream_flush(&ts);
    assert_int_equal(s.len, 4);
    assert_memory_equal(s.buf, euro, 4);
    assert_int_equal(s.bad_cuts, 0);
}

static void test_emoji_across_tokens(void **state) {
    (void)state;
    sink s = {0};
    qvl_text_stream ts;
    qvl_text_stream_init(&ts, collect, &s);
    qvl_text_stream_feed(&ts, "hi \xF0\x9F", 5); /* first half of U+1F600 */
    assert_int_equal(s.len, 3);
    qvl_text_stream_feed(&ts, "\x98\x80!", 3);
    qvl_text_stream_flush(&ts);
    assert_int_equal(s.len, 8);
    assert_memory_equal(s.buf, "hi \xF0\x9F\x98\x80!", 8);
    assert_int_equal(s.bad_cuts, 0);
}

static void test_invalid_bytes_replaced(void **state) {
    (void)state;
    sink s = {0};
    qvl_text_stream ts;
    qvl_text_stream_init(&ts, collect, &s);
    qvl_text_stream_feed(&ts, "\xFF" "a" "\xE2\x82" "b", 5); /* stray byte; cut-off character */
    qvl_text_stream_feed(&ts, "\xC3", 1);                    /* unfinished at the end */
    qvl_text_stream_flush(&ts);
    const char *want = "\xEF\xBF\xBD" "a" "\xEF\xBF\xBD" "b" "\xEF\xBF\xBD";
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.buf, want, strlen(want));
}

static void test_overlong_and_surrogate_rejected(void **state) {
    (void)state;
    sink s = {0};
    qvl_text_stream ts;
    qvl_text_stream_init(&ts, collect, &s);
    qvl_text_stream_feed(&ts, "\xE0\x80\xAF", 3); /* overlong '/' */
    qvl_text_stream_feed(&ts, "\xED\xA0\x80", 3); /* surrogate U+D800 */
    qvl_text_stream_flush(&ts);
    /* Each bad lead becomes U+FFFD; the orphaned continuation bytes each become one too. */
    for (size_t i = 0; i < s.len; i += 3) assert_memory_equal(s.buf + i, "\xEF\xBF\xBD", 3);
    assert_int_equal(s.len % 3, 0);
    assert_true(s.len >= 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_character_held_back),
        cmocka_unit_test(test_emoji_across_tokens),
        cmocka_unit_test(test_invalid_bytes_replaced),
        cmocka_unit_test(test_overlong_and_surrogate_rejected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
