/* qvl serve's request body JSON (tools/serve/serve_json.c): the value count refused before
 * cJSON builds anything, the per-thread allocation budget, and what cJSON alone would accept
 * silently (U+0000 in strings, bytes after the value, duplicate keys, vision tokens in text),
 * each refused with the status and the field the client can act on. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "qvl/json_bounds.h"
#include "serve/serve_json.h"
#include "serve/serve_request.h"

static const char chat[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/* A chat request with `extra` spliced in as further members of the root object. */
static char *chat_with(const char *extra) {
    const size_t n = strlen(chat) + strlen(extra) + 2;
    char *b = malloc(n);
    assert_non_null(b);
    snprintf(b, n, "%.*s,%s}", (int)strlen(chat) - 1, chat, extra);
    return b;
}

#define TEXT(s) (s), strlen(s)

static serve_bad parse_bad(const char *body, size_t len) {
    serve_bad bad;
    memset(&bad, 0, sizeof bad);
    cJSON *root = serve_json_parse(body, len, SERVE_MAX_JSON_DEPTH, &bad, NULL);
    if (root) fail_msg("accepted: %.200s", body);
    assert_non_null(bad.message);
    assert_null(strchr(bad.message, '\n'));
    return bad;
}

static void parses(const char *body, size_t len) {
    serve_bad bad;
    memset(&bad, 0, sizeof bad);
    cJSON *root = serve_json_parse(body, len, SERVE_MAX_JSON_DEPTH, &bad, NULL);
    if (!root) fail_msg("refused (%d %s): %.200s", bad.status, bad.message, body);
    cJSON_Delete(root);
}

/* "[0,0,...,0]" of n values inside a chat request: about 2 bytes a value. */
static char *padded(size_t n, const char *element, size_t *len) {
    const size_t el = strlen(element);
    char *pad = malloc(n * (el + 1) + 16);
    assert_non_null(pad);
    size_t o = (size_t)sprintf(pad, "\"pad\":[");
    for (size_t i = 0; i < n; i++) {
        memcpy(pad + o, element, el);
        o += el;
        pad[o++] = i + 1 < n ? ',' : ']';
    }
    pad[o] = '\0';
    char *b = chat_with(pad);
    free(pad);
    *len = strlen(b);
    return b;
}

static void test_value_count_refused_before_parsing(void **state) {
    (void)state;
    const char *elements[] = {"0", "\"\"", "{}", "[]", "null"};
    for (size_t k = 0; k < sizeof elements / sizeof elements[0]; k++) {
        size_t len;
        char *b = padded(SERVE_MAX_JSON_VALUES + 1, elements[k], &len);
        serve_json_usage u;
        serve_bad bad;
        memset(&bad, 0, sizeof bad);
        assert_null(serve_json_parse(b, len, SERVE_MAX_JSON_DEPTH, &bad, &u));
        assert_int_equal(bad.status, 413);
        assert_non_null(strstr(bad.message, "SERVE_MAX_JSON_VALUES"));
        assert_int_equal(u.peak, 0); /* refused before cJSON allocated anything */
        free(b);
    }
}

/* Fed in pieces of every size, as the body arrives. */
static bool stream_accepts(const char *body, size_t len, size_t piece) {
    serve_json_stream st = {0};
    for (size_t o = 0; o < len; o += piece)
        if (!serve_json_stream_feed(&st, body + o, len - o < piece ? len - o : piece)) return false;
    return true;
}

/* The count as a body arrives refuses what the full count refuses once it has seen enough
 * commas, never a body the full count accepts, and wherever the pieces split it (inside a
 * string, between a backslash and the character it escapes). */
static void test_stream_count_refuses_early_and_soundly(void **state) {
    (void)state;
    const size_t pieces[] = {1, 2, 3, 7, 4096, 1 << 30};
    for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
        size_t len;
        char *over = padded(SERVE_MAX_JSON_VALUES + 1, "0", &len);
        assert_false(stream_accepts(over, len, pieces[p]));
        free(over);
        /* As many values as allowed: the chat's own values plus the array's stay in bounds of
         * what the full count says, and the stream must agree with it. */
        char *at = padded(SERVE_MAX_JSON_VALUES - 16, "0", &len);
        qvl_json_shape shape;
        qvl_json_measure(at, len, &shape);
        assert_true(shape.values <= SERVE_MAX_JSON_VALUES);
        assert_true(stream_accepts(at, len, pieces[p]));
        free(at);
        /* Commas inside strings, escaped quotes and backslashes count for nothing. */
        const size_t n = 3 * (size_t)SERVE_MAX_JSON_VALUES;
        char *text = malloc(n + 64);
        assert_non_null(text);
        size_t o = (size_t)sprintf(text, "{\"a\":\"");
        for (size_t i = 0; o < n; i++) {
            const char *chunk = i % 3 == 0 ? "," : i % 3 == 1 ? "\\\"" : "\\\\";
            o += (size_t)sprintf(text + o, "%s", chunk);
        }
        o += (size_t)sprintf(text + o, "\",\"b\":[1,2]}");
        assert_true(stream_accepts(text, o, pieces[p]));
        free(text);
    }
}

/* The densest valid body under the count parses within its budget, and the budget is what
 * serve_json.h promises (len + 128 bytes a value + slack). */
static void test_budget_holds_any_valid_body(void **state) {
    (void)state;
    const char *elements[] = {"0", "\"\"", "{}", "[]", "{\"a\":\"b\"}", "\"a long string value\""};
    for (size_t k = 0; k < sizeof elements / sizeof elements[0]; k++) {
        size_t len;
        char *b = padded(SERVE_MAX_JSON_VALUES / 2 - 8, elements[k], &len);
        serve_json_usage u;
        serve_bad bad;
        memset(&bad, 0, sizeof bad);
        cJSON *root = serve_json_parse(b, len, SERVE_MAX_JSON_DEPTH, &bad, &u);
        if (!root) fail_msg("element %s refused: %s", elements[k], bad.message);
        assert_false(u.exceeded);
        assert_true(u.peak > 0 && u.peak <= u.budget);
        assert_true(u.budget <= len + (size_t)SERVE_MAX_JSON_VALUES * SERVE_JSON_BYTES_PER_VALUE +
                                   SERVE_JSON_BUDGET_SLACK);
        cJSON_Delete(root);
        free(b);
    }
}

/* The hooks refuse an allocation past the budget (cJSON fails cleanly), count nothing outside
 * a budget, and leave blocks that plain free() may release. */
static void test_budget_refuses_and_is_per_thread(void **state) {
    (void)state;
    serve_json_install_hooks();
    size_t len;
    char *b = padded(10000, "\"xyz\"", &len);
    serve_json_budget_begin(64 << 10);
    cJSON *root = cJSON_ParseWithLength(b, len);
    serve_json_usage u = serve_json_budget_end();
    assert_null(root);
    assert_true(u.exceeded);
    assert_true(u.peak <= (64 << 10));
    /* no budget on this thread now: the same text parses */
    root = cJSON_ParseWithLength(b, len);
    assert_non_null(root);
    char *printed = cJSON_PrintUnformatted(root);
    assert_non_null(printed);
    free(printed); /* what the server's response code does with cJSON's output */
    cJSON_Delete(root);
    free(b);
}

static void *parse_on_other_thread(void *arg) {
    size_t len;
    char *b = padded(20000, "0", &len);
    cJSON *root = cJSON_ParseWithLength(b, len);
    *(bool *)arg = root != NULL;
    cJSON_Delete(root);
    free(b);
    return NULL;
}

static void test_budget_does_not_reach_other_threads(void **state) {
    (void)state;
    serve_json_install_hooks();
    serve_json_budget_begin(1024); /* far too small for the other thread's tree */
    bool parsed = false;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, parse_on_other_thread, &parsed), 0);
    pthread_join(t, NULL);
    serve_json_usage u = serve_json_budget_end();
    assert_true(parsed);
    assert_false(u.exceeded);
    assert_int_equal(u.peak, 0);
}

static void test_nul_in_strings_refused_with_field(void **state) {
    (void)state;
    serve_bad bad = parse_bad(TEXT(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\\u0000b\"}]}]}"));
    assert_int_equal(bad.status, 400);
    assert_string_equal(bad.param, "messages[1].content[0].text");
    assert_non_null(strstr(bad.message, "U+0000"));
    /* a raw NUL byte inside a string */
    static const char raw[] = "{\"model\":\"a\0b\",\"messages\":[]}";
    bad = parse_bad(raw, sizeof raw - 1);
    assert_string_equal(bad.param, "model");
    /* in a key: named by its object */
    bad = parse_bad(TEXT("{\"messages\":[{\"ro\\u0000le\":\"user\"}]}"));
    assert_string_equal(bad.param, "messages[0]");
    /* an escaped backslash followed by "u0000" is no NUL */
    parses(TEXT("{\"a\":\"\\\\u0000\",\"b\":\"\\u0001\"}"));
    char where[96];
    assert_false(serve_json_find_nul(TEXT("{\"a\":\"\\\\u0000\"}"), where, sizeof where));
    assert_true(serve_json_find_nul(TEXT("[1,2,\"\\u0000\"]"), where, sizeof where));
    assert_string_equal(where, "[2]");
}

static void test_trailing_bytes_refused(void **state) {
    (void)state;
    const char *bad_tails[] = {"x", "{}", " 1", "\"a\"", "\n}"};
    for (size_t k = 0; k < sizeof bad_tails / sizeof bad_tails[0]; k++) {
        char b[256];
        snprintf(b, sizeof b, "%s%s", chat, bad_tails[k]);
        serve_bad bad = parse_bad(b, strlen(b));
        assert_int_equal(bad.status, 400);
        assert_non_null(strstr(bad.message, "after"));
    }
    static const char nul_tail[] = "{\"a\":1}\0";
    assert_int_equal(parse_bad(nul_tail, sizeof nul_tail - 1).status, 400);
    char b[256];
    snprintf(b, sizeof b, "%s \r\n\t ", chat);
    parses(b, strlen(b));
}

static void test_duplicate_keys_refused_at_every_level(void **state) {
    (void)state;
    char *b = chat_with("\"messages\":[]");
    serve_bad bad = parse_bad(b, strlen(b));
    free(b);
    assert_int_equal(bad.status, 400);
    assert_string_equal(bad.param, "messages");
    assert_non_null(strstr(bad.message, "duplicate key 'messages'"));
    static const char nested[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"role\":\"system\","
        "\"content\":\"b\"}]}";
    bad = parse_bad(nested, sizeof nested - 1);
    assert_string_equal(bad.param, "messages[1].role");
    /* keys compare unescaped: "\u0061" is "a" */
    static const char escaped[] = "{\"stream_options\":{\"a\":1,\"\\u0061\":2}}";
    bad = parse_bad(escaped, sizeof escaped - 1);
    assert_string_equal(bad.param, "stream_options.a");
    parses(TEXT("{\"a\":{\"a\":{\"a\":1}},\"b\":[{\"a\":1},{\"a\":2}]}"));
}

static serve_bad request_bad(const char *body) {
    qvl_sampling_params defaults;
    qvl_sampling_params_default(&defaults);
    const serve_parse_ctx ctx = {.defaults = &defaults, .max_images = 4, .ctx = 4096};
    serve_request *r = NULL;
    serve_bad bad;
    if (serve_request_parse(body, strlen(body), &ctx, &r, &bad)) {
        serve_request_free(r);
        fail_msg("accepted: %s", body);
    }
    return bad;
}

static void test_vision_tokens_in_text_refused(void **state) {
    (void)state;
    const char *tokens[] = {"<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>"};
    for (size_t k = 0; k < 4; k++) {
        char b[512];
        snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"system\",\"content\":\"x\"},{\"role\":"
                 "\"user\",\"content\":\"look: %s\"}]}", tokens[k]);
        serve_bad bad = request_bad(b);
        assert_int_equal(bad.status, 400);
        assert_string_equal(bad.param, "messages[1].content");
        assert_non_null(strstr(bad.message, tokens[k]));
        snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                 "\"text\":\"a\"},{\"type\":\"text\",\"text\":\"%s\"}]}]}", tokens[k]);
        bad = request_bad(b);
        assert_int_equal(bad.status, 400);
        assert_string_equal(bad.param, "messages[0].content[1]");
        /* split over two text parts: whole only once the parts are joined */
        const size_t half = strlen(tokens[k]) / 2;
        snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                 "\"text\":\"a%.*s\"},{\"type\":\"text\",\"text\":\"%s b\"}]}]}", (int)half,
                 tokens[k], tokens[k] + half);
        bad = request_bad(b);
        assert_int_equal(bad.status, 400);
        assert_string_equal(bad.param, "messages");
        assert_non_null(strstr(bad.message, tokens[k]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_count_refused_before_parsing),
        cmocka_unit_test(test_stream_count_refuses_early_and_soundly),
        cmocka_unit_test(test_budget_holds_any_valid_body),
        cmocka_unit_test(test_budget_refuses_and_is_per_thread),
        cmocka_unit_test(test_budget_does_not_reach_other_threads),
        cmocka_unit_test(test_nul_in_strings_refused_with_field),
        cmocka_unit_test(test_trailing_bytes_refused),
        cmocka_unit_test(test_duplicate_keys_refused_at_every_level),
        cmocka_unit_test(test_vision_tokens_in_text_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
