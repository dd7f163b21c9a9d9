/* Tokenizer tests: the 46 Qwen2 reference cases (from HF tokenizers / llama.cpp), special
 * tokens, lookups, decoding with U+FFFD, hostile input, small hand-made tokenizers for the
 * BPE/added-token rules, and broken tokenizer.json files. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, access, unlink */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "qvl/tokenizer.h"

#define DATA QVL_SHARED_DATA_DIR
#define TOKENIZER_JSON DATA "/qwen3-vl-2b-instruct/tokenizer.json"
#define TESTS_INP DATA "/tokenizer-tests/qwen2.inp"
#define TESTS_OUT DATA "/tokenizer-tests/qwen2.out"

static qvl_tokenizer *g_qwen; /* NULL when the shared data is absent */

static int load_qwen(void **state) {
    (void)state;
    if (access(TOKENIZER_JSON, R_OK) != 0) {
        printf("skipping Qwen tokenizer tests: %s not found\n", TOKENIZER_JSON);
        return 0;
    }
    qvl_error err = {0};
    if (qvl_tokenizer_load(TOKENIZER_JSON, &g_qwen, &err) != QVL_OK) {
        printf("cannot load %s: %s\n", TOKENIZER_JSON, err.msg);
        return -1;
    }
    return 0;
}

static int free_qwen(void **state) {
    (void)state;
    qvl_tokenizer_free(g_qwen);
    g_qwen = NULL;
    return 0;
}

static qvl_tokenizer *need_qwen(void) {
    if (!g_qwen) skip();
    return g_qwen;
}

/* ---- helpers ---- */

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    assert_non_null(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
            assert_non_null(buf);
        }
    }
    fclose(f);
    buf[n] = '\0';
    *len = n;
    return buf;
}

static void encode(qvl_tokenizer *tok, const char *text, size_t len, int32_t **ids, size_t *n) {
    qvl_error err = {0};
    qvl_status st = qvl_tokenizer_encode(tok, text, len, ids, n, &err);
    if (st != QVL_OK) fail_msg("encode failed: %s", err.msg);
    assert_non_null(*ids);
}

/* The bytes of the tokens, concatenated (the raw inverse of encode). */
static char *pieces(const qvl_tokenizer *tok, const int32_t *ids, size_t n, size_t *len) {
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t plen;
        qvl_error err = {0};
        assert_int_equal(qvl_tokenizer_token_to_piece(tok, ids[i], &p, &plen, &err), QVL_OK);
        while (used + plen > cap) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
        memcpy(out + used, p, plen);
        used += plen;
    }
    *len = used;
    return out;
}

static char *decode(const qvl_tokenizer *tok, const int32_t *ids, size_t n, bool skip_special,
                    size_t *len) {
    char *text = NULL;
    size_t tlen = 0;
    qvl_error err = {0};
    qvl_status st = qvl_tokenizer_decode(tok, ids, n, skip_special, &text, &tlen, &err);
    if (st != QVL_OK) fail_msg("decode failed: %s", err.msg);
    assert_non_null(text);
    assert_int_equal(strlen(text) <= tlen, 1);
    if (len) *len = tlen;
    return text;
}

static void assert_ids(const int32_t *got, size_t n_got, const int32_t *want, size_t n_want) {
    if (n_got == n_want && memcmp(got, want, n_got * sizeof *got) == 0) return;
    char msg[1024];
    int k = snprintf(msg, sizeof msg, "got %zu ids:", n_got);
    for (size_t i = 0; i < n_got && k < 900; i++)
        k += snprintf(msg + k, sizeof msg - k, " %d", got[i]);
    k += snprintf(msg + k, sizeof msg - k, " / want %zu:", n_want);
    for (size_t i = 0; i < n_want && k < 1000; i++)
        k += snprintf(msg + k, sizeof msg - k, " %d", want[i]);
    fail_msg("%s", msg);
}

static void assert_encodes_to(qvl_tokenizer *tok, const char *text, const int32_t *want,
                              size_t n_want) {
    int32_t *ids;
    size_t n;
    encode(tok, text, strlen(text), &ids, &n);
    assert_ids(ids, n, want, n_want);
    free(ids);
}

/* ---- the reference cases ---- */

/* llama.cpp's framing: the whole .inp split on "\n__ggml_vocab_test__\n"; .out has one line
 * of space-separated ids per case. */
static void test_reference_cases(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    size_t inp_len, out_len;
    char *inp = read_file(TESTS_INP, &inp_len);
    char *out = read_file(TESTS_OUT, &out_len);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    const size_t sep_len = sizeof sep - 1;

    char *line = out;
    size_t cases = 0, failures = 0, pos = 0;
    while (pos < inp_len) {
        char *next = strstr(inp + pos, sep);
        size_t len = next ? (size_t)(next - (inp + pos)) : inp_len - pos;
        const char *text = inp + pos;
        pos += len + (next ? sep_len : 0);

        /* the expected ids */
        assert_non_null(line);
        assert_true(*line != '\0');
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        int32_t want[512];
        size_t n_want = 0;
        for (char *p = line, *end; ; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            assert_true(n_want < 512);
            want[n_want++] = (int32_t)v;
        }
        line = eol ? eol + 1 : line + strlen(line);

        int32_t *ids;
        size_t n;
        encode(tok, text, len, &ids, &n);
        if (n != n_want || memcmp(ids, want, n * sizeof *ids) != 0) {
            failures++;
            printf("case %zu (\"%.*s\"): got", cases, (int)len, text);
            for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
            printf("\n   want");
            for (size_t i = 0; i < n_want; i++) printf(" %d", want[i]);
            printf("\n");
        }
        /* decoding gives the text back */
        size_t dlen;
        char *back = decode(tok, ids, n, false, &dlen);
        if (dlen != len || memcmp(back, text, len) != 0) {
            failures++;
            printf("case %zu: decode(encode(x)) differs from x\n", cases);
        }
        free(back);
        free(ids);
        cases++;
    }
    assert_int_equal(*line, '\0'); /* no expected lines left over */
    assert_int_equal(cases, 46);
    assert_int_equal(failures, 0);
    free(inp);
    free(out);
}

/* ---- special tokens and lookups (ids from docs/MODEL.md, "Special tokens") ---- */

static void test_special_tokens_in_text(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    assert_encodes_to(tok, "<|im_start|>user\n", (const int32_t[]){151644, 872, 198}, 3);
    assert_encodes_to(tok, "<|im_end|>\n<|im_start|>assistant\n",
                      (const int32_t[]){151645, 198, 151644, 77091, 198}, 5);
    assert_encodes_to(tok, "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>",
                      (const int32_t[]){151652, 151655, 151655, 151653}, 4);
    /* non-special added tokens are cut out too */
    assert_encodes_to(tok, "<tool_call></tool_call>", (const int32_t[]){151657, 151658}, 2);

    /* a special token glued to words splits them */
    int32_t *a, *b, *ab;
    size_t na, nb, nab;
    encode(tok, "hello", 5, &a, &na);
    encode(tok, "world", 5, &b, &nb);
    const char glued[] = "hello<|endoftext|>world";
    encode(tok, glued, sizeof glued - 1, &ab, &nab);
    assert_int_equal(nab, na + 1 + nb);
    assert_memory_equal(ab, a, na * sizeof *a);
    assert_int_equal(ab[na], 151643);
    assert_memory_equal(ab + na + 1, b, nb * sizeof *b);
    free(a);
    free(b);
    free(ab);

    /* an incomplete special string is ordinary text */
    int32_t *ids;
    size_t n;
    encode(tok, "<|im_start|", 11, &ids, &n);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] < 151643);
    free(ids);
}

static void test_lookups(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    assert_int_equal(qvl_tokenizer_token_id(tok, "<|endoftext|>"), 151643);
    assert_int_equal(qvl_tokenizer_token_id(tok, "<|im_start|>"), 151644);
    assert_int_equal(qvl_tokenizer_token_id(tok, "<|im_end|>"), 151645);
    assert_int_equal(qvl_tokenizer_token_id(tok, "<|image_pad|>"), 151655);
    assert_int_equal(qvl_tokenizer_token_id(tok, "</think>"), 151668);
    assert_int_equal(qvl_tokenizer_token_id(tok, "user"), 872);
    assert_int_equal(qvl_tokenizer_token_id(tok, "assistant"), 77091);
    assert_int_equal(qvl_tokenizer_token_id(tok, "\xC4\x8A"), 198); /* "Ċ" = byte-level "\n" */
    assert_int_equal(qvl_tokenizer_token_id(tok, "<|no_such_token|>"), -1);
    assert_int_equal(qvl_tokenizer_token_id(tok, ""), -1);
    assert_int_equal(qvl_tokenizer_vocab_size(tok), 151669);

    assert_true(qvl_tokenizer_is_special(tok, 151643));
    assert_true(qvl_tokenizer_is_special(tok, 151656));
    assert_false(qvl_tokenizer_is_special(tok, 151657));
    assert_false(qvl_tokenizer_is_special(tok, 872));
    assert_false(qvl_tokenizer_is_special(tok, -1));
    assert_false(qvl_tokenizer_is_special(tok, 1 << 30));

    const char *p;
    size_t len;
    qvl_error err = {0};
    assert_int_equal(qvl_tokenizer_token_to_piece(tok, 198, &p, &len, &err), QVL_OK);
    assert_int_equal(len, 1);
    assert_int_equal(p[0], '\n');
    assert_int_equal(qvl_tokenizer_token_to_piece(tok, 151644, &p, &len, &err), QVL_OK);
    assert_int_equal(len, strlen("<|im_start|>"));
    assert_memory_equal(p, "<|im_start|>", len);
    assert_int_equal(qvl_tokenizer_token_to_piece(tok, 151669, &p, &len, &err), QVL_E_NOT_FOUND);
    assert_int_equal(qvl_tokenizer_token_to_piece(tok, -5, &p, &len, &err), QVL_E_NOT_FOUND);
}

static void test_decode_special(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    const int32_t ids[] = {151644, 872, 198, 151657, 151645, 1 << 28, -3};
    char *all = decode(tok, ids, 7, false, NULL);
    assert_string_equal(all, "<|im_start|>user\n<tool_call><|im_end|>");
    char *kept = decode(tok, ids, 7, true, NULL);
    assert_string_equal(kept, "user\n<tool_call>");
    free(all);
    free(kept);
    char *empty = decode(tok, NULL, 0, true, NULL);
    assert_string_equal(empty, "");
    free(empty);
}

/* ---- decoding with replacement characters ---- */

static void check_decoded(qvl_tokenizer *tok, const char *raw, size_t raw_len, const char *want) {
    int32_t *ids;
    size_t n, plen;
    encode(tok, raw, raw_len, &ids, &n);
    /* invalid bytes are kept as byte tokens, so the raw bytes survive... */
    char *p = pieces(tok, ids, n, &plen);
    assert_int_equal(plen, raw_len);
    assert_memory_equal(p, raw, raw_len);
    /* ...and decoding replaces each ill-formed part with U+FFFD */
    size_t dlen;
    char *text = decode(tok, ids, n, false, &dlen);
    assert_int_equal(dlen, strlen(want));
    assert_string_equal(text, want);
    free(text);
    free(p);
    free(ids);
}

#define FFFD "\xEF\xBF\xBD"

static void test_decode_invalid_utf8(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    check_decoded(tok, "\xE2\x82", 2, FFFD);                    /* truncated euro sign */
    check_decoded(tok, "a\xE2\x82" "b", 4, "a" FFFD "b");
    check_decoded(tok, "\xF0\x9F\x98", 3, FFFD);                /* truncated emoji */
    check_decoded(tok, "\xC0\x80", 2, FFFD FFFD);               /* overlong NUL */
    check_decoded(tok, "\xED\xA0\x80", 3, FFFD FFFD FFFD);      /* a surrogate */
    check_decoded(tok, "\xFF\xFEx\x80", 4, FFFD FFFD "x" FFFD);
    check_decoded(tok, "ok \xF4\x90\x80\x80!", 8, "ok " FFFD FFFD FFFD FFFD "!"); /* > U+10FFFF */
    check_decoded(tok, "\xE2\x82\xAC", 3, "\xE2\x82\xAC");       /* the euro sign itself */

    /* a valid character whose bytes come from different tokens decodes whole */
    int32_t *ids;
    size_t n;
    encode(tok, "\xF0\x9F\x98\x80", 4, &ids, &n); /* 😀 */
    size_t plen;
    char *p = pieces(tok, ids, n, &plen);
    assert_int_equal(plen, 4);
    char *text = decode(tok, ids, n, false, NULL);
    assert_string_equal(text, "\xF0\x9F\x98\x80");
    free(text);
    free(p);
    free(ids);
}

/* ---- hostile input ---- */

static void test_empty_and_nul(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    int32_t *ids;
    size_t n;
    encode(tok, "", 0, &ids, &n);
    assert_int_equal(n, 0);
    free(ids);
    encode(tok, NULL, 0, &ids, &n);
    assert_int_equal(n, 0);
    free(ids);

    const char text[] = "a\0b\0\0 <|im_end|>\0";
    const size_t len = sizeof text - 1;
    encode(tok, text, len, &ids, &n);
    size_t plen, dlen;
    char *p = pieces(tok, ids, n, &plen);
    assert_int_equal(plen, len);
    assert_memory_equal(p, text, len);
    char *back = decode(tok, ids, n, false, &dlen);
    assert_int_equal(dlen, len);
    assert_memory_equal(back, text, len);
    free(back);
    free(p);
    free(ids);

    qvl_error err = {0};
    assert_int_equal(qvl_tokenizer_encode(tok, NULL, 3, &ids, &n, &err), QVL_E_INVALID);
    assert_int_equal(qvl_tokenizer_encode(NULL, "x", 1, &ids, &n, &err), QVL_E_INVALID);
}

/* One megabyte of a single character: each must come back intact (the time is checked by hand
 * with qvl-bench-tokenizer; a quadratic pass would make this test crawl). Sanitizer builds run
 * the same paths on a quarter of the size. */
#if defined(__SANITIZE_ADDRESS__)
#define LONG_RUN_BYTES ((size_t)1 << 18)
#else
#define LONG_RUN_BYTES ((size_t)1 << 20)
#endif

static void test_long_runs(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    const size_t len = LONG_RUN_BYTES;
    char *text = malloc(len);
    assert_non_null(text);
    const char fills[] = {'a', ' ', '\n', '3', '!', '\t', '\0'};
    for (size_t k = 0; k < sizeof fills; k++) {
        memset(text, fills[k], len);
        int32_t *ids;
        size_t n, plen;
        encode(tok, text, len, &ids, &n);
        assert_true(n >= 1 && n <= len);
        char *p = pieces(tok, ids, n, &plen);
        assert_int_equal(plen, len);
        assert_memory_equal(p, text, len);
        free(p);
        free(ids);
    }
    /* a long run with the other text around it */
    memset(text, ' ', len);
    memcpy(text, "Hello", 5);
    memcpy(text + len - 6, "world!", 6);
    int32_t *ids;
    size_t n, plen;
    encode(tok, text, len, &ids, &n);
    char *p = pieces(tok, ids, n, &plen);
    assert_int_equal(plen, len);
    assert_memory_equal(p, text, len);
    free(p);
    free(ids);
    free(text);
}

/* Random mixtures of scripts, whitespace, special tokens and stray bytes: token bytes always
 * concatenate to the input, and valid text decodes back to itself. */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void test_random_round_trips(void **state) {
    (void)state;
    qvl_tokenizer *tok = need_qwen();
    /* all already in NFC, so the text is not changed by normalization */
    static const char *const parts[] = {
        "a", "Z", "the", " of", "'s", "'LL", " ", "  ", "\t", "\n", "\r\n", "\n\n", "0", "42",
        "12345", ".", "...", "!?", "\"", "(", "```", "\xC3\xA9", "\xC3\xB1o", "\xD0\xBF\xD1\x80",
        "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "\xE2\x80\x8D", "\xC2\xA0", "\xE3\x80\x80",
        "\xE1\x9E\x80", "\xE2\x82!", "<|im_start|>", "<|im_end|>", "<think>", "<|", "|>",
        "\xF0\x9F\xA6\x99",
    };
    const size_t n_parts = sizeof parts / sizeof parts[0];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    char text[512];
    for (int iter = 0; iter < 3000; iter++) {
        size_t len = 0;
        bool valid = true;
        int count = (int)(rng_next(&seed) % 24);
        for (int k = 0; k < count; k++) {
            uint64_t r = rng_next(&seed);
            if (r % 16 == 0) {
                /* a stray byte that can never start a character, so it cannot join its
                 * neighbours into a character that NFC would change */
                unsigned pick = (unsigned)(r >> 8) % 77;
                unsigned byte = pick < 64   ? 0x80 + pick         /* continuation bytes */
                                : pick < 66 ? 0xC0 + (pick - 64)  /* C0, C1 */
                                            : 0xF5 + (pick - 66); /* F5..FF */
                text[len++] = (char)byte;
                valid = false;
                continue;
            }
            const char *part = parts[(r >> 8) % n_parts];
            size_t plen = strlen(part);
            if (strcmp(part, "\xE2\x82!") == 0) valid = false; /* a truncated character */
            memcpy(text + len, part, plen);
            len += plen;
        }
        int32_t *ids;
        size_t n, plen;
        encode(tok, text, len, &ids, &n);
        char *p = pieces(tok, ids, n, &plen);
        if (plen != len || memcmp(p, text, len) != 0)
            fail_msg("iteration %d: token bytes differ from the input \"%.*s\"", iter, (int)len,
                     text);
        if (valid) {
            size_t dlen;
            char *back = decode(tok, ids, n, false, &dlen);
            if (dlen != len || memcmp(back, text, len) != 0)
                fail_msg("iteration %d: decode(encode(x)) != x for \"%.*s\"", iter, (int)len, text);
            free(back);
        }
        free(p);
        free(ids);
    }
}

/* ---- small hand-made tokenizers ---- */

/* Writes json to a temporary file and loads it; returns the status, err filled. */
static qvl_status load_inline(const char *json, qvl_tokenizer **tok, qvl_error *err) {
    char path[] = "/tmp/qvl_tokenizer_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(json);
    assert_int_equal(write(fd, json, len), (ssize_t)len);
    close(fd);
    *tok = (qvl_tokenizer *)(uintptr_t)1; /* must be overwritten */
    qvl_status st = qvl_tokenizer_load(path, tok, err);
    unlink(path);
    return st;
}

/* Qwen's pre-tokenizer regex, JSON-escaped. */
#define QWEN_REGEX                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "            \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

#define PRE_TOKENIZER                                                                        \
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","       \
    "\"pattern\":{\"Regex\":\"" QWEN_REGEX "\"},\"behavior\":\"Isolated\",\"invert\":false},"  \
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}"

/* "Ġ" is the byte-level space, "Ã" and "©" the two bytes of "é". */
#define SMALL_VOCAB                                                                           \
    "{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"aa\":5,\"aaa\":6,\"\\u0120\":7,\"x\":8,"     \
    "\"<\":9,\">\":13,\"y\":14,\"\\u00c3\":20,\"\\u00a9\":21,\"\\u0120a\":22}"

static qvl_tokenizer *small(const char *merges, const char *added) {
    char json[8192];
    snprintf(json, sizeof json,
             "{\"version\":\"1.0\",\"added_tokens\":[%s],\"normalizer\":{\"type\":\"NFC\"},"
             PRE_TOKENIZER ",\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\","
             "\"dropout\":null,\"unk_token\":null,\"vocab\":" SMALL_VOCAB ",\"merges\":[%s]}}",
             added, merges);
    qvl_tokenizer *tok;
    qvl_error err = {0};
    if (load_inline(json, &tok, &err) != QVL_OK) fail_msg("small tokenizer: %s", err.msg);
    return tok;
}

static void test_bpe_merge_order(void **state) {
    (void)state;
    /* the lowest rank wins wherever it is */
    qvl_tokenizer *tok = small("\"b c\",\"a b\"", "");
    assert_encodes_to(tok, "abc", (const int32_t[]){0, 4}, 2);
    qvl_tokenizer_free(tok);
    tok = small("\"a b\",\"b c\"", "");
    assert_encodes_to(tok, "abc", (const int32_t[]){3, 2}, 2);
    qvl_tokenizer_free(tok);
    /* the newer [left, right] form means the same */
    tok = small("[\"a\",\"b\"],[\"b\",\"c\"]", "");
    assert_encodes_to(tok, "abc", (const int32_t[]){3, 2}, 2);
    qvl_tokenizer_free(tok);

    /* equal ranks: leftmost first; "aaaa" -> aa|a|a -> aa|aa, never a|aaa */
    tok = small("\"a a\",\"aa a\"", "");
    assert_encodes_to(tok, "aaa", (const int32_t[]){6}, 1);
    assert_encodes_to(tok, "aaaa", (const int32_t[]){5, 5}, 2);
    assert_encodes_to(tok, "aaaaa", (const int32_t[]){5, 6}, 2);
    /* pieces are merged separately: " a" is one piece, "a" another */
    assert_encodes_to(tok, "a a", (const int32_t[]){0, 7, 0}, 3);
    qvl_tokenizer_free(tok);
    tok = small("\"\\u0120 a\"", "");
    assert_encodes_to(tok, "a a", (const int32_t[]){0, 22}, 2);
    /* bytes without a token vanish when there is no unk_token, as in `tokenizers` */
    assert_encodes_to(tok, "a?", (const int32_t[]){0}, 1);
    qvl_tokenizer_free(tok);
}

#define ADDED(id, content, special, lstrip, rstrip, normalized)                                \
    "{\"id\":" #id ",\"content\":\"" content "\",\"single_word\":false,\"lstrip\":" #lstrip    \
    ",\"rstrip\":" #rstrip ",\"normalized\":" #normalized ",\"special\":" #special "}"

static void test_added_token_rules(void **state) {
    (void)state;
    /* leftmost, then longest */
    qvl_tokenizer *tok = small("\"a b\"", ADDED(30, "<x>", true, false, false, false) ","
                                          ADDED(31, "<x>y", false, false, false, false) ","
                                          ADDED(32, "x>y", false, false, false, false));
    assert_encodes_to(tok, "ab<x>yab", (const int32_t[]){3, 31, 3}, 3);
    assert_encodes_to(tok, "<x>c", (const int32_t[]){30, 2}, 2);
    assert_encodes_to(tok, "x>y<x", (const int32_t[]){32, 9, 8}, 3);
    assert_int_equal(qvl_tokenizer_vocab_size(tok), 33);
    assert_int_equal(qvl_tokenizer_token_id(tok, "<x>y"), 31);
    assert_true(qvl_tokenizer_is_special(tok, 30));
    assert_false(qvl_tokenizer_is_special(tok, 31));
    /* ids between the vocab and the added tokens name nothing */
    const char *p;
    size_t len;
    assert_int_equal(qvl_tokenizer_token_to_piece(tok, 25, &p, &len, NULL), QVL_E_NOT_FOUND);
    qvl_tokenizer_free(tok);

    /* lstrip / rstrip swallow the whitespace around the token */
    tok = small("", ADDED(40, "<x>", true, true, true, false));
    assert_encodes_to(tok, "a  <x> \n b", (const int32_t[]){0, 40, 1}, 3);
    assert_encodes_to(tok, "<x>", (const int32_t[]){40}, 1);
    qvl_tokenizer_free(tok);

    /* normalized tokens are found after NFC: "e" + U+0301 becomes "é" */
    const char decomposed[] = "e\xCC\x81";
    tok = small("", ADDED(41, "\\u00e9", false, false, false, true));
    assert_encodes_to(tok, decomposed, (const int32_t[]){41}, 1);
    assert_encodes_to(tok, "\xC3\xA9", (const int32_t[]){41}, 1);
    qvl_tokenizer_free(tok);
    /* non-normalized ones only match the raw text; NFC still applies to the rest */
    tok = small("", ADDED(41, "\\u00e9", false, false, false, false));
    assert_encodes_to(tok, decomposed, (const int32_t[]){20, 21}, 2);
    assert_encodes_to(tok, "\xC3\xA9", (const int32_t[]){41}, 1);
    qvl_tokenizer_free(tok);
}

/* ---- broken files ---- */

static void expect_load_error(const char *json, qvl_status want, const char *fragment) {
    qvl_tokenizer *tok;
    qvl_error err = {0};
    qvl_status st = load_inline(json, &tok, &err);
    if (st != want || !strstr(err.msg, fragment))
        fail_msg("status %s, message \"%s\"; wanted %s with \"%s\"", qvl_status_str(st), err.msg,
                 qvl_status_str(want), fragment);
    assert_null(tok);
}

#define GOOD_TAIL ",\"decoder\":{\"type\":\"ByteLevel\"}," PRE_TOKENIZER
#define MODEL(vocab, merges)                                                                   \
    "\"model\":{\"type\":\"BPE\",\"vocab\":" vocab ",\"merges\":" merges "}"

static void test_broken_files(void **state) {
    (void)state;
    expect_load_error("{ this is not json", QVL_E_PARSE, "not valid JSON");
    expect_load_error("", QVL_E_PARSE, "not valid JSON");
    expect_load_error("[1, 2]", QVL_E_PARSE, "top");
    expect_load_error("{" PRE_TOKENIZER "}", QVL_E_PARSE, "model: missing");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"merges\":[]}" GOOD_TAIL "}", QVL_E_PARSE,
                      "model.vocab: missing");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0}}" GOOD_TAIL "}",
                      QVL_E_PARSE, "model.merges: missing");
    expect_load_error("{" MODEL("[\"a\"]", "[]") GOOD_TAIL "}", QVL_E_PARSE,
                      "model.vocab: expected an object");
    expect_load_error("{" MODEL("{\"a\":\"zero\"}", "[]") GOOD_TAIL "}", QVL_E_PARSE,
                      "expected a token id");
    expect_load_error("{" MODEL("{\"a\":-1}", "[]") GOOD_TAIL "}", QVL_E_PARSE,
                      "not a non-negative integer");
    expect_load_error("{" MODEL("{\"a\":0,\"b\":0}", "[]") GOOD_TAIL "}", QVL_E_PARSE,
                      "used by two tokens");
    expect_load_error("{" MODEL("{\"a\":99999999999}", "[]") GOOD_TAIL "}", QVL_E_LIMIT,
                      "exceeds the limit");
    expect_load_error("{" MODEL("{\"a\":0,\"b\":1,\"ab\":2}", "[\"a q\"]") GOOD_TAIL "}",
                      QVL_E_PARSE, "model.merges[0]: token \"q\" is not in the vocab");
    expect_load_error("{" MODEL("{\"a\":0,\"b\":1}", "[\"a b\"]") GOOD_TAIL "}", QVL_E_PARSE,
                      "merged token \"ab\" is not in the vocab");
    expect_load_error("{" MODEL("{\"a\":0,\"b\":1,\"ab\":2}", "[\"a b\",\"ab\"]") GOOD_TAIL "}",
                      QVL_E_PARSE, "model.merges[1]");
    expect_load_error("{" MODEL("{\"a\":0,\"b\":1,\"ab\":2}", "[[\"a\"]]") GOOD_TAIL "}",
                      QVL_E_PARSE, "model.merges[0]: expected");
    expect_load_error("{" MODEL("{\"a\":0}", "{}") GOOD_TAIL "}", QVL_E_PARSE,
                      "model.merges: expected an array");
    expect_load_error(
        "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0},\"merges\":[]}" GOOD_TAIL "}",
        QVL_E_UNSUPPORTED, "only BPE");
    expect_load_error("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}" GOOD_TAIL "}", QVL_E_PARSE,
                      "model.type: missing");
    expect_load_error("{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{\"a\":0},"
                      "\"merges\":[]}" GOOD_TAIL "}", QVL_E_UNSUPPORTED, "byte_fallback");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") GOOD_TAIL
                      ",\"normalizer\":{\"type\":\"Lowercase\"}}", QVL_E_UNSUPPORTED,
                      "unsupported normalizer Lowercase");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") GOOD_TAIL
                      ",\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},"
                      "{\"type\":\"NFKD\"}]}}", QVL_E_UNSUPPORTED, "unsupported normalizer NFKD");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") ",\"pre_tokenizer\":{\"type\":\"Whitespace\"}}",
                      QVL_E_UNSUPPORTED, "unsupported pre-tokenizer Whitespace");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") "}", QVL_E_UNSUPPORTED,
                      "pre_tokenizer: missing");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") ",\"pre_tokenizer\":{\"type\":\"Sequence\","
                      "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},"
                      "\"behavior\":\"Isolated\"},{\"type\":\"ByteLevel\",\"use_regex\":false}]}}",
                      QVL_E_PARSE, "bad regex");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") ",\"pre_tokenizer\":{\"type\":\"Sequence\","
                      "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                      "\"behavior\":\"Removed\"},{\"type\":\"ByteLevel\"}]}}",
                      QVL_E_UNSUPPORTED, "behavior");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") ",\"pre_tokenizer\":{\"type\":\"Sequence\","
                      "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},"
                      "\"behavior\":\"Isolated\"}]}}",
                      QVL_E_UNSUPPORTED, "no ByteLevel");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") ",\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                      "\"add_prefix_space\":true}}", QVL_E_UNSUPPORTED, "add_prefix_space");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") GOOD_TAIL ",\"added_tokens\":[{\"id\":5}]}",
                      QVL_E_PARSE, "added_tokens[0].content");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") GOOD_TAIL
                      ",\"added_tokens\":[{\"id\":5,\"content\":\"<s>\",\"single_word\":true}]}",
                      QVL_E_UNSUPPORTED, "single_word");
    expect_load_error("{" MODEL("{\"a\":0}", "[]") "," PRE_TOKENIZER
                      ",\"decoder\":{\"type\":\"WordPiece\"}}", QVL_E_UNSUPPORTED,
                      "unsupported decoder WordPiece");

    qvl_tokenizer *tok = (qvl_tokenizer *)(uintptr_t)1;
    qvl_error err = {0};
    assert_int_equal(qvl_tokenizer_load("/nonexistent/tokenizer.json", &tok, &err), QVL_E_IO);
    assert_null(tok);
    assert_non_null(strstr(err.msg, "/nonexistent/tokenizer.json"));
    qvl_tokenizer_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_cases),
        cmocka_unit_test(test_special_tokens_in_text),
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_decode_special),
        cmocka_unit_test(test_decode_invalid_utf8),
        cmocka_unit_test(test_empty_and_nul),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_random_round_trips),
        cmocka_unit_test(test_bpe_merge_order),
        cmocka_unit_test(test_added_token_rules),
        cmocka_unit_test(test_broken_files),
    };
    return cmocka_run_group_tests(tests, load_qwen, free_qwen);
}
