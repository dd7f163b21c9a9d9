/* Tensor list, weight store and mkmodel: random checkpoints of a tiny config are opened,
 * then broken one way at a time; the 2B config must imply the published totals. */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qvl/mkmodel.h"
#include "qvl/qwen3vl_config.h"
#include "qvl/safetensors.h"
#include "test_scratch_dir.h"
#include "qvl/weights.h"

static int g_sub; /* numbering for per-test subdirectories */

static int setup_dir(void **state) {
    (void)state;
    return scratch_dir_make("qvl-weights");
}

static int teardown_dir(void **state) {
    (void)state;
    return scratch_dir_remove();
}

/* A fresh empty directory inside the test directory. */
static void new_subdir(char *buf, size_t cap) {
    int k = snprintf(buf, cap, "%s/m%d", scratch_dir, g_sub++);
    assert_true(k > 0 && (size_t)k < cap);
    assert_int_equal(mkdir(buf, 0755), 0);
}

static void join(char *buf, size_t cap, const char *dir, const char *name) {
    int k = snprintf(buf, cap, "%s/%s", dir, name);
    assert_true(k > 0 && (size_t)k < cap);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = '\0';
    fclose(f);
    if (len) *len = (size_t)n;
    return p;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static bool files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *pa = slurp(a, &na), *pb = slurp(b, &nb);
    bool eq = pa && pb && na == nb && !memcmp(pa, pb, na);
    free(pa);
    free(pb);
    return eq;
}

/* ---- a tiny config, as a struct and as config.json ------------------------------------- */

static qvl_qwen3vl_config tiny_config(void) {
    qvl_qwen3vl_config c;
    memset(&c, 0, sizeof c);
    c.text = (qvl_text_config){.vocab_size = 64, .hidden_size = 16, .intermediate_size = 32,
                               .num_hidden_layers = 2, .num_attention_heads = 2,
                               .num_key_value_heads = 1, .head_dim = 8, .rms_norm_eps = 1e-6,
                               .rope_theta = 10000, .mrope_section = {2, 1, 1},
                               .mrope_interleaved = true, .max_position_embeddings = 256,
                               .bos_token_id = 1, .eos_token_id = 2};
    c.vision = (qvl_vision_config){.depth = 2, .hidden_size = 8, .intermediate_size = 16,
                                   .num_heads = 2, .patch_size = 2, .temporal_patch_size = 2,
                                   .spatial_merge_size = 2, .in_channels = 3,
                                   .out_hidden_size = 16, .num_position_embeddings = 16,
                                   .n_deepstack = 1, .deepstack_visual_indexes = {0}};
    c.has_vision = true;
    c.tie_word_embeddings = true;
    c.image_token_id = 60;
    c.video_token_id = 61;
    c.vision_start_token_id = 58;
    c.vision_end_token_id = 59;
    return c;
}

static const char *const TINY_CONFIG_JSON =
    "{\n"
    "  \"architectures\": [\"Qwen3VLForConditionalGeneration\"],\n"
    "  \"model_type\": \"qwen3_vl\",\n"
    "  \"image_token_id\": 60, \"video_token_id\": 61,\n"
    "  \"vision_start_token_id\": 58, \"vision_end_token_id\": 59,\n"
    "  \"tie_word_embeddings\": true,\n"
    "  \"text_config\": {\n"
    "    \"vocab_size\": 64, \"hidden_size\": 16, \"intermediate_size\": 32,\n"
    "    \"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,\n"
    "    \"head_dim\": 8, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000,\n"
    "    \"rope_scaling\": {\"rope_type\": \"default\", \"mrope_section\": [2, 1, 1],\n"
    "                     \"mrope_interleaved\": true},\n"
    "    \"max_position_embeddings\": 256, \"attention_bias\": false, \"hidden_act\": \"silu\",\n"
    "    \"bos_token_id\": 1, \"eos_token_id\": 2, \"dtype\": \"bfloat16\"\n"
    "  },\n"
    "  \"vision_config\": {\n"
    "    \"depth\": 2, \"hidden_size\": 8, \"intermediate_size\": 16, \"num_heads\": 2,\n"
    "    \"patch_size\": 2, \"temporal_patch_size\": 2, \"spatial_merge_size\": 2,\n"
    "    \"in_channels\": 3, \"out_hidden_size\": 16, \"num_position_embeddings\": 16,\n"
    "    \"deepstack_visual_indexes\": [0], \"hidden_act\": \"gelu_pytorch_tanh\"\n"
    "  }\n"
    "}\n";

static void get_specs(const qvl_qwen3vl_config *c, qvl_tensor_spec **specs, size_t *n) {
    qvl_error err = {0};
    if (qvl_qwen3vl_tensor_specs(c, specs, n, &err) != QVL_OK) fail_msg("%s", err.msg);
}

static int64_t spec_params(const qvl_tensor_spec *s, size_t n) {
    int64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t p = 1;
        for (int d = 0; d < s[i].ndim; d++) p *= s[i].shape[d];
        total += p;
    }
    return total;
}

static const qvl_tensor_spec *find_spec(const qvl_tensor_spec *s, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(s[i].name, name)) return &s[i];
    return NULL;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* ---- the tensor list --------------------------------------------------------------------- */

/* Counts and parameters written out per module from the architecture, not from the code. */
static void test_specs_tiny(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    const int64_t V = 64, H = 16, F = 32, L = 2, QD = 2 * 8, KVD = 1 * 8, HD = 8;
    const int64_t h = 8, f = 16, D = 2, C = 3, T = 2, P = 2, NP = 16, M = 8 * 4, O = 16, K = 1;
    assert_int_equal(n, (1 + 11 * L + 1) + (3 + 12 * D + 6 + 6 * K));
    int64_t text = V * H + L * (2 * H + QD * H + 2 * KVD * H + H * QD + 2 * HD + 3 * F * H) + H;
    int64_t layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (f * h + f) + (h * f + h);
    int64_t merger = 2 * h + (M * M + M) + (O * M + O);
    int64_t deep = 2 * M + (M * M + M) + (O * M + O);
    int64_t vision = h * C * T * P * P + h + NP * h + D * layer + merger + K * deep;
    assert_int_equal(spec_params(s, n), text + vision);

    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n; j++) assert_string_not_equal(s[i].name, s[j].name);
        bool text_name = !strncmp(s[i].name, "model.language_model.", 21);
        bool vision_name = !strncmp(s[i].name, "model.visual.", 13);
        assert_true(text_name || vision_name);
        assert_int_equal(s[i].is_bias, ends_with(s[i].name, ".bias"));
        bool norm = ends_with(s[i].name, "norm.weight") || ends_with(s[i].name, "norm1.weight") ||
                    ends_with(s[i].name, "norm2.weight");
        assert_int_equal(s[i].is_norm, norm);
    }
    assert_null(find_spec(s, n, "lm_head.weight"));
    const qvl_tensor_spec *pe = find_spec(s, n, "model.visual.patch_embed.proj.weight");
    assert_non_null(pe);
    assert_int_equal(pe->ndim, 5);
    const int64_t want_pe[5] = {h, C, T, P, P};
    assert_memory_equal(pe->shape, want_pe, sizeof want_pe);
    const qvl_tensor_spec *k =
        find_spec(s, n, "model.language_model.layers.1.self_attn.k_proj.weight");
    assert_non_null(k);
    assert_int_equal(k->shape[0], KVD);
    assert_int_equal(k->shape[1], H);
    const qvl_tensor_spec *ds = find_spec(s, n, "model.visual.deepstack_merger_list.0.norm.weight");
    assert_non_null(ds);
    assert_int_equal(ds->shape[0], M);
    assert_null(find_spec(s, n, "model.visual.deepstack_merger_list.1.norm.weight"));
    free(s);

    /* Untied: lm_head appears; attention_bias: four biases per layer; no vision: text only. */
    c.tie_word_embeddings = false;
    c.text.attention_bias = true;
    get_specs(&c, &s, &n);
    const qvl_tensor_spec *lm = find_spec(s, n, "lm_head.weight");
    assert_non_null(lm);
    assert_int_equal(lm->shape[0], V);
    assert_non_null(find_spec(s, n, "model.language_model.layers.0.self_attn.o_proj.bias"));
    assert_int_equal(n, (1 + 15 * L + 1) + 1 + (3 + 12 * D + 6 + 6 * K));
    free(s);
    c.has_vision = false;
    get_specs(&c, &s, &n);
    assert_int_equal(n, (1 + 15 * L + 1) + 1);
    free(s);
}

static void test_specs_reject_bad_config(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    c.vision.hidden_size = 0;
    qvl_tensor_spec *s = (qvl_tensor_spec *)(uintptr_t)1;
    size_t n = 7;
    qvl_error err = {0};
    assert_int_not_equal(qvl_qwen3vl_tensor_specs(&c, &s, &n, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "vision_config.hidden_size"));
    assert_null(s);
    assert_int_equal(n, 0);
    c = tiny_config();
    c.vision.n_deepstack = QVL_MAX_DEEPSTACK + 1;
    assert_int_not_equal(qvl_qwen3vl_tensor_specs(&c, &s, &n, &err), QVL_OK);
}

/* The published 2B totals (docs/MODEL.md, "Checkpoint tensors"): 625 tensors, 2,127,532,032
 * parameters, no lm_head. */
static void test_specs_2b(void **state) {
    (void)state;
    const char *path = QVL_SHARED_DATA_DIR "/qwen3-vl-2b-instruct/config.json";
    if (access(path, R_OK) != 0) {
        print_message("skipped: %s not present\n", path);
        skip();
    }
    qvl_qwen3vl_config c;
    qvl_error err = {0};
    if (qvl_qwen3vl_config_load(path, &c, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    assert_int_equal(n, 625);
    assert_int_equal(spec_params(s, n), INT64_C(2127532032));
    assert_null(find_spec(s, n, "lm_head.weight"));
    const qvl_tensor_spec *e = find_spec(s, n, "model.language_model.embed_tokens.weight");
    assert_non_null(e);
    assert_int_equal(e->shape[0], 151936);
    assert_int_equal(e->shape[1], 2048);
    const qvl_tensor_spec *pe = find_spec(s, n, "model.visual.patch_embed.proj.weight");
    assert_non_null(pe);
    const int64_t want_pe[5] = {1024, 3, 2, 16, 16};
    assert_memory_equal(pe->shape, want_pe, sizeof want_pe);
    assert_non_null(find_spec(s, n, "model.visual.deepstack_merger_list.2.linear_fc2.bias"));
    assert_non_null(find_spec(s, n, "model.language_model.layers.27.mlp.down_proj.weight"));
    free(s);
}

/* ---- the weight store -------------------------------------------------------------------- */

static void write_weights(const char *dir, const qvl_tensor_spec *s, size_t n, uint64_t seed,
                          qvl_dtype dtype, float std) {
    char path[512];
    join(path, sizeof path, dir, "model.safetensors");
    qvl_error err = {0};
    if (qvl_qwen3vl_write_random_weights(path, s, n, seed, dtype, std, &err) != QVL_OK)
        fail_msg("%s", err.msg);
}

static void test_open_random_model(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n, 42, QVL_BF16, 0.02f);

    qvl_weights *w = NULL;
    qvl_error err = {0};
    if (qvl_weights_open(dir, &c, &w, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(qvl_weights_count(w), n);
    for (size_t i = 0; i < n; i++) {
        const qvl_st_tensor *t = qvl_weights_get(w, s[i].name);
        assert_non_null(t);
        assert_ptr_equal(t, qvl_weights_at(w, i));
        assert_int_equal(t->dtype, QVL_BF16);
        assert_int_equal(t->ndim, s[i].ndim);
        assert_memory_equal(t->shape, s[i].shape, (size_t)s[i].ndim * sizeof(int64_t));
    }
    assert_null(qvl_weights_get(w, "lm_head.weight"));
    assert_null(qvl_weights_at(w, n));
    assert_int_equal(qvl_weights_total_bytes(w), (size_t)spec_params(s, n) * 2);
    qvl_weights_close(w);
    free(s);
}

static void stats(const qvl_st_tensor *t, double *mean, double *sd, double *maxdev) {
    size_t n = t->nbytes / 4;
    double sum = 0, sq = 0;
    *maxdev = 0;
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * i, 4);
        sum += v;
        sq += (double)v * v;
    }
    *mean = sum / (double)n;
    *sd = sqrt(sq / (double)n - *mean * *mean);
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, (const char *)t->data + 4 * i, 4);
        if (fabs(v - *mean) > *maxdev) *maxdev = fabs(v - *mean);
    }
}

/* Norm weights near 1, the rest centred on 0 with the requested spread. */
static void test_random_values(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    char dir[512];
    new_subdir(dir, sizeof dir);
    const float sd_req = 0.1f;
    write_weights(dir, s, n, 1, QVL_F32, sd_req);
    qvl_weights *w = NULL;
    qvl_error err = {0};
    if (qvl_weights_open(dir, &c, &w, &err) != QVL_OK) fail_msg("%s", err.msg);
    double mean, sd, maxdev;
    stats(qvl_weights_get(w, "model.language_model.embed_tokens.weight"), &mean, &sd, &maxdev);
    assert_true(fabs(mean) < 0.02);
    assert_true(sd > 0.09 && sd < 0.11);
    assert_true(maxdev < 7 * sd_req);
    stats(qvl_weights_get(w, "model.visual.merger.linear_fc1.weight"), &mean, &sd, &maxdev);
    assert_true(fabs(mean) < 0.02);
    assert_true(sd > 0.09 && sd < 0.11);
    stats(qvl_weights_get(w, "model.language_model.norm.weight"), &mean, &sd, &maxdev);
    assert_true(fabs(mean - 1) < 0.1);
    assert_true(maxdev < 7 * sd_req);
    stats(qvl_weights_get(w, "model.visual.blocks.1.attn.qkv.bias"), &mean, &sd, &maxdev);
    assert_true(fabs(mean) < 0.1);
    assert_true(sd > 0.02);
    qvl_weights_close(w);
    free(s);
}

static void test_random_is_deterministic(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    char a[512], b[512], d[512], e[512], pa[600], pb[600], pd[600], pe[600];
    new_subdir(a, sizeof a);
    new_subdir(b, sizeof b);
    new_subdir(d, sizeof d);
    new_subdir(e, sizeof e);
    write_weights(a, s, n, 7, QVL_F16, 0.02f);
    write_weights(b, s, n, 7, QVL_F16, 0.02f);
    write_weights(d, s, n, 8, QVL_F16, 0.02f);
    write_weights(e, s + 1, n - 1, 7, QVL_F16, 0.02f); /* without the first tensor */
    join(pa, sizeof pa, a, "model.safetensors");
    join(pb, sizeof pb, b, "model.safetensors");
    join(pd, sizeof pd, d, "model.safetensors");
    join(pe, sizeof pe, e, "model.safetensors");
    assert_true(files_equal(pa, pb));
    assert_false(files_equal(pa, pd));

    /* A tensor's values depend on the seed and its name only. */
    qvl_safetensors *fa = NULL, *fe = NULL;
    qvl_error err = {0};
    assert_int_equal(qvl_safetensors_open(pa, &fa, &err), QVL_OK);
    assert_int_equal(qvl_safetensors_open(pe, &fe, &err), QVL_OK);
    const qvl_st_tensor *ta = qvl_safetensors_find(fa, s[n - 1].name);
    const qvl_st_tensor *te = qvl_safetensors_find(fe, s[n - 1].name);
    assert_non_null(ta);
    assert_non_null(te);
    assert_int_equal(ta->nbytes, te->nbytes);
    assert_memory_equal(ta->data, te->data, ta->nbytes);
    assert_string_equal(qvl_safetensors_metadata(fa, "format"), "pt");
    qvl_safetensors_close(fa);
    qvl_safetensors_close(fe);
    free(s);
}

/* Opening must fail with code; the message names the file and every needle. */
static void expect_weights_error(const char *dir, const qvl_qwen3vl_config *c, qvl_status code,
                                 const char *n1, const char *n2, const char *n3) {
    qvl_weights *w = (qvl_weights *)(uintptr_t)1;
    qvl_error err = {0};
    qvl_status st = qvl_weights_open(dir, c, &w, &err);
    const char *needles[3] = {n1, n2, n3};
    bool ok = st == code && strstr(err.msg, dir);
    for (int i = 0; i < 3; i++)
        if (needles[i] && !strstr(err.msg, needles[i])) ok = false;
    if (!ok)
        fail_msg("status %d (wanted %d), message '%s' (wanted '%s' '%s' '%s')", (int)st, (int)code,
                 err.msg, n1 ? n1 : "", n2 ? n2 : "", n3 ? n3 : "");
    assert_null(w);
    if (getenv("QVL_TEST_VERBOSE")) print_message("%s\n", err.msg);
}

static void test_missing_tensor(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    const char *victim = "model.visual.blocks.1.attn.qkv.weight";
    size_t k = 0;
    while (strcmp(s[k].name, victim)) k++;
    memmove(&s[k], &s[k + 1], (n - k - 1) * sizeof *s);
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n - 1, 3, QVL_BF16, 0.02f);
    expect_weights_error(dir, &c, QVL_E_NOT_FOUND, victim, "1 expected tensor missing", NULL);
    free(s);
}

/* Eleven tensors of one layer missing: a few names, then a count. */
static void test_many_missing(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0, m = 0;
    get_specs(&c, &s, &n);
    for (size_t i = 0; i < n; i++)
        if (!strstr(s[i].name, "language_model.layers.1.")) s[m++] = s[i];
    assert_int_equal(n - m, 11);
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, m, 3, QVL_BF16, 0.02f);
    expect_weights_error(dir, &c, QVL_E_NOT_FOUND, "11 expected tensors missing", "and 8 more",
                         "model.language_model.layers.1.");
    free(s);
}

static void test_wrong_shape(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    /* The 5-D patch embedding stored flattened to 2-D must be refused. */
    qvl_tensor_spec *pe =
        (qvl_tensor_spec *)find_spec(s, n, "model.visual.patch_embed.proj.weight");
    assert_non_null(pe);
    pe->ndim = 2;
    pe->shape[1] = pe->shape[1] * pe->shape[2] * pe->shape[3] * pe->shape[4];
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n, 3, QVL_BF16, 0.02f);
    expect_weights_error(dir, &c, QVL_E_SHAPE, "model.visual.patch_embed.proj.weight", "[8, 24]",
                         "[8, 3, 2, 2, 2]");
    free(s);

    get_specs(&c, &s, &n);
    qvl_tensor_spec *q =
        (qvl_tensor_spec *)find_spec(s, n, "model.language_model.layers.0.self_attn.q_proj.weight");
    q->shape[0]++;
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n, 3, QVL_BF16, 0.02f);
    expect_weights_error(dir, &c, QVL_E_SHAPE, "layers.0.self_attn.q_proj.weight", "[17, 16]",
                         NULL);
    free(s);
}

static void test_unexpected_tensor(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    qvl_tensor_spec *more = realloc(s, (n + 1) * sizeof *s);
    assert_non_null(more);
    s = more;
    s[n] = s[n - 1];
    snprintf(s[n].name, sizeof s[n].name, "model.language_model.layers.2.mlp.up_proj.weight");
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n + 1, 3, QVL_BF16, 0.02f);
    expect_weights_error(dir, &c, QVL_E_INVALID, "1 unexpected tensor",
                         "model.language_model.layers.2.mlp.up_proj.weight", NULL);
    free(s);
}

/* Tied: a stored lm_head is ignored, as transformers does. Untied: it is required. */
static void test_lm_head(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    c.tie_word_embeddings = false;
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n, 5, QVL_BF16, 0.02f);
    qvl_weights *w = NULL;
    qvl_error err = {0};
    if (qvl_weights_open(dir, &c, &w, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_non_null(qvl_weights_get(w, "lm_head.weight"));
    qvl_weights_close(w);

    c.tie_word_embeddings = true; /* same files, now tied */
    if (qvl_weights_open(dir, &c, &w, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_null(qvl_weights_get(w, "lm_head.weight"));
    assert_int_equal(qvl_weights_count(w), n - 1);
    qvl_weights_close(w);
    free(s);

    get_specs(&c, &s, &n); /* tied specs: no lm_head in the file */
    new_subdir(dir, sizeof dir);
    write_weights(dir, s, n, 5, QVL_BF16, 0.02f);
    c.tie_word_embeddings = false;
    expect_weights_error(dir, &c, QVL_E_NOT_FOUND, "lm_head.weight", NULL, NULL);
    free(s);
}

static void test_no_weights(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    char dir[512];
    new_subdir(dir, sizeof dir);
    expect_weights_error(dir, &c, QVL_E_NOT_FOUND, "model.safetensors", NULL, NULL);
}

/* Two shards and an index; the index's shard names must stay in the directory. */
static void write_sharded(const char *dir, const qvl_tensor_spec *s, size_t n, size_t split,
                          const char *name_of_first_in_index) {
    char path[512];
    qvl_error err = {0};
    join(path, sizeof path, dir, "model-00001-of-00002.safetensors");
    if (qvl_qwen3vl_write_random_weights(path, s, split, 9, QVL_BF16, 0.02f, &err) != QVL_OK)
        fail_msg("%s", err.msg);
    join(path, sizeof path, dir, "model-00002-of-00002.safetensors");
    if (qvl_qwen3vl_write_random_weights(path, s + split, n - split, 9, QVL_BF16, 0.02f, &err) !=
        QVL_OK)
        fail_msg("%s", err.msg);
    size_t cap = 256 + n * 200, len = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    len += (size_t)snprintf(json + len, cap - len,
                            "{\"metadata\": {\"total_size\": 0},\n \"weight_map\": {");
    for (size_t i = 0; i < n; i++) {
        const char *shard =
            i < split ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
        if (i == 0) shard = name_of_first_in_index;
        len += (size_t)snprintf(json + len, cap - len, "%s\n  \"%s\": \"%s\"", i ? "," : "",
                                s[i].name, shard);
    }
    snprintf(json + len, cap - len, "\n }\n}\n");
    join(path, sizeof path, dir, "model.safetensors.index.json");
    spit(path, json);
    free(json);
}

static void test_sharded(void **state) {
    (void)state;
    qvl_qwen3vl_config c = tiny_config();
    qvl_tensor_spec *s = NULL;
    size_t n = 0;
    get_specs(&c, &s, &n);
    char dir[512];
    new_subdir(dir, sizeof dir);
    write_sharded(dir, s, n, n / 2, "model-00001-of-00002.safetensors");
    qvl_weights *w = NULL;
    qvl_error err = {0};
    if (qvl_weights_open(dir, &c, &w, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_non_null(qvl_weights_get(w, s[0].name));
    assert_non_null(qvl_weights_get(w, s[n - 1].name));
    assert_int_equal(qvl_weights_count(w), n);
    qvl_weights_close(w);

    new_subdir(dir, sizeof dir);
    write_sharded(dir, s, n, n / 2, "../model-00001-of-00002.safetensors");
    expect_weights_error(dir, &c, QVL_E_INVALID, "../model-00001-of-00002.safetensors",
                         "plain file name", s[0].name);

    new_subdir(dir, sizeof dir);
    write_sharded(dir, s, n, n / 2, "model-00002-of-00002.safetensors");
    expect_weights_error(dir, &c, QVL_E_INVALID, s[0].name, "model-00001-of-00002.safetensors",
                         NULL);

    new_subdir(dir, sizeof dir);
    write_sharded(dir, s, n, n / 2, "model-00003-of-00002.safetensors");
    expect_weights_error(dir, &c, QVL_E_NOT_FOUND, "model-00003-of-00002.safetensors", NULL, NULL);
    free(s);
}

/* ---- mkmodel ----------------------------------------------------------------------------- */

static void test_mkmodel(void **state) {
    (void)state;
    char src[512], cfg_path[600], tok[600], out[600], path[700], copy[700];
    new_subdir(src, sizeof src);
    join(cfg_path, sizeof cfg_path, src, "config.json");
    join(tok, sizeof tok, src, "tok.json");
    spit(cfg_path, TINY_CONFIG_JSON);
    spit(tok, "{\"model\": {}}\n");
    join(out, sizeof out, src, "out/nested/model");

    qvl_error err = {0};
    if (qvl_qwen3vl_mkmodel(cfg_path, out, 11, QVL_BF16, 0.02f, tok, &err) != QVL_OK)
        fail_msg("%s", err.msg);
    join(path, sizeof path, out, "config.json");
    assert_true(files_equal(path, cfg_path));
    join(path, sizeof path, out, "tokenizer.json");
    assert_true(files_equal(path, tok));
    join(path, sizeof path, out, "generation_config.json");
    char *gen = slurp(path, NULL);
    assert_non_null(gen);
    assert_non_null(strstr(gen, "\"eos_token_id\""));
    free(gen);
    join(path, sizeof path, out, "preprocessor_config.json");
    char *pre = slurp(path, NULL);
    assert_non_null(pre);
    assert_non_null(strstr(pre, "\"merge_size\""));
    free(pre);

    qvl_qwen3vl_config c;
    join(path, sizeof path, out, "config.json");
    if (qvl_qwen3vl_config_load(path, &c, &err) != QVL_OK) fail_msg("%s", err.msg);
    qvl_weights *w = NULL;
    if (qvl_weights_open(out, &c, &w, &err) != QVL_OK) fail_msg("%s", err.msg);
    const qvl_st_tensor *t = qvl_weights_get(w, "model.visual.pos_embed.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, QVL_BF16);
    qvl_weights_close(w);

    /* Files beside the config are copied verbatim; making the model again overwrites. */
    join(path, sizeof path, src, "generation_config.json");
    spit(path, "{\"eos_token_id\": [2, 1], \"top_k\": 20}\n");
    if (qvl_qwen3vl_mkmodel(cfg_path, out, 11, QVL_F32, 0.02f, NULL, &err) != QVL_OK)
        fail_msg("%s", err.msg);
    join(copy, sizeof copy, out, "generation_config.json");
    assert_true(files_equal(path, copy));

    /* Making a model into the config's own directory keeps the config intact. */
    if (qvl_qwen3vl_mkmodel(cfg_path, src, 1, QVL_F16, 0.02f, NULL, &err) != QVL_OK)
        fail_msg("%s", err.msg);
    char *again = slurp(cfg_path, NULL);
    assert_string_equal(again, TINY_CONFIG_JSON);
    free(again);
}

static void test_mkmodel_errors(void **state) {
    (void)state;
    char src[512], cfg_path[600], out[700], file[600];
    new_subdir(src, sizeof src);
    join(cfg_path, sizeof cfg_path, src, "config.json");
    spit(cfg_path, TINY_CONFIG_JSON);
    qvl_error err = {0};

    join(file, sizeof file, src, "a_file");
    spit(file, "x");
    join(out, sizeof out, file, "sub");
    assert_int_not_equal(qvl_qwen3vl_mkmodel(cfg_path, out, 1, QVL_BF16, 0.02f, NULL, &err),
                         QVL_OK);
    assert_non_null(strstr(err.msg, "a_file"));
    assert_non_null(strstr(err.msg, "not a directory"));

    join(out, sizeof out, src, "never");
    assert_int_equal(
        qvl_qwen3vl_mkmodel(cfg_path, out, 1, QVL_BF16, 0.02f, "/nonexistent/tok.json", &err),
        QVL_E_NOT_FOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/tok.json"));
    assert_int_not_equal(access(out, F_OK), 0); /* nothing made */

    assert_int_not_equal(qvl_qwen3vl_mkmodel(cfg_path, out, 1, QVL_Q8_0, 0.02f, NULL, &err),
                         QVL_OK);
    join(file, sizeof file, src, "missing.json");
    assert_int_not_equal(qvl_qwen3vl_mkmodel(file, out, 1, QVL_BF16, 0.02f, NULL, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "missing.json"));
}

/* A directory prepared by someone else: links at the names mkmodel writes (they point at a
 * victim's files) make it refuse before writing anything, and weights mkmodel did not make are
 * never replaced. */
static void test_mkmodel_links_and_real_weights(void **state) {
    (void)state;
    char src[512], cfg_path[600], victim[600], out[600], link[700], path[700];
    new_subdir(src, sizeof src);
    join(cfg_path, sizeof cfg_path, src, "config.json");
    spit(cfg_path, TINY_CONFIG_JSON);
    join(victim, sizeof victim, src, "victim.txt");
    spit(victim, "precious\n");
    join(out, sizeof out, src, "prepared");
    assert_int_equal(mkdir(out, 0755), 0);
    static const char *const names[] = {"config.json", "generation_config.json",
                                        "preprocessor_config.json", "model.safetensors.partial"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        join(link, sizeof link, out, names[i]);
        assert_int_equal(symlink(victim, link), 0);
    }
    qvl_error err = {0};
    assert_int_equal(qvl_qwen3vl_mkmodel(cfg_path, out, 3, QVL_BF16, 0.02f, NULL, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "holds a symbolic link (config.json)"));
    char *v = slurp(victim, NULL);
    assert_string_equal(v, "precious\n");
    free(v);
    struct stat sb;
    join(path, sizeof path, out, "config.json");
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode)); /* left as it was */
    join(path, sizeof path, out, "model.safetensors");
    assert_int_not_equal(lstat(path, &sb), 0); /* nothing written */

    /* model.safetensors as a link to the victim: refused, nothing written through it */
    join(out, sizeof out, src, "linked_weights");
    assert_int_equal(mkdir(out, 0755), 0);
    join(link, sizeof link, out, "model.safetensors");
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(qvl_qwen3vl_mkmodel(cfg_path, out, 3, QVL_BF16, 0.02f, NULL, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "not made by qvl mkmodel"));
    v = slurp(victim, NULL);
    assert_string_equal(v, "precious\n");
    free(v);

    /* real weights (a safetensors file without mkmodel's mark) are left as they are */
    join(out, sizeof out, src, "real");
    assert_int_equal(mkdir(out, 0755), 0);
    join(path, sizeof path, out, "model.safetensors");
    const float one = 1.0f;
    qvl_st_write_tensor t = {.name = "w", .dtype = QVL_F32, .ndim = 1, .shape = {1}, .data = &one};
    static const char *const meta[] = {"format", "pt"};
    assert_int_equal(qvl_safetensors_write(path, &t, 1, meta, 1, &err), QVL_OK);
    char *before = slurp(path, NULL);
    assert_int_equal(qvl_qwen3vl_mkmodel(cfg_path, out, 3, QVL_BF16, 0.02f, NULL, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "real/model.safetensors exists"));
    join(link, sizeof link, out, "config.json");
    assert_int_not_equal(access(link, F_OK), 0); /* refused before anything was written */
    char *after = slurp(path, NULL);
    assert_memory_equal(before, after, 8);
    free(before);
    free(after);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specs_tiny),
        cmocka_unit_test(test_specs_reject_bad_config),
        cmocka_unit_test(test_specs_2b),
        cmocka_unit_test(test_open_random_model),
        cmocka_unit_test(test_random_values),
        cmocka_unit_test(test_random_is_deterministic),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_many_missing),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_unexpected_tensor),
        cmocka_unit_test(test_lm_head),
        cmocka_unit_test(test_no_weights),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_mkmodel),
        cmocka_unit_test(test_mkmodel_errors),
        cmocka_unit_test(test_mkmodel_links_and_real_weights),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
