/* Image parity with Hugging Face transformers on the committed fixtures (fixture_images.json in
 * each tests/fixtures model directory, made by scripts/make_fixtures.py), stage by stage:
 *
 *  1. pixel_values: our decoder + preprocessing of the fixture PNGs and JPEG against
 *     Qwen2VLImageProcessorFast. Bicubic resampling on uint8 may round a few pixels the other
 *     way (torch has a SIMD fixed-point kernel and a float one), so an element may differ by one
 *     quantisation step, 1/127.5 after normalisation, and at most 1% of the elements may differ
 *     at all; grids must be identical.
 *  2. the vision encoder (merger and deepstack outputs) fed with HF's own pixel_values, so this
 *     stage is judged on its own: both sides compute in float32 on the same bf16-rounded
 *     weights, so per element |ours - HF| <= 1e-4 x max|HF| of that output.
 *  3. prompt logits and greedy tokens end to end (our pixels, our encoder, image embeddings and
 *     deepstack injection, 3-D positions): logits within 1e-4 x max|logit| (as the text parity
 *     test), greedy tokens identical.
 * Each backend that loads here runs stages 2 and 3. Without the image fixtures the test says
 * so and skips. */
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

#include "qvl/image.h"
#include "qvl/image_preprocess.h"
#include "qvl/qwen3vl_model.h"
#include "parity_backends.h"
#include "parity_cases.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures"
static const char *const models[] = {"tiny-tied", "tiny-untied"};
#define PIXEL_STEP (1.0 / 127.5)
#define PIXEL_MAX_DIFFERING 0.01
#define VISION_RTOL 1e-4
#define LOGIT_RTOL 1e-4
/* $QVL_PARITY_KV_TYPE picks the KV cache (ctest runs f32 and the default, f16). LOGIT_RTOL holds
 * for f32; f16 rounds every cached key and value to 11 significant bits and is held to 2e-3 as
 * in test_parity.c (measured figures: docs/QUANT.md), with greedy tokens still identical. The encoder (stage 2) has no KV cache. */
#define LOGIT_RTOL_KV_F16 2e-3

/* ctest's *_split variants also set $QVL_PARITY_GPU_LAYERS (decoder layers on the backend under
 * test) and $QVL_PARITY_CPU_BACKEND (the rest): the tolerances do not change, a split moves
 * activations between backends, it does not round them. */

/* The backends under test (parity_backends.h): filled by test_model_parity, read by
 * parity_unsupported() (a default backend that lacks an op is skipped, a named one fails). */
static parity_backends list;

static float *read_floats(const char *dir, const char *file, size_t count) {
    return parity_read_exact(dir, file, count * sizeof(float));
}

/* One case's pictures through our decoder and processor. */
typedef struct our_images {
    size_t n;
    qvl_image_grid grids[8];
    float *pixels;
    int64_t rows, width;
} our_images;

static void preprocess_case(const char *dir, const cJSON *c, our_images *o) {
    memset(o, 0, sizeof *o);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    qvl_qwen3vl_config cfg;
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_config_load(path, &cfg, &err), QVL_OK);
    qvl_preprocess_config pc;
    snprintf(path, sizeof path, "%s/preprocessor_config.json", dir);
    if (qvl_preprocess_config_load(path, &cfg.vision, &pc, &err) != QVL_OK) fail_msg("%s", err.msg);
    o->width = 3 * pc.temporal_patch_size * pc.patch_size * pc.patch_size;
    const cJSON *img;
    cJSON_ArrayForEach(img, cJSON_GetObjectItem(c, "images")) {
        assert_true(o->n < 8);
        snprintf(path, sizeof path, "%s/%s", dir, img->valuestring);
        qvl_image im;
        if (qvl_image_load(path, &im, &err) != QVL_OK) fail_msg("%s", err.msg);
        float *px = NULL;
        if (qvl_image_preprocess(&im, &pc, &px, &o->grids[o->n], &err) != QVL_OK)
            fail_msg("%s", err.msg);
        int64_t r = qvl_image_grid_patches(&o->grids[o->n]);
        o->pixels = realloc(o->pixels, (size_t)((o->rows + r) * o->width) * sizeof(float));
        memcpy(o->pixels + o->rows * o->width, px, (size_t)(r * o->width) * sizeof(float));
        o->rows += r;
        o->n++;
        free(px);
        qvl_image_free(&im);
    }
}

/* Stage 1: grids identical, pixel values within one quantisation step. */
static void check_pixels(const char *dir, const cJSON *c) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    our_images o;
    preprocess_case(dir, c, &o);
    const cJSON *grids = cJSON_GetObjectItem(c, "image_grid_thw");
    assert_int_equal((size_t)cJSON_GetArraySize(grids), o.n);
    for (size_t i = 0; i < o.n; i++) {
        const cJSON *g = cJSON_GetArrayItem(grids, (int)i);
        int64_t t = (int64_t)cJSON_GetArrayItem(g, 0)->valuedouble;
        int64_t h = (int64_t)cJSON_GetArrayItem(g, 1)->valuedouble;
        int64_t w = (int64_t)cJSON_GetArrayItem(g, 2)->valuedouble;
        if (o.grids[i].t != t || o.grids[i].h != h || o.grids[i].w != w)
            fail_msg("%s %s image %zu: grid %lldx%lldx%lld, transformers %lldx%lldx%lld", dir, name,
                     i, (long long)o.grids[i].t, (long long)o.grids[i].h, (long long)o.grids[i].w,
                     (long long)t, (long long)h, (long long)w);
    }
    const size_t count = (size_t)(o.rows * o.width);
    float *hf = read_floats(dir, cJSON_GetObjectItem(c, "pixels_file")->valuestring, count);
    double max_diff = 0;
    size_t differing = 0;
    for (size_t i = 0; i < count; i++) {
        double d = fabs((double)o.pixels[i] - hf[i]);
        max_diff = fmax(max_diff, d);
        differing += d > 1e-6;
    }
    printf("%s %s: pixel_values max diff %.3g (one step %.3g), %zu of %zu differ\n", dir, name,
           max_diff, PIXEL_STEP, differing, count);
    assert_true(max_diff <= PIXEL_STEP + 1e-6);
    assert_true((double)differing <= PIXEL_MAX_DIFFERING * (double)count);
    free(hf);
    free(o.pixels);
}

/* Stages 2 and 3 on one backend; false when the backend cannot run them. */
static bool check_model(const char *dir, const char *backend, const cJSON *c) {
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = parity_model_options(backend, 64);
    assert_int_equal(qvl_model_open(dir, &mo, &m, &err), QVL_OK);
    const int64_t K = parity_num(c, "n_image_tokens"), n_ds = parity_num(c, "n_deepstack");
    const int64_t D = qvl_model_config(m)->text.hidden_size;
    our_images o;
    preprocess_case(dir, c, &o);

    /* Stage 2: the encoder on HF's pixel values. */
    float *hf_px = read_floats(dir, cJSON_GetObjectItem(c, "pixels_file")->valuestring,
                               (size_t)(o.rows * o.width));
    float *hf_vis = read_floats(dir, cJSON_GetObjectItem(c, "vision_file")->valuestring,
                                (size_t)((1 + n_ds) * K * D));
    qvl_image_features f;
    qvl_status st = qvl_model_encode_images(m, hf_px, o.n, o.grids, &f, &err);
    if (parity_unsupported(&list, backend, "image", st, &err)) {
        free(hf_px);
        free(hf_vis);
        free(o.pixels);
        qvl_model_close(m);
        return false;
    }
    if (st != QVL_OK) fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
    char what[1024];
    snprintf(what, sizeof what, "%s %s on %s", dir, name, backend);
    parity_compare_features(what, &f, hf_vis, K, D, n_ds, VISION_RTOL);
    qvl_image_features_free(&f);
    free(hf_px);
    free(hf_vis);

    /* Stage 3: end to end from our pixels. */
    if (qvl_model_encode_images(m, o.pixels, o.n, o.grids, &f, &err) != QVL_OK)
        fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
    int64_t n_prompt, n_greedy;
    int32_t *prompt = parity_json_ids(cJSON_GetObjectItem(c, "prompt_ids"), &n_prompt);
    int32_t *expect = parity_json_ids(cJSON_GetObjectItem(c, "greedy_ids"), &n_greedy);
    const int64_t vocab = parity_num(c, "vocab");
    float *hf = read_floats(dir, cJSON_GetObjectItem(c, "logits_file")->valuestring,
                            (size_t)(n_prompt * vocab));
    int32_t *pos = malloc((size_t)(3 * n_prompt) * sizeof *pos);
    if (qvl_model_positions(m, prompt, n_prompt, o.grids, o.n, pos, &err) != QVL_OK)
        fail_msg("%s %s: %s", dir, name, err.msg);

    float *logits = malloc((size_t)(n_prompt * vocab) * sizeof *logits);
    int32_t *got = calloc((size_t)n_greedy, sizeof *got);
    int64_t n_generated = 0;
    st = parity_greedy(m, prompt, n_prompt, pos, &f, vocab, n_greedy, logits, got, &n_generated,
                       &err);
    bool skip_backend = parity_unsupported(&list, backend, "image", st, &err);
    if (st != QVL_OK && !skip_backend) fail_msg("%s %s on %s: %s", dir, name, backend, err.msg);
    if (!skip_backend) {
    assert_int_equal(n_generated, n_greedy);
    double max_ref = 0, max_err = 0;
    for (int64_t i = 0; i < n_prompt * vocab; i++) max_ref = fmax(max_ref, fabs(hf[i]));
    for (int64_t i = 0; i < n_prompt * vocab; i++) max_err = fmax(max_err, fabs(hf[i] - logits[i]));
    const double rtol = parity_kv_is_f32() ? LOGIT_RTOL : LOGIT_RTOL_KV_F16;
    printf("%s %s on %s, %s KV: max |logit| %.3f, max abs error %.3g = %.3g x max|logit| "
           "(allowed %.3g)\n", dir, name, backend, parity_kv_is_f32() ? "f32" : "f16", max_ref,
           max_err, max_err / max_ref, rtol * max_ref);
    assert_true(max_err <= rtol * max_ref);
    for (int64_t i = 0; i < n_greedy; i++)
        if (got[i] != expect[i])
            fail_msg("%s %s on %s: greedy token %lld is %d, transformers gave %d", dir, name,
                     backend, (long long)i, got[i], expect[i]);
    }
    free(got);
    free(logits);
    free(pos);
    free(hf);
    free(prompt);
    free(expect);
    qvl_image_features_free(&f);
    free(o.pixels);
    qvl_model_close(m);
    return !skip_backend;
}

/* The fixture list of a model, or NULL (with a message) when the image fixtures are absent. */
static cJSON *load_fixture(const char *dir, char **text) {
    char path[600];
    snprintf(path, sizeof path, "%s/fixture_images.json", dir);
    *text = parity_read_file(path, NULL);
    if (!*text) {
        printf("skipping %s: no fixture_images.json (run scripts/make_fixtures.py)\n", dir);
        return NULL;
    }
    cJSON *fx = cJSON_Parse(*text);
    assert_non_null(fx);
    return fx;
}

static void test_pixel_parity(void **state) {
    (void)state;
    size_t seen = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char dir[512], *text = NULL;
        snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[i]);
        cJSON *fx = load_fixture(dir, &text);
        if (!fx) continue;
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) check_pixels(dir, c);
        cJSON_Delete(fx);
        free(text);
        seen++;
    }
    if (!seen) skip();
}

static void test_model_parity(void **state) {
    (void)state;
    size_t seen = 0;
    parity_backends_get(&list);
    for (size_t b = 0; b < list.n; b++) {
        if (!parity_backend_loads(&list, b)) continue;
        for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
            char dir[512], *text = NULL;
            snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[i]);
            cJSON *fx = load_fixture(dir, &text);
            if (!fx) continue;
            const cJSON *c;
            cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) {
                if (!check_model(dir, list.names[b], c)) break;
            }
            cJSON_Delete(fx);
            free(text);
            seen++;
        }
    }
    if (!seen && list.strict) fail_msg("QVL_PARITY_BACKENDS is set but no image fixture ran");
    if (!seen) skip();
}

/* The model API around images, on made-up features (no fixtures needed beyond the weights). */
static void test_model_image_api(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[0]);
    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = {.backend_name = "reference", .ctx = 32};
    assert_int_equal(qvl_model_open(dir, &mo, &m, &err), QVL_OK);
    const qvl_qwen3vl_config *cfg = qvl_model_config(m);
    const int64_t vocab = cfg->text.vocab_size, D = cfg->text.hidden_size;
    const int32_t pad = (int32_t)cfg->image_token_id;

    /* One picture of grid 1x4x6: 6 tokens on a 2x3 merged grid. */
    qvl_image_grid grid = {1, 4, 6};
    qvl_image_features f = {.n_tokens = 6, .hidden = D, .n_deepstack = cfg->vision.n_deepstack};
    f.embeds = malloc((size_t)(6 * D) * sizeof(float));
    f.deepstack = malloc((size_t)(6 * D * f.n_deepstack) * sizeof(float));
    for (int64_t i = 0; i < 6 * D; i++) f.embeds[i] = (float)sin((double)i);
    for (int64_t i = 0; i < 6 * D * f.n_deepstack; i++) f.deepstack[i] = (float)cos((double)i);
    const int32_t ids[10] = {20, (int32_t)cfg->vision_start_token_id, pad, pad, pad, pad, pad, pad,
                             (int32_t)cfg->vision_end_token_id, 30};
    int32_t pos[30];
    assert_int_equal(qvl_model_positions(m, ids, 10, &grid, 1, pos, &err), QVL_OK);
    assert_int_equal(pos[8], 5); /* <vision_end>: 2 + max(2, 3) */
    assert_int_equal(pos[9], 6);

    float *with = malloc((size_t)(11 * vocab) * sizeof(float));
    float *plain = malloc((size_t)(10 * vocab) * sizeof(float));
    float *step = malloc((size_t)vocab * sizeof(float));
    /* Errors: no positions, and features that do not match the pads. */
    assert_int_equal(qvl_model_eval_images(m, ids, 10, NULL, &f, true, with, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "positions"));
    f.n_tokens = 5;
    assert_int_equal(qvl_model_eval_images(m, ids, 10, pos, &f, true, with, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "image pad tokens"));
    f.n_tokens = 6;
    assert_int_equal(qvl_model_n_past(m), 0);

    /* Causality: rows before the first pad do not see the features. */
    assert_int_equal(qvl_model_eval(m, ids, 10, pos, true, plain, &err), QVL_OK);
    qvl_model_truncate(m, 0);
    assert_int_equal(qvl_model_eval_images(m, ids, 10, pos, &f, true, with, &err), QVL_OK);
    for (int64_t i = 0; i < 2 * vocab; i++) assert_float_equal(with[i], plain[i], 1e-5);
    double diff = 0;
    for (int64_t i = 2 * vocab; i < 10 * vocab; i++) diff = fmax(diff, fabs(with[i] - plain[i]));
    assert_true(diff > 1e-3);

    /* Decoding continues at n + rope_delta = 10 + (7 - 10) = 7: one step after the prompt gives
     * the logits of the whole sequence with that position given explicitly. */
    const int32_t next = 40;
    assert_int_equal(qvl_model_eval(m, &next, 1, NULL, false, step, &err), QVL_OK);
    qvl_model_truncate(m, 0);
    int32_t ids11[11], pos11[33];
    memcpy(ids11, ids, sizeof ids);
    ids11[10] = next;
    for (int c = 0; c < 3; c++) {
        memcpy(pos11 + c * 11, pos + c * 10, 10 * sizeof(int32_t));
        pos11[c * 11 + 10] = 7;
    }
    assert_int_equal(qvl_model_eval_images(m, ids11, 11, pos11, &f, true, with, &err), QVL_OK);
    for (int64_t v = 0; v < vocab; v++)
        assert_float_equal(step[v], with[10 * vocab + v], 1e-4 * (1 + fabs(step[v])));

    /* The encoder refuses grids that are not whole merge windows. */
    qvl_image_features g;
    qvl_image_grid odd = {1, 3, 4};
    float px[12 * 1536] = {0};
    assert_int_not_equal(qvl_model_encode_images(m, px, 1, &odd, &g, &err), QVL_OK);
    assert_null(g.embeds);
    free(with);
    free(plain);
    free(step);
    qvl_image_features_free(&f);
    qvl_model_close(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pixel_parity),
        cmocka_unit_test(test_model_parity),
        cmocka_unit_test(test_model_image_api),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
