/* Parity with Hugging Face transformers on the committed fixtures (every model under tests/fixtures): the
 * prompt logits and the greedy continuation of small random-weight Qwen3-VL models, on every
 * backend that loads here.
 *
 * Tolerance: both sides compute in float32 on the same bf16-rounded weights (transformers on a
 * GPU with TF32 off, eager attention, the model loaded from the fixture directory), so they
 * differ only by summation order: measured here about 1e-6 of the largest logit. We allow
 * 1e-4 x max|logit| per element (the "~1e-4 relative"), room for backends that
 * reassociate sums (SIMD, GPU reductions). Greedy tokens are compared exactly and separately;
 * the smallest top-1/top-2 margin along the fixtures' greedy paths is 0.0055 (fixture.json),
 * about 6x the largest allowed logit error. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "qvl/gen_config.h"
#include "qvl/generate.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/sampling.h"
#include "parity_backends.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures"
static const char *const models[] = {"tiny-tied", "tiny-untied"};
#define LOGIT_RTOL 1e-4
/* The KV cache type under test: $QVL_PARITY_KV_TYPE (ctest runs f32 and the default, f16).
 * LOGIT_RTOL holds for an f32 cache. An f16 cache rounds every key and value to 11 significant
 * bits (relative error <= 2^-12), which moves the prompt logits by well under 2e-3 x
 * max|logit| (the measured figure is in docs/QUANT.md), so f16 is held to 2e-3 and its greedy
 * tokens must still be identical. A cache element near an f16 rounding boundary may round one
 * way after the prefill GEMM and the other after a decode GEMV (f32 sums in another order): the
 * incremental check then differs by up to one f16 step (2^-11) of that element, so it is held
 * to 2^-9 with f16. */
#define KV_TYPE_ENV "QVL_PARITY_KV_TYPE"
#define LOGIT_RTOL_KV_F16 2e-3
#define INCREMENTAL_TOL_KV_F16 (1.0 / 512)
/* A q8_0 cache rounds every value to a step of its 32-value block's max|x| / 127 (an error of
 * up to 1/254 of the block max, where f16's is 2^-12 of the value itself), so its logit error
 * is an order of magnitude above f16's (the figure is in docs/QUANT.md); q8_0 is held to 5e-2,
 * the margin over it that f16's bound has over f16's. Greedy tokens are compared exactly: they
 * stay identical on the fixtures, though the bound alone would not promise it. A cache block's
 * max can differ between the prefill GEMM and a decode GEMV (f32 sums in another order), which
 * moves its whole block by a fraction of a step: the incremental check allows one q8_0 step of
 * the block max, 1/128. tiny-untied's head_dim 16 is half a block: there q8_0 must be refused
 * at open. */
#define LOGIT_RTOL_KV_Q8_0 5e-2
#define INCREMENTAL_TOL_KV_Q8_0 (1.0 / 128)

/* ctest's *_split variants also set $QVL_PARITY_GPU_LAYERS (decoder layers on the backend under
 * test) and $QVL_PARITY_CPU_BACKEND (the rest): the tolerances do not change, a split moves
 * activations between backends, it does not round them. */

static const char *kv_type(void) { return parity_env(KV_TYPE_ENV); } /* NULL: the default */

static bool kv_is_f32(void) { return kv_type() && strcmp(kv_type(), "f32") == 0; }
static bool kv_is_q8_0(void) { return kv_type() && strcmp(kv_type(), "q8_0") == 0; }
static const char *kv_name(void) { return kv_is_f32() ? "f32" : kv_is_q8_0() ? "q8_0" : "f16"; }

/* text_config.head_dim of a fixture: a q8_0 cache needs whole 32-element blocks per head. */
static int64_t head_dim_of(const char *model_dir);

static int64_t head_dim_of(const char *model_dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    char *text = parity_read_file(path, NULL);
    assert_non_null(text);
    cJSON *cfg = cJSON_Parse(text);
    assert_non_null(cfg);
    const cJSON *hd = cJSON_GetObjectItem(cJSON_GetObjectItem(cfg, "text_config"), "head_dim");
    assert_non_null(hd);
    int64_t d = (int64_t)hd->valuedouble;
    cJSON_Delete(cfg);
    free(text);
    return d;
}

/* A q8_0 cache on a model whose head_dim is not whole q8_0 blocks: one clear error at open. */
static bool q8_0_refused(const char *model_dir, const char *backend) {
    if (!kv_is_q8_0() || head_dim_of(model_dir) % 32 == 0) return false;
    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = {.backend_name = backend, .ctx = 64, .kv_type = "q8_0"};
    assert_int_equal(qvl_model_open(model_dir, &mo, &m, &err), QVL_E_UNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err.msg, "head_dim"));
    assert_non_null(strstr(err.msg, "not a multiple of 32"));
    assert_null(strchr(err.msg, '\n'));
    printf("%s on %s, q8_0 KV: refused as it must be (%s)\n", model_dir, backend, err.msg);
    return true;
}

static int32_t *json_ids(const cJSON *arr, int64_t *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc((size_t)(*n ? *n : 1) * sizeof *ids);
    for (int64_t i = 0; i < *n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(arr, (int)i)->valuedouble;
    return ids;
}

static void greedy_ids(int32_t id, void *user) {
    int32_t **cursor = user;
    *(*cursor)++ = id;
}

/* One case: prompt logits within tolerance, then greedy tokens identical. */
static void check_case(const char *model_dir, const char *backend, const cJSON *c) {
    if (q8_0_refused(model_dir, backend)) return;
    int64_t n_prompt, n_greedy;
    int32_t *prompt = json_ids(cJSON_GetObjectItem(c, "prompt_ids"), &n_prompt);
    int32_t *expect = json_ids(cJSON_GetObjectItem(c, "greedy_ids"), &n_greedy);
    const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
    int64_t vocab = (int64_t)cJSON_GetObjectItem(c, "vocab")->valuedouble;

    char path[1024];
    snprintf(path, sizeof path, "%s/%s", model_dir, cJSON_GetObjectItem(c, "logits_file")->valuestring);
    size_t bytes = 0;
    float *hf = (float *)parity_read_file(path, &bytes);
    assert_non_null(hf);
    assert_int_equal(bytes, (size_t)(n_prompt * vocab) * sizeof(float));

    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = {.backend_name = backend, .ctx = 64, .kv_type = kv_type(),
                            .gpu_layers = parity_env("QVL_PARITY_GPU_LAYERS"),
                            .cpu_backend_name = parity_env("QVL_PARITY_CPU_BACKEND")};
    assert_int_equal(qvl_model_open(model_dir, &mo, &m, &err), QVL_OK);
    assert_int_equal(qvl_model_config(m)->text.vocab_size, vocab);

    float *logits = malloc((size_t)(n_prompt * vocab) * sizeof *logits);
    qvl_gen_config gen;
    qvl_gen_config_defaults(&gen);
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    assert_int_equal(qvl_gen_config_load(path, &gen, &err), QVL_OK);
    gen.n_eos = 0; /* the fixture's greedy path ignores stop tokens */
    qvl_sampling_params sp;
    qvl_sampling_params_default(&sp);
    sp.temperature = 0;
    qvl_sampler *sampler = NULL;
    assert_int_equal(qvl_sampler_create(&sp, (int32_t)vocab, &sampler, &err), QVL_OK);
    int32_t *got = calloc((size_t)n_greedy, sizeof *got);
    int32_t *cursor = got;
    qvl_generation g = {.max_new = n_greedy, .stop = &gen, .sampler = sampler,
                        .on_token = greedy_ids, .user = &cursor, .prompt_logits = logits};
    qvl_generation_result res;
    qvl_status st = qvl_generate(m, prompt, n_prompt, &g, &res, &err);
    if (st != QVL_OK) fail_msg("%s/%s on %s: %s", model_dir, name, backend, err.msg);
    assert_int_equal(res.n_generated, n_greedy);

    double max_ref = 0, max_err = 0;
    for (int64_t i = 0; i < n_prompt * vocab; i++) max_ref = fmax(max_ref, fabs(hf[i]));
    for (int64_t i = 0; i < n_prompt * vocab; i++) max_err = fmax(max_err, fabs(hf[i] - logits[i]));
    const double rtol = kv_is_f32() ? LOGIT_RTOL : kv_is_q8_0() ? LOGIT_RTOL_KV_Q8_0 : LOGIT_RTOL_KV_F16;
    printf("%s %s on %s, %s KV: max |logit| %.3f, max abs error %.3g = %.3g x max|logit| "
           "(allowed %.3g)\n", model_dir, name, backend, kv_name(), max_ref,
           max_err, max_err / max_ref, rtol * max_ref);
    assert_true(max_err <= rtol * max_ref);
    for (int64_t i = 0; i < n_greedy; i++) {
        if (got[i] != expect[i])
            fail_msg("%s %s on %s: greedy token %lld is %d, transformers gave %d", model_dir, name,
                     backend, (long long)i, got[i], expect[i]);
    }
    free(got);
    qvl_sampler_free(sampler);
    free(logits);
    qvl_model_close(m);
    free(hf);
    free(prompt);
    free(expect);
}

static void test_parity(void **state) {
    (void)state;
    int backends_run = 0;
    parity_backends list;
    parity_backends_get(&list);
    for (size_t b = 0; b < list.n; b++) {
        if (!parity_backend_loads(&list, b)) continue;
        backends_run++;
        for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
            char dir[512], path[600];
            snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[i]);
            snprintf(path, sizeof path, "%s/fixture.json", dir);
            char *text = parity_read_file(path, NULL);
            assert_non_null(text);
            cJSON *fx = cJSON_Parse(text);
            assert_non_null(fx);
            const cJSON *c;
            cJSON_ArrayForEach(c, cJSON_GetObjectItem(fx, "cases")) check_case(dir, list.names[b], c);
            cJSON_Delete(fx);
            free(text);
        }
    }
    assert_true(backends_run >= 1);
}

/* The KV cache path must give the same logits as recomputing the whole prefix: single-token
 * steps (one reused decode graph reading the KV length from data, fused or not), a
 * multi-token batch in between, and a rewind (truncate) that the reused graph must follow. On
 * every backend that loads here. */
static void check_incremental(const char *backend, bool no_fuse) {
    char dir[512];
    /* tiny-untied; with a q8_0 cache tiny-tied, the fixture whose heads are whole blocks */
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[kv_is_q8_0() ? 0 : 1]);
    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = {.backend_name = backend, .ctx = 32, .no_fuse = no_fuse,
                            .kv_type = kv_type()};
    assert_int_equal(qvl_model_open(dir, &mo, &m, &err), QVL_OK);
    int64_t vocab = qvl_model_config(m)->text.vocab_size;
    enum { N_IDS = 9 };
    const int32_t ids[N_IDS] = {11, 200, 37, 5, 300, 42, 7, 123, 64};
    /* > 0: evaluate that many next tokens; < 0: rewind that many (qvl_model_truncate) */
    const int plan[] = {2, 1, 1, 3, -1, 1, 1, 1, -9, 1, 1, 7};
    float *full = malloc((size_t)(N_IDS * vocab) * sizeof *full);
    float *step = malloc((size_t)vocab * sizeof *step);
    assert_int_equal(qvl_model_eval(m, ids, N_IDS, NULL, true, full, &err), QVL_OK);
    qvl_model_truncate(m, 0);
    double worst = 0;
    int64_t done = 0;
    for (size_t c = 0; c < sizeof plan / sizeof plan[0]; c++) {
        if (plan[c] < 0) {
            done += plan[c];
            qvl_model_truncate(m, done);
            assert_int_equal(qvl_model_n_past(m), done);
            continue;
        }
        if (qvl_model_eval(m, &ids[done], plan[c], NULL, false, step, &err) != QVL_OK)
            fail_msg("%s: %s", backend, err.msg);
        done += plan[c];
        const float *want = full + (done - 1) * vocab;
        for (int64_t v = 0; v < vocab; v++) {
            double e = fabs(step[v] - want[v]) / (1 + fabs(want[v]));
            if (e > worst) worst = e;
        }
    }
    assert_int_equal(qvl_model_n_past(m), N_IDS);
    /* Which path ran: the reused graph writes the cache with STORE_ROWS_AT, a per-step graph
     * with STORE_ROWS. */
    qvl_model_set_profiling(m, true);
    qvl_model_profile_reset(m);
    assert_int_equal(qvl_model_eval(m, &ids[0], 1, NULL, false, step, &err), QVL_OK);
    qvl_op_profile prof;
    qvl_model_profile(m, &prof);
    /* The reused graph runs whether the graph is fused (no_fuse, or a backend that declines
     * fused ops) or not: unfused, the primitive chain reads every cache row, which the
     * zero-filled cache keeps finite (ops.h, MASK_CAUSAL_AT), and masks with MASK_CAUSAL_AT. */
    const uint64_t layers = (uint64_t)qvl_model_config(m)->text.num_hidden_layers;
    const bool fused = prof.calls[QVL_OP_ATTENTION] > 0;
    assert_int_equal(prof.calls[QVL_OP_STORE_ROWS_AT], 2 * layers);
    assert_int_equal(prof.calls[QVL_OP_STORE_ROWS], 0);
    assert_int_equal(prof.calls[QVL_OP_MASK_CAUSAL_AT], fused ? 0 : layers);
    qvl_model_step_stats steps;
    qvl_model_get_step_stats(m, &steps);
    assert_true(steps.decode_builds == 1 && steps.decode_reuses > 0);
    const double tol = kv_is_f32() ? 1e-4 : kv_is_q8_0() ? INCREMENTAL_TOL_KV_Q8_0 : INCREMENTAL_TOL_KV_F16;
    printf("incremental vs full on %s%s, %s KV: worst relative difference %.3g (allowed %.3g)\n",
           backend, no_fuse ? " (no fusion)" : "", kv_name(), worst, tol);
    assert_true(worst <= tol);
    free(full);
    free(step);
    qvl_model_close(m);
}

static void test_incremental_equals_full(void **state) {
    (void)state;
    parity_backends list;
    parity_backends_get(&list);
    for (size_t b = 0; b < list.n; b++) {
        if (!parity_backend_loads(&list, b)) continue;
        check_incremental(list.names[b], false);
        check_incremental(list.names[b], true);
    }
}

/* Bad ids and a full context are clear errors, not crashes. */
static void test_eval_errors(void **state) {
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[0]);
    qvl_error err = {0};
    qvl_model *m = NULL;
    qvl_model_options mo = {.backend_name = "reference", .ctx = 4};
    assert_int_equal(qvl_model_open(dir, &mo, &m, &err), QVL_OK);
    int64_t vocab = qvl_model_config(m)->text.vocab_size;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    int32_t bad[2] = {3, (int32_t)vocab};
    assert_int_equal(qvl_model_eval(m, bad, 2, NULL, false, logits, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "vocabulary"));
    int32_t five[5] = {1, 2, 3, 4, 5};
    assert_int_equal(qvl_model_eval(m, five, 5, NULL, false, logits, &err), QVL_E_LIMIT);
    assert_non_null(strstr(err.msg, "--ctx"));
    assert_int_equal(qvl_model_n_past(m), 0);
    free(logits);
    qvl_model_close(m);
}

/* A backend's `weights:` option in plugins.yaml picks the dtype matrices are stored in on it;
 * --weights (weight_dtype) wins; a bad value names the file, the backend and the option. */
static void test_weights_option(void **state) {
    (void)state;
    char dir[512], yaml[600];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURES, models[0]);
    /* one file per process: ctest runs this program several times at once (other backends,
     * KV types), and a shared name would be removed under a concurrent reader */
    snprintf(yaml, sizeof yaml, "%s/test_weights_option.%ld.yaml", QVL_BINARY_DIR,
             (long)getpid());
    const char *values[] = {"f16", "q8_0", "int3"};
    for (size_t i = 0; i < 3; i++) {
        FILE *f = fopen(yaml, "w");
        assert_non_null(f);
        fprintf(f, "backends:\n  - name: reference\n    options: { weights: %s }\n", values[i]);
        fclose(f);
        for (int override = 0; override < 2; override++) {
            qvl_error err = {0};
            qvl_model *m = NULL;
            qvl_model_options mo = {.plugins_path = yaml, .backend_name = "reference", .ctx = 8,
                                    .weight_dtype = override ? "f32" : NULL};
            qvl_status st = qvl_model_open(dir, &mo, &m, &err);
            if (i == 2 && !override) {
                assert_int_equal(st, QVL_E_INVALID);
                assert_non_null(strstr(err.msg, "plugins.yaml: backend reference, option weights"));
                assert_non_null(strstr(err.msg, "int3"));
                continue;
            }
            if (st != QVL_OK) fail_msg("%s: %s", values[i], err.msg);
            qvl_model_load_stats ls;
            qvl_model_get_load_stats(m, &ls);
            const qvl_dtype want = override ? QVL_F32 : i == 0 ? QVL_F16 : QVL_Q8_0;
            assert_int_equal(ls.matrix_dtype, want);
            qvl_model_close(m);
        }
    }
    remove(yaml);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_incremental_equals_full),
        cmocka_unit_test(test_eval_errors),
        cmocka_unit_test(test_weights_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
