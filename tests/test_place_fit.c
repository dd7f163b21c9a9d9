/* Placement on a primary with little memory, counted before loading (model_place_count.c,
 * model_place_fit.c), on the memfree test plugin: the reference's kernels behind a device-like
 * budget (tests/memfree_backend). The model is `qvl mkmodel` output (8 layers, hidden 256,
 * f32: a few MiB per layer, so the budgets are whole KiB apart).
 *  - the counts: weights and KV equal what the load then allocates; KV per dtype is
 *    2 x layers x ctx x kv_heads x head_dim x the dtype's bytes; the vision arena equals the
 *    arena a picture of the budget's size then takes, and grows with the budget; a prompt
 *    batch's arena is at least what the batch then takes; the backend's scratch is its own
 *    answer (the plugin's scratch_per_row x the most rows of a matmul);
 *  - -ngl auto puts as many layers on the primary as fit and one more does not, and they run
 *    within the budget;
 *  - a plain run that does not fit stops before loading with one line, naming what would:
 *    --kv-type q8_0 where it fits (and it does: that run loads), and -ngl auto's layer count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/mkmodel.h"
#include "qvl/qwen3vl_model.h"
#include "test_scratch_dir.h"

#define LAYERS 8
#define CTX 2048
#define KV_HEADS 2
#define HEAD_DIM 64
#define WIDTH (3 * 2 * 16 * 16) /* a patch: in_channels x temporal_patch_size x patch_size^2 */

static const char config_json[] =
    "{\"image_token_id\":508,\"model_type\":\"qwen3_vl\",\"text_config\":{\"attention_bias\":false,"
    "\"attention_dropout\":0.0,\"bos_token_id\":0,\"eos_token_id\":1,\"head_dim\":64,"
    "\"hidden_act\":\"silu\",\"hidden_size\":256,\"initializer_range\":0.02,"
    "\"intermediate_size\":768,\"max_position_embeddings\":4096,\"model_type\":\"qwen3_vl_text\","
    "\"num_attention_heads\":4,\"num_hidden_layers\":8,\"num_key_value_heads\":2,"
    "\"pad_token_id\":null,\"rms_norm_eps\":1e-06,\"rope_parameters\":{\"mrope_interleaved\":true,"
    "\"mrope_section\":[12,10,10],\"rope_theta\":5000000.0,\"rope_type\":\"default\"},"
    "\"tie_word_embeddings\":true,\"use_cache\":true,\"vocab_size\":512},"
    "\"tie_word_embeddings\":true,\"transformers_version\":\"5.17.0\",\"video_token_id\":509,"
    "\"vision_config\":{\"deepstack_visual_indexes\":[0],\"depth\":2,"
    "\"hidden_act\":\"gelu_pytorch_tanh\",\"hidden_size\":32,\"in_channels\":3,"
    "\"initializer_range\":0.02,\"intermediate_size\":64,\"model_type\":\"qwen3_vl_vision\","
    "\"num_heads\":2,\"num_position_embeddings\":64,\"out_hidden_size\":256,\"patch_size\":16,"
    "\"rope_parameters\":{\"rope_theta\":10000.0,\"rope_type\":\"axial\"},"
    "\"spatial_merge_size\":2,\"temporal_patch_size\":2},\"vision_end_token_id\":507,"
    "\"vision_start_token_id\":506}";

static char model_dir[300], plugins[300];

/* plugins.yaml: memfree over the reference with this budget (KiB) and scratch rule, then the
 * reference itself (the CPU backend of split runs). */
static void write_plugins(uint64_t kib, int scratch_per_row) {
    FILE *f = fopen(plugins, "w");
    assert_non_null(f);
    fprintf(f,
            "backends:\n"
            "  - name: memfree\n    library: %s\n"
            "    options: { inner: %s, memory_limit_kib: %llu, scratch_per_row: %d }\n"
            "  - name: reference\n    library: %s\n",
            QVL_MEMFREE_PLUGIN, QVL_REFERENCE_PLUGIN, (unsigned long long)kib, scratch_per_row,
            QVL_REFERENCE_PLUGIN);
    assert_int_equal(fclose(f), 0);
}

typedef struct opened {
    qvl_model *m;
    qvl_model_fit fit;
    qvl_error err;
    qvl_status st;
} opened;

static opened open_with(uint64_t kib, const char *kv_type, const char *ngl, int64_t image_tokens,
                        int64_t batch, int scratch_per_row) {
    write_plugins(kib, scratch_per_row);
    qvl_model_options mo = {.plugins_path = plugins, .backend_name = "memfree", .ctx = CTX,
                            .kv_type = kv_type, .gpu_layers = ngl, .cpu_backend_name = "reference",
                            .image_max_tokens = image_tokens, .batch = batch};
    opened o = {0};
    o.st = qvl_model_open(model_dir, &mo, &o.m, &o.err);
    if (o.st == QVL_OK) qvl_model_fit_get(o.m, &o.fit);
    return o;
}

static const uint64_t BIG = (uint64_t)1 << 20; /* 1 GiB in KiB: everything fits */

static qvl_model_backend_memory primary_memory(const qvl_model *m) {
    qvl_model_backend_memory mem[8];
    assert_true(qvl_model_memory(m, mem, 8) >= 1);
    assert_string_equal(mem[0].name, "memfree");
    return mem[0];
}

static void test_counts_match_the_load(void **state) {
    (void)state;
    opened o = open_with(BIG, NULL, NULL, 16, 64, 0);
    if (o.st != QVL_OK) fail_msg("%s", o.err.msg);
    assert_true(o.fit.counted);
    assert_int_equal(o.fit.gpu_layers, LAYERS);
    assert_int_equal(o.fit.free_bytes, BIG << 10);
    qvl_model_backend_memory mem = primary_memory(o.m);
    assert_int_equal(o.fit.weights_bytes, mem.weights_bytes + mem.weights_mapped_bytes);
    assert_int_equal(o.fit.kv_bytes, mem.kv_bytes);
    assert_int_equal(o.fit.kv_bytes, (uint64_t)2 * LAYERS * CTX * KV_HEADS * HEAD_DIM * 2);
    assert_int_equal(o.fit.image_tokens, 16);
    assert_int_equal(o.fit.batch, 64);
    assert_int_equal(o.fit.scratch_bytes, 0); /* scratch_per_row 0: the plugin holds none */
    /* the vision arena never sits beside a prompt's, only beside the decode step's */
    const uint64_t fixed = o.fit.weights_bytes + o.fit.kv_bytes + o.fit.scratch_bytes +
                           o.fit.margin_bytes;
    assert_true(o.fit.need_bytes >= fixed + (o.fit.vision_bytes > o.fit.activation_bytes
                                                 ? o.fit.vision_bytes
                                                 : o.fit.activation_bytes));
    assert_true(o.fit.need_bytes < fixed + o.fit.vision_bytes + o.fit.activation_bytes);

    /* A picture of the budget's size (16 tokens: 4 x 4 merged, 8 x 8 patches) takes exactly
     * the arena counted for it. */
    const qvl_image_grid grid = {1, 8, 8};
    float *px = calloc(64 * WIDTH, sizeof *px);
    assert_non_null(px);
    for (size_t i = 0; i < 64 * WIDTH; i++) px[i] = (float)(i % 97) / 97.0f - 0.5f;
    qvl_image_features feat = {0};
    assert_int_equal(qvl_model_encode_images(o.m, px, 1, &grid, &feat, &o.err), QVL_OK);
    assert_int_equal(primary_memory(o.m).activation_bytes, o.fit.vision_bytes);
    qvl_image_features_free(&feat);
    free(px);

    /* Prompt batches take no more than the text arenas counted. */
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = 2 + i;
    float *logits = malloc(512 * sizeof *logits);
    assert_non_null(logits);
    for (int k = 0; k < 2; k++)
        assert_int_equal(qvl_model_eval(o.m, ids, 64, NULL, false, logits, &o.err), QVL_OK);
    size_t after = primary_memory(o.m).activation_bytes;
    assert_true(after <= (o.fit.vision_bytes > o.fit.activation_bytes ? o.fit.vision_bytes
                                                                       : o.fit.activation_bytes));
    free(logits);
    qvl_model_close(o.m);
}

static void test_kv_per_dtype(void **state) {
    (void)state;
    const struct { const char *name; uint64_t num, den; } kinds[] = {
        {"f32", 4, 1}, {"f16", 2, 1}, {"q8_0", 34, 32}}; /* q8_0: 32 values in 34 bytes */
    for (size_t k = 0; k < 3; k++) {
        opened o = open_with(BIG, kinds[k].name, NULL, -1, 0, 0);
        if (o.st != QVL_OK) fail_msg("%s: %s", kinds[k].name, o.err.msg);
        assert_int_equal(o.fit.kv_bytes, (uint64_t)2 * LAYERS * CTX * KV_HEADS * HEAD_DIM *
                                             kinds[k].num / kinds[k].den);
        assert_int_equal(o.fit.kv_bytes, primary_memory(o.m).kv_bytes);
        assert_int_equal(o.fit.vision_bytes, 0); /* no picture will come */
        assert_int_equal(o.fit.image_tokens, 0);
        assert_int_equal(o.fit.batch, 512); /* the default batch */
        qvl_model_close(o.m);
    }
}

static void test_vision_grows_with_budget(void **state) {
    (void)state;
    uint64_t last = 0;
    const int64_t budgets[] = {16, 64, 256, 1024};
    for (size_t k = 0; k < 4; k++) {
        opened o = open_with(BIG, NULL, NULL, budgets[k], 64, 100);
        if (o.st != QVL_OK) fail_msg("%s", o.err.msg);
        assert_true(o.fit.vision_bytes > last);
        last = o.fit.vision_bytes;
        /* the plugin's scratch: 100 bytes per row of the largest matmul input, the picture's
         * patches (4 per token) or the batch */
        const int64_t rows = budgets[k] * 4 > 64 ? budgets[k] * 4 : 64;
        assert_int_equal(o.fit.scratch_bytes, (uint64_t)rows * 100);
        qvl_model_close(o.m);
    }
    /* 0: the largest picture the context holds */
    opened o = open_with(BIG, NULL, NULL, 0, 64, 0);
    if (o.st != QVL_OK) fail_msg("%s", o.err.msg);
    assert_int_equal(o.fit.image_tokens, CTX);
    assert_true(o.fit.vision_bytes > last);
    qvl_model_close(o.m);
}

/* The need of the whole model (f16 KV unless kv_type) with a picture of 64 tokens. */
static uint64_t whole_need(const char *kv_type) {
    opened o = open_with(BIG, kv_type, NULL, 64, 64, 0);
    if (o.st != QVL_OK) fail_msg("%s", o.err.msg);
    uint64_t need = o.fit.need_bytes;
    qvl_model_close(o.m);
    return need;
}

static void test_auto_fits_what_fits(void **state) {
    (void)state;
    const uint64_t need = whole_need(NULL);
    /* 2.5 layers' weights short of the whole model (a layer is 3 MiB of f32 weights) */
    const uint64_t kib = (need - ((uint64_t)15 << 19)) >> 10;
    opened o = open_with(kib, NULL, "auto", 64, 64, 0);
    if (o.st != QVL_OK) fail_msg("%s", o.err.msg);
    const int64_t n = o.fit.gpu_layers;
    assert_true(n > 0 && n < LAYERS);
    assert_true(o.fit.need_bytes <= kib << 10);
    /* The layers it chose run within the budget: a picture, prompt batches, a decode step. */
    const qvl_image_grid grid = {1, 16, 16};
    float *px = calloc(256 * WIDTH, sizeof *px);
    assert_non_null(px);
    qvl_image_features feat = {0};
    assert_int_equal(qvl_model_encode_images(o.m, px, 1, &grid, &feat, &o.err), QVL_OK);
    qvl_image_features_free(&feat);
    free(px);
    int32_t ids[64] = {0};
    float *logits = malloc(512 * sizeof *logits);
    assert_non_null(logits);
    for (int k = 0; k < 2; k++)
        if (qvl_model_eval(o.m, ids, 64, NULL, false, logits, &o.err) != QVL_OK)
            fail_msg("%s", o.err.msg);
    if (qvl_model_eval(o.m, ids, 1, NULL, false, logits, &o.err) != QVL_OK)
        fail_msg("%s", o.err.msg);
    free(logits);
    qvl_model_close(o.m);
    /* One layer more does not fit. */
    char more[24];
    snprintf(more, sizeof more, "%lld", (long long)(n + 1));
    opened p = open_with(kib, NULL, more, 64, 64, 0);
    if (p.st != QVL_OK) fail_msg("%s", p.err.msg);
    assert_true(p.fit.need_bytes > kib << 10);
    qvl_model_close(p.m);
}

static void test_refusal_names_what_fits(void **state) {
    (void)state;
    const uint64_t f16 = whole_need(NULL), q8 = whole_need("q8_0");
    assert_true(q8 < f16);
    /* Between the two: q8_0 fits, f16 does not. */
    uint64_t kib = ((f16 + q8) / 2) >> 10;
    opened o = open_with(kib, NULL, NULL, 64, 64, 0);
    assert_int_equal(o.st, QVL_E_NOMEM);
    assert_null(o.m);
    assert_null(strchr(o.err.msg, '\n'));
    assert_non_null(strstr(o.err.msg, "the model needs "));
    assert_non_null(strstr(o.err.msg, " MiB on memfree (weights "));
    assert_non_null(strstr(o.err.msg, " at f16, vision "));
    assert_non_null(strstr(o.err.msg, "MiB are free: --kv-type q8_0 would fit (KV "));
    opened a = open_with(kib, NULL, "auto", 64, 64, 0);
    if (a.st != QVL_OK) fail_msg("%s", a.err.msg);
    char want[64];
    snprintf(want, sizeof want, "or -ngl auto (%lld layers on the GPU)",
             (long long)a.fit.gpu_layers);
    assert_true(a.fit.gpu_layers > 1 && a.fit.gpu_layers < LAYERS);
    assert_non_null(strstr(o.err.msg, want));
    qvl_model_close(a.m);
    opened q = open_with(kib, "q8_0", NULL, 64, 64, 0); /* what the line says fits */
    if (q.st != QVL_OK) fail_msg("%s", q.err.msg);
    assert_int_equal(q.fit.gpu_layers, LAYERS);
    qvl_model_close(q.m);

    /* Below q8_0's need too: only the layer count is offered. */
    kib = (q8 - ((uint64_t)4 << 20)) >> 10;
    o = open_with(kib, NULL, NULL, 64, 64, 0);
    assert_int_equal(o.st, QVL_E_NOMEM);
    assert_null(strstr(o.err.msg, "q8_0"));
    a = open_with(kib, NULL, "auto", 64, 64, 0);
    if (a.st != QVL_OK) fail_msg("%s", a.err.msg);
    assert_true(a.fit.gpu_layers > 1 && a.fit.gpu_layers < LAYERS);
    snprintf(want, sizeof want, "MiB are free: -ngl auto (%lld layers on the GPU)",
             (long long)a.fit.gpu_layers);
    assert_non_null(strstr(o.err.msg, want));
    qvl_model_close(a.m);
}

static int setup(void **state) {
    (void)state;
    if (scratch_dir_make("qvl-place")) return -1;
    char config[300];
    scratch_path(config, sizeof config, "config.json");
    scratch_path(model_dir, sizeof model_dir, "m");
    scratch_path(plugins, sizeof plugins, "plugins.yaml");
    FILE *f = fopen(config, "w");
    if (!f || fputs(config_json, f) < 0 || fclose(f) != 0) return -1;
    qvl_error err = {0};
    if (qvl_qwen3vl_mkmodel(config, model_dir, 1, QVL_F32, 0.02f, NULL, &err) != QVL_OK) {
        fprintf(stderr, "mkmodel: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return scratch_dir_remove();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counts_match_the_load),
        cmocka_unit_test(test_kv_per_dtype),
        cmocka_unit_test(test_vision_grows_with_budget),
        cmocka_unit_test(test_auto_fits_what_fits),
        cmocka_unit_test(test_refusal_names_what_fits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
