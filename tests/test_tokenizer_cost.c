/* What a stranger's tokenizer.json can make encoding cost: a Split regex that
 * backtracks heavily on every character is refused with one line instead of running for
 * minutes, while real pre-tokenizer regexes keep working on long runs; added tokens are found in
 * one pass whatever their length (a 1 MiB added token over 300,000 characters took minutes when
 * every position was tried forwards; ctest's TIMEOUT for this program catches that), with the
 * same leftmost-longest answers as a direct search on random cases. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/tokenizer.h"

/* Qwen's pre-tokenizer regex, JSON-escaped. */
#define QWEN_REGEX                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "            \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
/* From the issue: about 5.8 million backtracking steps at every character. */
#define HOSTILE_REGEX "(?s:.{0,180}.{0,180}.{0,180})\\\\x{10FFFF}|(?s:.)"

/* A tokenizer with one token per byte of "abc", the byte-level space (id 3) and "x" (id 4), no
 * merges, the given Split regex and added tokens (a JSON array body). */
static qvl_tokenizer *make(const char *regex, const char *added) {
    const char *fmt =
        "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":{\"type\":\"NFC\"},"
        "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"%s\"},\"behavior\":\"Isolated\",\"invert\":false},"
        "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
        "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"unk_token\":null,"
        "\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"\\u0120\":3,\"x\":4},\"merges\":[]}}";
    const size_t cap = strlen(fmt) + strlen(regex) + strlen(added) + 1;
    char *json = malloc(cap);
    assert_non_null(json);
    snprintf(json, cap, fmt, added, regex);
    qvl_tokenizer *tok = NULL;
    qvl_error err = {0};
    if (qvl_tokenizer_load_buffer(json, strlen(json), "t.json", &tok, &err) != QVL_OK)
        fail_msg("%s", err.msg);
    free(json);
    return tok;
}

static void test_costly_split_regex_is_refused(void **state) {
    (void)state;
    qvl_tokenizer *tok = make(HOSTILE_REGEX, "");
    char text[2700];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (char)('a' + i % 3);
    int32_t *ids = NULL;
    size_t n = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_tokenizer_encode(tok, text, sizeof text, &ids, &n, &err), QVL_E_LIMIT);
    assert_null(ids);
    if (!strstr(err.msg, "pre-tokenizer regex too costly at byte") || strchr(err.msg, '\n'))
        fail_msg("message: %s", err.msg);
    /* The same tokenizer still handles a text where the regex stays cheap. */
    assert_int_equal(qvl_tokenizer_encode(tok, "ab", 2, &ids, &n, &err), QVL_OK);
    assert_int_equal(n, 2);
    free(ids);
    qvl_tokenizer_free(tok);
}

/* Long runs make Qwen's regex backtrack over the whole run once (\s*[\r\n]+ fails, \s+(?!\S)
 * gives one character back): a few steps a byte, inside the allowance. */
static void test_real_regex_on_long_runs(void **state) {
    (void)state;
    qvl_tokenizer *tok = make(QWEN_REGEX, "");
    const size_t run = 200000;
    char *text = malloc(run + 1);
    memset(text, ' ', run);
    text[run] = 'x';
    int32_t *ids = NULL;
    size_t n = 0;
    qvl_error err = {0};
    if (qvl_tokenizer_encode(tok, text, run + 1, &ids, &n, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(n, run + 1);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[run], 4);
    free(ids);
    memset(text, 'a', run);
    assert_int_equal(qvl_tokenizer_encode(tok, text, run, &ids, &n, &err), QVL_OK);
    assert_int_equal(n, run);
    free(ids);
    free(text);
    qvl_tokenizer_free(tok);
}

static void test_long_added_token(void **state) {
    (void)state;
    const size_t tlen = 1 << 20, n_text = 300000;
    const char *head = "{\"id\":10,\"content\":\"";
    const char *tail = "\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                       "\"normalized\":false,\"special\":true}";
    char *added = malloc(strlen(head) + tlen + strlen(tail) + 1);
    strcpy(added, head);
    memset(added + strlen(head), 'a', tlen);
    strcpy(added + strlen(head) + tlen, tail);
    qvl_tokenizer *tok = make(QWEN_REGEX, added);
    free(added);
    /* 300,000 'a': every position is a prefix of the token, none holds all of it. */
    char *text = malloc(tlen + 2);
    memset(text, 'a', tlen + 2);
    int32_t *ids = NULL;
    size_t n = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_tokenizer_encode(tok, text, n_text, &ids, &n, &err), QVL_OK);
    assert_int_equal(n, n_text);
    for (size_t i = 0; i < n; i++)
        if (ids[i] != 0) fail_msg("id %zu is %d", i, ids[i]);
    free(ids);
    /* "b" + the token + "a": found after one byte, and the rest is ordinary. */
    text[0] = 'b';
    assert_int_equal(qvl_tokenizer_encode(tok, text, tlen + 2, &ids, &n, &err), QVL_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 10);
    assert_int_equal(ids[2], 0);
    free(ids);
    free(text);
    qvl_tokenizer_free(tok);
}

/* ---- leftmost-longest against a direct search ----------------------------------------------- */

typedef struct rtok {
    char s[8];
    int normalized;
} rtok;

/* Longest token (of the given normalized flag) starting at i; -1 when none. A later duplicate
 * wins, as in the tokenizer. */
static int longest_at(const rtok *t, int nt, int normalized, const char *text, size_t len, size_t i) {
    int best = -1;
    size_t best_len = 0;
    for (int k = 0; k < nt; k++) {
        const size_t l = strlen(t[k].s);
        if (t[k].normalized != normalized || l > len - i || memcmp(text + i, t[k].s, l) != 0) continue;
        if (l > best_len || (l == best_len && best >= 0)) best = k, best_len = l;
    }
    return best;
}

/* Expected ids: raw (non-normalized) tokens leftmost-longest over the text, then normalized
 * ones in each gap, every other byte its own token ('a' 0, 'b' 1, 'c' 2). */
static size_t expect_gap(const rtok *t, int nt, const char *text, size_t from, size_t to,
                         int32_t *out) {
    size_t n = 0;
    for (size_t i = from; i < to;) {
        const int k = longest_at(t, nt, 1, text, to, i);
        if (k >= 0) {
            out[n++] = 100 + k;
            i += strlen(t[k].s);
        } else {
            out[n++] = text[i++] - 'a';
        }
    }
    return n;
}

static size_t expect(const rtok *t, int nt, const char *text, size_t len, int32_t *out) {
    size_t n = 0, gap = 0;
    for (size_t i = 0; i < len;) {
        const int k = longest_at(t, nt, 0, text, len, i);
        if (k < 0) {
            i++;
            continue;
        }
        n += expect_gap(t, nt, text, gap, i, out + n);
        out[n++] = 100 + k;
        i += strlen(t[k].s);
        gap = i;
    }
    return n + expect_gap(t, nt, text, gap, len, out + n);
}

static void test_added_tokens_match_a_direct_search(void **state) {
    (void)state;
    unsigned seed = 12345;
#define RND() (seed = seed * 1103515245u + 12345u, (seed >> 16) & 0x7fff)
    for (int round = 0; round < 60; round++) {
        rtok t[10];
        const int nt = 1 + (int)(RND() % 10);
        char added[2048];
        size_t al = 0;
        for (int k = 0; k < nt; k++) {
            const int l = 1 + (int)(RND() % 5);
            for (int c = 0; c < l; c++) t[k].s[c] = (char)('a' + RND() % 3);
            t[k].s[l] = '\0';
            t[k].normalized = (int)(RND() % 2);
            al += (size_t)snprintf(added + al, sizeof added - al,
                                   "%s{\"id\":%d,\"content\":\"%s\",\"single_word\":false,"
                                   "\"lstrip\":false,\"rstrip\":false,\"normalized\":%s,"
                                   "\"special\":false}",
                                   k ? "," : "", 100 + k, t[k].s, t[k].normalized ? "true" : "false");
        }
        qvl_tokenizer *tok = make(QWEN_REGEX, added);
        for (int s = 0; s < 30; s++) {
            char text[64];
            const size_t len = RND() % sizeof text;
            for (size_t i = 0; i < len; i++) text[i] = (char)('a' + RND() % 3);
            int32_t want[64];
            const size_t nw = expect(t, nt, text, len, want);
            int32_t *ids = NULL;
            size_t n = 0;
            qvl_error err = {0};
            if (qvl_tokenizer_encode(tok, text, len, &ids, &n, &err) != QVL_OK) fail_msg("%s", err.msg);
            if (n != nw || memcmp(ids, want, n * sizeof *ids) != 0)
                fail_msg("round %d text \"%.*s\": %zu ids, expected %zu (first %d vs %d)", round,
                         (int)len, text, n, nw, n ? ids[0] : -1, nw ? want[0] : -1);
            free(ids);
        }
        qvl_tokenizer_free(tok);
    }
#undef RND
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_costly_split_regex_is_refused),
        cmocka_unit_test(test_real_regex_on_long_runs),
        cmocka_unit_test(test_long_added_token),
        cmocka_unit_test(test_added_tokens_match_a_direct_search),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
