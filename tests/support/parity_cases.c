/* The image and video parity tests' shared helpers: see parity_cases.h. */
#include "parity_cases.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qvl/gen_config.h"
#include "qvl/generate.h"
#include "qvl/sampling.h"

const char *parity_kv_type(void) { return parity_env("QVL_PARITY_KV_TYPE"); }

bool parity_kv_is_f32(void) { return parity_kv_type() && strcmp(parity_kv_type(), "f32") == 0; }

const cJSON *parity_item(const cJSON *c, const char *key) {
    const cJSON *it = cJSON_GetObjectItem(c, key);
    if (!it) fail_msg("fixture key %s missing", key);
    return it;
}

int64_t parity_num(const cJSON *c, const char *key) {
    const cJSON *it = parity_item(c, key);
    if (!cJSON_IsNumber(it)) fail_msg("fixture key %s is not a number", key);
    return (int64_t)it->valuedouble;
}

int32_t *parity_json_ids(const cJSON *arr, int64_t *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    assert_non_null(ids);
    for (int64_t i = 0; i < *n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(arr, (int)i)->valuedouble;
    return ids;
}

void *parity_read_exact(const char *dir, const char *file, size_t bytes) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t got = 0;
    void *v = parity_read_file(path, &got);
    if (!v) fail_msg("%s: cannot read", path);
    if (got != bytes) fail_msg("%s: %zu bytes, expected %zu", path, got, bytes);
    return v;
}

void parity_compare_block(const char *what, const float *ours, const float *hf, size_t count,
                          double rtol) {
    double max_ref = 0, max_err = 0;
    for (size_t i = 0; i < count; i++) max_ref = fmax(max_ref, fabs(hf[i]));
    for (size_t i = 0; i < count; i++) max_err = fmax(max_err, fabs((double)ours[i] - hf[i]));
    printf("%s: max |ref| %.3f, max abs error %.3g (allowed %.3g)\n", what, max_ref, max_err,
           rtol * max_ref);
    if (!(max_err <= rtol * max_ref)) fail_msg("%s: outside the tolerance", what);
}

void parity_compare_features(const char *who, const qvl_image_features *f, const float *hf_vis,
                             int64_t K, int64_t D, int64_t n_ds, double rtol) {
    assert_int_equal(f->n_tokens, K);
    assert_int_equal(f->n_deepstack, n_ds);
    char what[1024];
    snprintf(what, sizeof what, "%s: merger", who);
    parity_compare_block(what, f->embeds, hf_vis, (size_t)(K * D), rtol);
    for (int64_t k = 0; k < n_ds; k++) {
        snprintf(what, sizeof what, "%s: deepstack %lld", who, (long long)k);
        parity_compare_block(what, f->deepstack + k * K * D, hf_vis + (1 + k) * K * D,
                             (size_t)(K * D), rtol);
    }
}

qvl_model_options parity_model_options(const char *backend, int64_t ctx) {
    return (qvl_model_options){.backend_name = backend, .ctx = ctx, .kv_type = parity_kv_type(),
                               .gpu_layers = parity_env("QVL_PARITY_GPU_LAYERS"),
                               .cpu_backend_name = parity_env("QVL_PARITY_CPU_BACKEND"),
                               .vision_backend_name = parity_env("QVL_PARITY_VISION_BACKEND")};
}

bool parity_unsupported(const parity_backends *l, const char *backend, const char *what,
                        qvl_status st, const qvl_error *err) {
    if (st == QVL_E_UNSUPPORTED && !l->strict && strcmp(backend, "reference") != 0) {
        printf("skipping the %s cases on backend %s: %s\n", what, backend, err->msg);
        return true;
    }
    return false;
}

static void on_token(int32_t id, void *user) {
    int32_t **cursor = user;
    *(*cursor)++ = id;
}

qvl_status parity_greedy(qvl_model *m, const int32_t *ids, int64_t n, const int32_t *pos,
                         const qvl_image_features *f, int64_t vocab, int64_t n_greedy,
                         float *logits, int32_t *got, int64_t *n_generated, qvl_error *err) {
    qvl_gen_config gen;
    qvl_gen_config_defaults(&gen);
    qvl_sampling_params sp;
    qvl_sampling_params_default(&sp);
    sp.temperature = 0;
    qvl_sampler *sampler = NULL;
    assert_int_equal(qvl_sampler_create(&sp, (int32_t)vocab, &sampler, err), QVL_OK);
    int32_t *cursor = got;
    qvl_generation g = {.max_new = n_greedy, .stop = &gen, .sampler = sampler,
                        .on_token = on_token, .user = &cursor, .prompt_logits = logits,
                        .prompt_pos = pos, .images = f};
    qvl_generation_result res = {0};
    qvl_status st = qvl_generate(m, ids, n, &g, &res, err);
    qvl_sampler_free(sampler);
    *n_generated = res.n_generated;
    return st;
}
