/* GGUF loading against the Hugging Face directory it was converted from
 * (tests/fixtures/gguf, made by llama.cpp's converter: scripts/make_gguf_fixtures.py).
 *
 * For both fixture models, every backend that loads (parity_backends.h) and each text GGUF type
 * (F32, F16, BF16, Q8_0, always with the F16 mmproj), the GGUF model is compared with the
 * directory opened with --weights of the same dtype, so both hold the same kind of numbers:
 *   - the text cases (fixture.json): all prompt logits, and 10 greedy tokens identical;
 *   - the image cases (fixture_images.json): the F16 mmproj's merger and deepstack features
 *     from transformers' pixel values against transformers' own (1e-4 x max |value|, as
 *     test_vision_parity: the f16 file holds the checkpoint's bf16 values, f16 being exact for
 *     them), then both text models fed those same features: all prompt logits and greedy
 *     tokens, as for text.
 * Tolerances, relative to the largest |value| of the directory's output:
 *   - F32 and BF16 text: the file holds the checkpoint's bf16 values exactly (widened for F32),
 *     so the logits of text prompts are identical: 0;
 *   - F16 text: bf16 -> f16 is exact for values in f16's normal range; the converter and qvl
 *     both round to nearest even, so the same: 0 as well;
 *   - Q8_0: see q8_cases.
 * The KV cache is f32 on both sides, so it adds nothing. */
#include <math.h>
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

#include "qvl/gen_config.h"
#include "qvl/generate.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/sampling.h"
#include "parity_backends.h"
#include "parity_cases.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures"
static const char *const models[] = {"tiny-tied", "tiny-untied"};
static const char *const types[] = {"f32", "f16", "bf16", "q8_0"};
#define N_GREEDY 10
#define HF_VISION_RTOL 1e-4
#define Q8_RTOL 5e-2
#define DEQ_RTOL 1e-5


static parity_backends list;

static void *read_all(const char *dir, const char *file, size_t *bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    void *p = parity_read_file(path, bytes);
    if (!p) fail_msg("%s: cannot read", path);
    return p;
}

static cJSON *load_json(const char *dir, const char *file, char **text) {
    *text = read_all(dir, file, NULL);
    cJSON *j = cJSON_Parse(*text);
    if (!j) fail_msg("%s/%s: not JSON", dir, file);
    return j;
}

static int64_t num(const cJSON *c, const char *key) {
    const cJSON *it = cJSON_GetObjectItem(c, key);
    if (!cJSON_IsNumber(it)) fail_msg("fixture key %s missing", key);
    return (int64_t)it->valuedouble;
}

static int32_t *json_ids(const cJSON *arr, int64_t *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    assert_non_null(ids);
    for (int64_t i = 0; i < *n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(arr, (int)i)->valuedouble;
    return ids;
}

static qvl_model *open_model(const char *path, const char *mmproj, const char *backend,
                             const char *weights) {
    qvl_model_options mo = {.backend_name = backend, .ctx = 64, .kv_type = "f32",
                            .weight_dtype = weights, .mmproj = mmproj};
    qvl_model *m = NULL;
    qvl_error err = {0};
    if (qvl_model_open(path, &mo, &m, &err) != QVL_OK) fail_msg("%s on %s: %s", path, backend,
                                                               err.msg);
    return m;
}

static void greedy_ids(int32_t id, void *user) {
    int32_t **cursor = user;
    *(*cursor)++ = id;
}

/* Prompt logits [n, vocab] and N_GREEDY greedy tokens (no stop token). */
static void generate(qvl_model *m, const int32_t *prompt, int64_t n, const int32_t *pos,
                     const qvl_image_features *img, float *logits, int32_t *out) {
    const int32_t vocab = (int32_t)qvl_model_config(m)->text.vocab_size;
    qvl_error err = {0};
    qvl_gen_config gen;
    qvl_gen_config_defaults(&gen);
    qvl_sampling_params sp;
    qvl_sampling_params_default(&sp);
    sp.temperature = 0;
    qvl_sampler *sampler = NULL;
    assert_int_equal(qvl_sampler_create(&sp, vocab, &sampler, &err), QVL_OK);
    int32_t *cursor = out;
    qvl_model_truncate(m, 0);
    qvl_generation g = {.max_new = N_GREEDY, .stop = &gen, .sampler = sampler,
                        .on_token = greedy_ids, .user = &cursor, .prompt_logits = logits,
                        .prompt_pos = pos, .images = img};
    qvl_generation_result res;
    if (qvl_generate(m, prompt, n, &g, &res, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(res.n_generated, N_GREEDY);
    qvl_sampler_free(sampler);
}

static void check_tokens(const char *what, const int32_t *a, const int32_t *b) {
    for (int i = 0; i < N_GREEDY; i++)
        if (a[i] != b[i])
            fail_msg("%s: greedy token %d is %d from the GGUF, %d from the directory", what, i,
                     b[i], a[i]);
}

typedef struct against {
    const char *what; /* the reference: "directory, --weights f32", ... */
    double rtol;
    bool tokens;      /* greedy tokens must be identical */
} against;

static void text_cases(const char *dir, const char *type, const char *backend, qvl_model *ref,
                       qvl_model *gg, const against *a) {
    char *text;
    cJSON *fx = load_json(dir, "fixture.json", &text);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) {
        int64_t n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "prompt_ids"), &n);
        const int64_t vocab = num(c, "vocab");
        float *la = malloc((size_t)(n * vocab) * sizeof *la);
        float *lb = malloc((size_t)(n * vocab) * sizeof *lb);
        int32_t ta[N_GREEDY], tb[N_GREEDY];
        assert_true(la && lb);
        generate(ref, ids, n, NULL, NULL, la, ta);
        generate(gg, ids, n, NULL, NULL, lb, tb);
        char what[2048];
        snprintf(what, sizeof what, "%s %s %s on %s: logits vs %s", dir, type,
                 cJSON_GetObjectItem(c, "name")->valuestring, backend, a->what);
        parity_compare_block(what, lb, la, (size_t)(n * vocab), a->rtol);
        if (a->tokens) check_tokens(what, ta, tb);
        free(la);
        free(lb);
        free(ids);
    }
    cJSON_Delete(fx);
    free(text);
}

static void image_cases(const char *dir, const char *type, const char *backend, qvl_model *ref,
                        qvl_model *gg, const against *a) {
    char *text;
    cJSON *fx = load_json(dir, "fixture_images.json", &text);
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        qvl_image_grid grids[8];
        size_t n_img = 0;
        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(c, "image_grid_thw")) {
            assert_true(n_img < 8);
            grids[n_img++] = (qvl_image_grid){(int64_t)cJSON_GetArrayItem(g, 0)->valuedouble,
                                              (int64_t)cJSON_GetArrayItem(g, 1)->valuedouble,
                                              (int64_t)cJSON_GetArrayItem(g, 2)->valuedouble};
        }
        float *px = read_all(dir, cJSON_GetObjectItem(c, "pixels_file")->valuestring, NULL);
        qvl_image_features f;
        qvl_error err = {0};
        if (qvl_model_encode_images(gg, px, n_img, grids, &f, &err) != QVL_OK)
            fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
        assert_int_equal(f.n_tokens, num(c, "n_image_tokens"));
        assert_int_equal(f.n_deepstack, num(c, "n_deepstack"));
        const size_t K = (size_t)f.n_tokens, D = (size_t)f.hidden;
        size_t bytes = 0;
        float *hf = read_all(dir, cJSON_GetObjectItem(c, "vision_file")->valuestring, &bytes);
        assert_int_equal(bytes, (1 + (size_t)f.n_deepstack) * K * D * sizeof(float));
        char what[2048];
        snprintf(what, sizeof what, "%s %s %s on %s: merger vs transformers", dir, type, name,
                 backend);
        parity_compare_block(what, f.embeds, hf, K * D, HF_VISION_RTOL);
        for (int32_t k = 0; k < f.n_deepstack; k++) {
            snprintf(what, sizeof what, "%s %s %s on %s: deepstack %d vs transformers", dir, type,
                     name, backend, (int)k);
            parity_compare_block(what, f.deepstack + k * K * D, hf + (1 + k) * K * D, K * D,
                                 HF_VISION_RTOL);
        }
        free(hf);
        int64_t n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "prompt_ids"), &n);
        const int64_t vocab = num(c, "vocab");
        int32_t *pos = malloc((size_t)(3 * n) * sizeof *pos);
        float *la = malloc((size_t)(n * vocab) * sizeof *la);
        float *lb = malloc((size_t)(n * vocab) * sizeof *lb);
        assert_true(pos && la && lb);
        if (qvl_model_positions(gg, ids, n, grids, n_img, pos, &err) != QVL_OK)
            fail_msg("%s %s: %s", dir, name, err.msg);
        int32_t ta[N_GREEDY], tb[N_GREEDY];
        generate(ref, ids, n, pos, &f, la, ta);
        generate(gg, ids, n, pos, &f, lb, tb);
        snprintf(what, sizeof what, "%s %s %s on %s: logits vs %s", dir, type, name, backend,
                 a->what);
        parity_compare_block(what, lb, la, (size_t)(n * vocab), a->rtol);
        if (a->tokens) check_tokens(what, ta, tb);
        free(la);
        free(lb);
        free(pos);
        free(ids);
        free(px);
        qvl_image_features_free(&f);
    }
    cJSON_Delete(fx);
    free(text);
}

/* Q8_0, two ways:
 *   - the blocks read in place against the same file dequantised to f32 at load (--weights
 *     f32): the same values, only the kernels' summation differs on the reference backend:
 *     DEQ_RTOL, greedy tokens identical; on a backend whose q8_0 kernels quantise the
 *     activations to int8 (cpu_avx2), within Q8_RTOL;
 *   - against the directory quantised by qvl (--weights q8_0) within q8_0's tolerance, Q8_RTOL
 *     (test_parity's for q8_0). llama.cpp's quantiser rounds against the f32 block scale, qvl's
 *     against the f16 scale it stores, so some weights sit one q8_0 step apart and greedy tokens
 *     may differ (the fixtures' smallest top-1/top-2 margin, 0.0055, is below q8_0's error).
 *     Only where qvl can quantise every matrix: tiny-untied's vision rows of 48 values are not
 *     whole q8_0 blocks (--weights q8_0 refuses them). */
static void q8_cases(const char *dir, const char *gguf, const char *mmproj, const char *backend,
                     qvl_model *gg) {
    /* The reference backend multiplies q8_0 weights as their f32 values; a backend with int8
     * kernels (cpu_avx2) quantises the activations too, which is q8_0's error again. */
    const bool exact = strcmp(backend, "reference") == 0;
    const against deq = {"the GGUF dequantised to f32 at load", exact ? DEQ_RTOL : Q8_RTOL, exact};
    qvl_model *ref = open_model(gguf, mmproj, backend, "f32");
    text_cases(dir, "q8_0", backend, ref, gg, &deq);
    image_cases(dir, "q8_0", backend, ref, gg, &deq);
    qvl_model_close(ref);
    qvl_model_options mo = {.backend_name = backend, .ctx = 64, .kv_type = "f32",
                            .weight_dtype = "q8_0"};
    qvl_error err = {0};
    if (qvl_model_open(dir, &mo, &ref, &err) != QVL_OK) {
        if (!strstr(err.msg, "cannot be stored as q8_0")) fail_msg("%s: %s", dir, err.msg);
        printf("%s: no --weights q8_0 comparison: %s\n", dir, err.msg);
        return;
    }
    const against qvl_q8 = {"the directory with --weights q8_0", Q8_RTOL, false};
    text_cases(dir, "q8_0", backend, ref, gg, &qvl_q8);
    image_cases(dir, "q8_0", backend, ref, gg, &qvl_q8);
    qvl_model_close(ref);
}

static void test_gguf_parity(void **state) {
    (void)state;
    parity_backends_get(&list);
    size_t ran = 0;
    for (size_t b = 0; b < list.n; b++) {
        if (!parity_backend_loads(&list, b)) continue;
        for (size_t i = 0; i < sizeof models / sizeof *models; i++)
            for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
                char dir[512], gguf[600], mmproj[600];
                snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[i]);
                snprintf(gguf, sizeof gguf, "%s/gguf/%s-%s.gguf", FIXTURES, models[i], types[t]);
                snprintf(mmproj, sizeof mmproj, "%s/gguf/mmproj-%s-f16.gguf", FIXTURES,
                         models[i]);
                qvl_model *gg = open_model(gguf, mmproj, list.names[b], NULL);
                if (strcmp(types[t], "q8_0") != 0) {
                    const against a = {"the directory with --weights of the type", 0.0, true};
                    qvl_model *ref = open_model(dir, NULL, list.names[b], types[t]);
                    text_cases(dir, types[t], list.names[b], ref, gg, &a);
                    image_cases(dir, types[t], list.names[b], ref, gg, &a);
                    qvl_model_close(ref);
                } else {
                    q8_cases(dir, gguf, mmproj, list.names[b], gg);
                }
                qvl_model_close(gg);
                ran++;
            }
    }
    assert_true(ran > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_gguf_parity)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
