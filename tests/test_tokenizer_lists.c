/* The tokenizer from GGUF-style lists (qvl/tokenizer_lists.h) against the tokenizer.json the
 * lists are made from, as llama.cpp's converter makes them: every reference string and a set
 * of chat and vision prompts encode to the same ids, and every id decodes to the same text.
 * Then the one-line refusals. Skips (and says why) when the shared data is absent; the
 * fixtures' small tokenizers run always. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "qvl/tokenizer.h"
#include "qvl/tokenizer_lists.h"

#define QWEN_JSON QVL_SHARED_DATA_DIR "/qwen3-vl-2b-instruct/tokenizer.json"
#define QWEN_TESTS QVL_SHARED_DATA_DIR "/tokenizer-tests/qwen2.inp"
#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures"

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *more = realloc(buf, 2 * cap + 1);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* The lists llama.cpp's converter writes for a tokenizer.json: token i is id i up to the
 * largest id (+ pad ids UNUSED, as for a config vocab larger than the tokenizer's); added
 * tokens CONTROL when special or "<|...|>", else USER_DEFINED; merges as "left right". */
typedef struct lists {
    qvl_tokenizer_lists l;
    qvl_str *tokens, *merges;
    int32_t *types;
    char **owned;
    size_t n_owned, cap_owned;
} lists;

static const char *keep(lists *x, const char *s) {
    if (x->n_owned == x->cap_owned) { /* doubling: 300,000 strings for the real tokenizer */
        x->cap_owned = x->cap_owned ? 2 * x->cap_owned : 1024;
        x->owned = realloc(x->owned, x->cap_owned * sizeof *x->owned);
        assert_non_null(x->owned);
    }
    x->owned[x->n_owned] = strdup(s);
    assert_non_null(x->owned[x->n_owned]);
    return x->owned[x->n_owned++];
}

static void set_token(lists *x, int id, const char *s, int32_t type) {
    assert_true(id >= 0 && (size_t)id < x->l.n_tokens);
    const char *k = keep(x, s);
    x->tokens[id] = (qvl_str){k, strlen(k)};
    x->types[id] = type;
}

static bool looks_special(const char *s) {
    size_t n = strlen(s);
    return n >= 4 && strncmp(s, "<|", 2) == 0 && strcmp(s + n - 2, "|>") == 0;
}

static void lists_from_json(const char *path, size_t pad, lists *x) {
    memset(x, 0, sizeof *x);
    char *text = read_all(path, NULL);
    assert_non_null(text);
    cJSON *root = cJSON_Parse(text);
    free(text);
    assert_non_null(root);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    int max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) max_id = it->valueint > max_id ? it->valueint : max_id;
    cJSON_ArrayForEach(it, added) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        max_id = id > max_id ? id : max_id;
    }
    x->l.n_tokens = (size_t)max_id + 1 + pad;
    x->tokens = calloc(x->l.n_tokens, sizeof *x->tokens);
    x->types = calloc(x->l.n_tokens, sizeof *x->types);
    assert_true(x->tokens && x->types);
    for (size_t i = 0; i < x->l.n_tokens; i++) { /* ids no token uses */
        char padname[32];
        snprintf(padname, sizeof padname, "[PAD%zu]", i);
        set_token(x, (int)i, padname, QVL_TOKEN_UNUSED);
    }
    cJSON_ArrayForEach(it, vocab) set_token(x, it->valueint, it->string, QVL_TOKEN_NORMAL);
    cJSON_ArrayForEach(it, added) {
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        set_token(x, cJSON_GetObjectItemCaseSensitive(it, "id")->valueint, content,
                  special || looks_special(content) ? QVL_TOKEN_CONTROL : QVL_TOKEN_USER_DEFINED);
    }
    x->l.n_merges = (size_t)cJSON_GetArraySize(merges);
    x->merges = calloc(x->l.n_merges + 1, sizeof *x->merges);
    size_t i = 0;
    cJSON_ArrayForEach(it, merges) {
        char pair[1024];
        if (cJSON_IsString(it)) snprintf(pair, sizeof pair, "%s", it->valuestring);
        else snprintf(pair, sizeof pair, "%s %s", cJSON_GetArrayItem(it, 0)->valuestring,
                      cJSON_GetArrayItem(it, 1)->valuestring);
        const char *k = keep(x, pair);
        x->merges[i++] = (qvl_str){k, strlen(k)};
    }
    cJSON_Delete(root);
    x->l.model = "gpt2";
    x->l.pre = "qwen2";
    x->l.tokens = x->tokens;
    x->l.types = x->types;
    x->l.merges = x->merges;
}

static void lists_free(lists *x) {
    for (size_t i = 0; i < x->n_owned; i++) free(x->owned[i]);
    free(x->owned);
    free(x->tokens);
    free(x->types);
    free(x->merges);
}

static void assert_same_encoding(qvl_tokenizer *a, qvl_tokenizer *b, const char *text, size_t len) {
    qvl_error err = {0};
    int32_t *ia = NULL, *ib = NULL;
    size_t na = 0, nb = 0;
    assert_int_equal(qvl_tokenizer_encode(a, text, len, &ia, &na, &err), QVL_OK);
    assert_int_equal(qvl_tokenizer_encode(b, text, len, &ib, &nb, &err), QVL_OK);
    if (na != nb || memcmp(ia, ib, na * sizeof *ia) != 0)
        fail_msg("the lists' tokenizer encodes \"%.80s\" differently (%zu vs %zu ids)", text, nb, na);
    free(ia);
    free(ib);
}

static const char *const prompts[] = {
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    "<|vision_start|><|image_pad|><|image_pad|><|vision_end|>What is this?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|fim_prefix|>x",
    "<0.5 seconds><|vision_start|><|video_pad|><|vision_end|>",
    "  leading spaces, tabs\t\tand\r\nCRLF; ÄÖÜ äöü 你好世界 🦙🦙 1234567 don't I'LL",
};

/* Every reference string and prompt, and the decoding of every id, as tokenizer.json gives. */
static void check_equal(const char *json, size_t pad, const char *tests_path) {
    qvl_error err = {0};
    qvl_tokenizer *ref = NULL, *got = NULL;
    assert_int_equal(qvl_tokenizer_load(json, &ref, &err), QVL_OK);
    lists x;
    lists_from_json(json, pad, &x);
    if (qvl_tokenizer_from_lists(&x.l, "lists", &got, &err) != QVL_OK) fail_msg("%s", err.msg);
    size_t cases = 0;
    char *inp = tests_path ? read_all(tests_path, NULL) : NULL;
    for (char *p = inp; p && *p;) { /* cases separated by "\n__ggml_vocab_test__\n" */
        char *end = strstr(p, "\n__ggml_vocab_test__\n");
        size_t len = end ? (size_t)(end - p) : strlen(p);
        assert_same_encoding(ref, got, p, len);
        cases++;
        if (!end) break;
        p = end + strlen("\n__ggml_vocab_test__\n");
    }
    free(inp);
    for (size_t i = 0; i < sizeof prompts / sizeof *prompts; i++)
        assert_same_encoding(ref, got, prompts[i], strlen(prompts[i]));
    assert_int_equal(qvl_tokenizer_vocab_size(got), qvl_tokenizer_vocab_size(ref));
    for (int32_t id = 0; id < qvl_tokenizer_vocab_size(ref); id++) {
        const char *pa = NULL, *pb = NULL;
        size_t la = 0, lb = 0;
        qvl_status sa = qvl_tokenizer_token_to_piece(ref, id, &pa, &la, &err);
        qvl_status sb = qvl_tokenizer_token_to_piece(got, id, &pb, &lb, &err);
        assert_int_equal(sa, sb);
        if (sa == QVL_OK && (la != lb || memcmp(pa, pb, la) != 0)) fail_msg("id %d decodes differently", id);
        /* Special as in tokenizer.json, except "<|...|>" tokens, which GGUF makes control. */
        bool want = qvl_tokenizer_is_special(ref, id) ||
                    (sa == QVL_OK && x.types[id] == QVL_TOKEN_CONTROL && looks_special(pa));
        if (qvl_tokenizer_is_special(got, id) != want) fail_msg("id %d: special differs", id);
    }
    printf("%s: %zu reference strings, %zu prompts, %d ids alike\n", json, cases,
           sizeof prompts / sizeof *prompts, qvl_tokenizer_vocab_size(ref));
    qvl_tokenizer_free(ref);
    qvl_tokenizer_free(got);
    lists_free(&x);
}

static void test_qwen_real(void **state) {
    (void)state;
    if (access(QWEN_JSON, R_OK) != 0) {
        printf("skipping the real Qwen tokenizer: %s not found\n", QWEN_JSON);
        skip();
    }
    check_equal(QWEN_JSON, 267, access(QWEN_TESTS, R_OK) == 0 ? QWEN_TESTS : NULL);
}

static void test_fixture_tokenizers(void **state) {
    (void)state;
    check_equal(FIXTURES "/tiny-tied/tokenizer.json", 0, NULL);
    check_equal(FIXTURES "/tiny-untied/tokenizer.json", 3, NULL);
}

static void expect_refusal(const qvl_tokenizer_lists *l, const char *needle) {
    qvl_error err = {0};
    qvl_tokenizer *tok = (qvl_tokenizer *)&err; /* must come back NULL */
    assert_int_not_equal(qvl_tokenizer_from_lists(l, "t.gguf", &tok, &err), QVL_OK);
    assert_null(tok);
    if (!strstr(err.msg, needle) || strchr(err.msg, '\n'))
        fail_msg("expected one line naming \"%s\", got \"%s\"", needle, err.msg);
}

static void test_refusals(void **state) {
    (void)state;
    qvl_str tokens[] = {{"a", 1}, {"b", 1}, {"ab", 2}, {"<|x|>", 5}};
    int32_t types[] = {1, 1, 1, 3};
    qvl_str merges[] = {{"a b", 3}};
    qvl_tokenizer_lists ok = {"gpt2", "qwen2", tokens, 4, types, merges, 1};
    qvl_error err = {0};
    qvl_tokenizer *tok = NULL;
    assert_int_equal(qvl_tokenizer_from_lists(&ok, "t.gguf", &tok, &err), QVL_OK);
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(qvl_tokenizer_encode(tok, "ab<|x|>", 7, &ids, &n, &err), QVL_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 3);
    assert_true(qvl_tokenizer_is_special(tok, 3));
    free(ids);
    qvl_tokenizer_free(tok);

    qvl_tokenizer_lists l = ok;
    l.model = "llama";
    expect_refusal(&l, "tokenizer model \"llama\"");
    l = ok;
    l.pre = "llama-bpe";
    expect_refusal(&l, "pre-tokenizer \"llama-bpe\"");
    l = ok;
    l.pre = NULL;
    expect_refusal(&l, "pre-tokenizer \"(none)\"");
    int32_t byte_types[] = {1, 6, 1, 3};
    l = ok;
    l.types = byte_types;
    expect_refusal(&l, "token 1 has type BYTE");
    int32_t bad_types[] = {1, 1, 9, 3};
    l.types = bad_types;
    expect_refusal(&l, "token 2 has unknown type 9");
    qvl_str nul_tokens[] = {{"a", 1}, {"b\0c", 3}, {"ab", 2}, {"<|x|>", 5}};
    l = ok;
    l.tokens = nul_tokens;
    expect_refusal(&l, "token 1 holds a NUL byte");
    qvl_str bad_merge[] = {{"a c", 3}};
    l = ok;
    l.merges = bad_merge;
    expect_refusal(&l, "t.gguf: model.merges[0]");
    qvl_str quote_tokens[] = {{"a", 1}, {"\"\\", 2}, {"ab", 2}, {"<|x|>", 5}};
    l = ok;
    l.tokens = quote_tokens; /* escaped properly: loads ("b" is gone, so no merge) */
    l.n_merges = 0;
    assert_int_equal(qvl_tokenizer_from_lists(&l, "t.gguf", &tok, &err), QVL_OK);
    assert_int_equal(qvl_tokenizer_token_id(tok, "\"\\"), 1);
    qvl_tokenizer_free(tok);
    l = ok;
    l.n_tokens = 0;
    expect_refusal(&l, "no tokens");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen_real),
        cmocka_unit_test(test_fixture_tokenizers),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
