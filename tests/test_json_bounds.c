/* JSON element bounds: qvl_json_measure counts exactly what cJSON builds on
 * valid files, and each loader refuses a text whose tree would take far more memory than a
 * valid file of its kind (a safetensors header, model.safetensors.index.json, tokenizer.json,
 * config.json full of "0,0,0,...") with one line, before cJSON builds it. */
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

#include "qvl/json_bounds.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/safetensors.h"
#include "qvl/tokenizer.h"
#include "qvl/weight_table.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define TMP QVL_BINARY_DIR "/test_json_bounds_tmp"
#define SHARED_TOKENIZER QVL_SHARED_DATA_DIR "/qwen3-vl-2b-instruct/tokenizer.json"

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
    assert_null(strchr(haystack, '\n'));
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    b[*n] = '\0';
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

/* cJSON's own count of what the measure counts. */
static void cjson_count(const cJSON *v, int depth, qvl_json_shape *s) {
    s->values++;
    if (depth > s->max_depth && (cJSON_IsArray(v) || cJSON_IsObject(v))) s->max_depth = depth;
    size_t n = 0;
    for (const cJSON *c = v->child; c; c = c->next, n++) cjson_count(c, depth + 1, s);
    if (cJSON_IsArray(v) && n > s->max_array) s->max_array = n;
    if (cJSON_IsObject(v) && depth == 1 && n > s->root_members) s->root_members = n;
    if (cJSON_IsObject(v) && depth > 1 && n > s->max_members) s->max_members = n;
}

static void expect_exact(const char *text, size_t n) {
    qvl_json_shape got, want = {0};
    qvl_json_measure(text, n, &got);
    cJSON *root = cJSON_ParseWithLength(text, n);
    assert_non_null(root);
    cjson_count(root, 1, &want);
    cJSON_Delete(root);
    if (got.values != want.values || got.max_depth != want.max_depth ||
        got.max_array != want.max_array || got.root_members != want.root_members ||
        got.max_members != want.max_members)
        fail_msg("measure: %zu values, depth %d, array %zu, members %zu/%zu; cJSON: %zu, %d, %zu, "
                 "%zu/%zu",
                 got.values, got.max_depth, got.max_array, got.root_members, got.max_members,
                 want.values, want.max_depth, want.max_array, want.root_members, want.max_members);
}

static void test_measure_is_exact_on_valid_files(void **state) {
    (void)state;
    const char *files[] = {FIXTURE "/config.json", FIXTURE "/fixture.json",
                           FIXTURE "/fixture_images.json", FIXTURE "/generation_config.json",
                           FIXTURE "/preprocessor_config.json", SHARED_TOKENIZER};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        if (access(files[i], R_OK) != 0) {
            printf("skipping %s: not found\n", files[i]);
            continue;
        }
        size_t n;
        char *t = read_all(files[i], &n);
        expect_exact(t, n);
        free(t);
    }
    const char *texts[] = {
        "{}", "[]", "0", "\"a\"", "[1,[2,[3,{}]],{\"a\":[true,false,null]}]",
        "{\"k\\\"}\":\"v,[{\", \"n\": -1.5e3, \"o\": {\"x\": [ ], \"y\" : {\"z\":\"\\\\\"}}}",
        " { \"a\" : [ 1 , 2 , 3 ] , \"b\" : { } } "};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) expect_exact(texts[i], strlen(texts[i]));
}

/* n copies of "0," wrapped as prefix ... suffix. */
static char *zeros(const char *prefix, size_t n, const char *suffix, size_t *len) {
    const size_t pl = strlen(prefix), sl = strlen(suffix);
    char *t = malloc(pl + 2 * n + sl + 1);
    memcpy(t, prefix, pl);
    for (size_t i = 0; i < n; i++) memcpy(t + pl + 2 * i, "0,", 2);
    memcpy(t + pl + 2 * n - 1, suffix, sl); /* over the last comma */
    *len = pl + 2 * n - 1 + sl;
    t[*len] = '\0';
    return t;
}

static void write_safetensors(const char *path, const char *header, size_t hn) {
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hn >> (8 * i));
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(len8, 1, 8, f), 8);
    assert_int_equal(fwrite(header, 1, hn, f), hn);
    fclose(f);
}

static void test_safetensors_header(void **state) {
    (void)state;
    size_t n;
    char *h = zeros("{\"w\":{\"dtype\":\"F32\",\"shape\":[", 1000000, "],\"data_offsets\":[0,0]}}", &n);
    write_safetensors(TMP ".safetensors", h, n);
    free(h);
    qvl_safetensors *st = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_open(TMP ".safetensors", &st, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "header: a JSON array of 1000000 elements (shapes have at most 8)");
    /* Metadata of 5000 entries, and an entry padded with values. */
    size_t cap = 16 + 5000 * 16, k = 0;
    h = malloc(cap);
    k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{");
    for (int i = 0; i < 5000; i++) k += (size_t)snprintf(h + k, cap - k, "%s\"k%d\":\"v\"", i ? "," : "", i);
    k += (size_t)snprintf(h + k, cap - k, "}}");
    write_safetensors(TMP ".safetensors", h, k);
    free(h);
    if (qvl_safetensors_open(TMP ".safetensors", &st, &err) != QVL_E_LIMIT) fail_msg("%s", err.msg);
    assert_contains(err.msg, "a JSON object of 5000 members");
    /* One entry padded with 1000 members of 8 numbers: short arrays, small objects, yet far
     * more values than any entry and the metadata can have. */
    cap = 64 + 1000 * 32;
    k = 0;
    h = malloc(cap);
    k += (size_t)snprintf(h + k, cap - k, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]");
    for (int i = 0; i < 1000; i++)
        k += (size_t)snprintf(h + k, cap - k, ",\"x%d\":[1,2,3,4,5,6,7,8]", i);
    k += (size_t)snprintf(h + k, cap - k, "}}");
    write_safetensors(TMP ".safetensors", h, k);
    free(h);
    if (qvl_safetensors_open(TMP ".safetensors", &st, &err) != QVL_E_LIMIT) fail_msg("%s", err.msg);
    assert_contains(err.msg, "JSON values for 1 entries");
    unlink(TMP ".safetensors");
}

/* A text of `prefix`, then n copies of `item`, comma-separated, then `suffix`. */
static char *repeat(const char *prefix, const char *item, size_t n, const char *suffix, size_t *len) {
    const size_t pl = strlen(prefix), il = strlen(item), sl = strlen(suffix);
    char *t = malloc(pl + n * (il + 1) + sl + 1);
    char *o = t;
    memcpy(o, prefix, pl), o += pl;
    for (size_t i = 0; i < n; i++) {
        if (i) *o++ = ',';
        memcpy(o, item, il), o += il;
    }
    memcpy(o, suffix, sl), o += sl;
    *len = (size_t)(o - t);
    *o = '\0';
    return t;
}

/* The children cJSON holds at a path of keys (the first match at each level, as the loader
 * looks them up); 0 when the path is absent. */
static size_t cjson_children(const cJSON *root, const char *const *keys, size_t n_keys) {
    const cJSON *v = root;
    for (size_t i = 0; v && i < n_keys; i++) v = cJSON_GetObjectItemCaseSensitive(v, keys[i]);
    return v ? (size_t)cJSON_GetArraySize(v) : 0;
}

static void test_measure_paths(void **state) {
    (void)state;
    static const char *const paths[] = {"model.vocab", "model.merges", "added_tokens", ""};
    size_t c[4];
    qvl_json_shape sh;
    /* objects count members, arrays elements; arrays on the way, other keys, deeper levels and
     * escaped keys do not match; repeated keys are summed */
    const char *t = "{\"model\":{\"vocab\":{\"a\":0,\"b\":{\"vocab\":[1,2,3]}},\"merges\":[\"a b\",[\"a\",\"b\"]],"
                    "\"x\":{\"merges\":[1]}},\"added_tokens\":[{},{},{}],\"mod\\u0065l\":{\"vocab\":{\"z\":1}},"
                    "\"list\":[{\"model\":{\"vocab\":{\"q\":1}}}],\"model\":{\"merges\":[\"c d\"]}}";
    qvl_json_measure_paths(t, strlen(t), paths, 4, c, &sh);
    assert_int_equal(c[0], 2);
    assert_int_equal(c[1], 3);
    assert_int_equal(c[2], 3);
    assert_int_equal(c[3], 5); /* the root's members */
    qvl_json_shape plain;
    qvl_json_measure(t, strlen(t), &plain);
    assert_int_equal(plain.values, sh.values);
    /* Cut and unbalanced texts never read past their end. */
    for (size_t cut = 0; cut < strlen(t); cut++) qvl_json_measure_paths(t, cut, paths, 4, c, &sh);
    qvl_json_measure_paths("}}]]{{\"", 7, paths, 4, c, &sh);
    /* On the real tokenizer the counts are cJSON's. */
    if (access(SHARED_TOKENIZER, R_OK) == 0) {
        size_t n;
        char *real = read_all(SHARED_TOKENIZER, &n);
        qvl_json_measure_paths(real, n, paths, 3, c, &sh);
        cJSON *root = cJSON_ParseWithLength(real, n);
        assert_non_null(root);
        const char *vocab[] = {"model", "vocab"}, *merges[] = {"model", "merges"},
                   *added[] = {"added_tokens"};
        assert_int_equal(c[0], cjson_children(root, vocab, 2));
        assert_int_equal(c[1], cjson_children(root, merges, 2));
        assert_int_equal(c[2], cjson_children(root, added, 1));
        assert_true(c[0] > 100000 && c[1] > 100000 && c[2] > 0);
        cJSON_Delete(root);
        free(real);
    }
}

static void test_tokenizer_json(void **state) {
    (void)state;
    size_t n;
    qvl_tokenizer *tok = NULL;
    qvl_error err = {0};
    /* Merges with no vocabulary to merge into. */
    char *t = zeros("{\"model\":{\"merges\":[", 500000, "]}}", &n);
    assert_int_equal(qvl_tokenizer_load_buffer(t, n, "t.json", &tok, &err), QVL_E_LIMIT);
    assert_null(tok);
    assert_contains(err.msg, "t.json: model.merges has 500000 entries, more than 4 for each of the 0 "
                             "vocabulary entries");
    free(t);
    /* Values that are neither vocabulary, merges nor added tokens: 10,000 strings of 7 bytes
     * (one value every 7 bytes, which a bound on values per byte lets through). */
    t = repeat("{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":[", "\"abcd\"", 10000, "]}",
               &n);
    assert_int_equal(qvl_tokenizer_load_buffer(t, n, "t.json", &tok, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "t.json: 10006 JSON values, more than the 4097 that 1 vocabulary "
                             "entries, 0 merges and 0 added tokens need");
    free(t);
    /* A vocabulary and an added-token list past their limits. */
    t = repeat("{\"model\":{\"vocab\":{", "\"\":0", ((size_t)1 << 20) + 1, "}}}", &n);
    assert_int_equal(qvl_tokenizer_load_buffer(t, n, "t.json", &tok, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "t.json: model.vocab has 1048577 entries, more than the limit of 1048576");
    free(t);
    t = repeat("{\"added_tokens\":[", "{}", 65537, "]}", &n);
    assert_int_equal(qvl_tokenizer_load_buffer(t, n, "t.json", &tok, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "t.json: added_tokens has 65537 entries, more than the limit of 65536");
    free(t);
    /* The real tokenizer and the fixture's still load. */
    if (access(SHARED_TOKENIZER, R_OK) == 0) {
        if (qvl_tokenizer_load(SHARED_TOKENIZER, &tok, &err) != QVL_OK) fail_msg("%s", err.msg);
        qvl_tokenizer_free(tok);
    }
    if (qvl_tokenizer_load(FIXTURE "/tokenizer.json", &tok, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_tokenizer_free(tok);
}

static void test_index_json(void **state) {
    (void)state;
    char dir[] = QVL_BINARY_DIR "/test_json_bounds_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    size_t n;
    char *t = zeros("{\"metadata\":{},\"weight_map\":{\"a\":[", 200000, "]}}", &n);
    write_all(path, t, n);
    free(t);
    qvl_weights *w = NULL;
    qvl_error err = {0};
    assert_int_not_equal(qvl_weights_open_specs(dir, NULL, 0, NULL, 0, &w, &err), QVL_OK);
    assert_contains(err.msg, "a JSON array of 200000 elements");
    /* Members with numbers: 6 bytes a value where a valid index needs 8. */
    size_t cap = 64 + 100000 * 16, k = 0;
    t = malloc(cap);
    k += (size_t)snprintf(t + k, cap - k, "{\"weight_map\":{");
    for (int i = 0; i < 100000; i++) k += (size_t)snprintf(t + k, cap - k, "%s\"%d\":0", i ? "," : "", i % 10);
    k += (size_t)snprintf(t + k, cap - k, "}}");
    write_all(path, t, k);
    free(t);
    assert_int_not_equal(qvl_weights_open_specs(dir, NULL, 0, NULL, 0, &w, &err), QVL_OK);
    assert_contains(err.msg, "JSON values, more than the");
    unlink(path);
    rmdir(dir);
}

static void test_config_json(void **state) {
    (void)state;
    size_t n;
    char *t = zeros("{\"text_config\":{\"x\":[", 200000, "]}}", &n);
    qvl_qwen3vl_config cfg;
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_config_parse(t, n, "c.json", &cfg, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "c.json: 200003 JSON values, more than the 100000");
    free(t);
    t = read_all(FIXTURE "/config.json", &n);
    assert_int_equal(qvl_qwen3vl_config_parse(t, n, "c.json", &cfg, &err), QVL_OK);
    free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_measure_is_exact_on_valid_files),
        cmocka_unit_test(test_safetensors_header),
        cmocka_unit_test(test_measure_paths),
        cmocka_unit_test(test_tokenizer_json),
        cmocka_unit_test(test_index_json),
        cmocka_unit_test(test_config_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
