/* The sampler's frequency penalty and its penalty window (llama.cpp's --repeat-last-n): the
 * hand-computed cases, then random histories against a reference that recounts the window's
 * tokens from scratch for every row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#include "qvl/sampling.h"

static qvl_sampler *make(const qvl_sampling_params *p, int32_t n_vocab) {
    qvl_sampler *s = NULL;
    qvl_error err = {0};
    if (qvl_sampler_create(p, n_vocab, &s, &err) != QVL_OK) fail_msg("qvl_sampler_create: %s", err.msg);
    return s;
}

/* The processed row as log-probabilities, back to logits relative to `ref` (the untouched
 * id's): lp[i] - lp[ref] + logit[ref] is the penalised logit i at temperature 1. */
static void penalised(qvl_sampler *s, const float *l, size_t n, size_t ref, double *out) {
    float lp[64];
    qvl_error err = {0};
    assert_true(n <= 64);
    if (qvl_sampler_logprobs(s, l, n, lp, &err) != QVL_OK) fail_msg("logprobs: %s", err.msg);
    for (size_t i = 0; i < n; i++) out[i] = (double)lp[i] - (double)lp[ref] + (double)l[ref];
}

static void expect_row(const double *got, const double *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabs(got[i] - want[i]) > 1e-5)
            fail_msg("token %zu: penalised logit %.7g, expected %.7g", i, got[i], want[i]);
}

/* frequency x times generated, plus presence once; prompt tokens are not counted. */
static void test_frequency_penalty(void **state) {
    (void)state;
    const float l[5] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    qvl_sampler *s = make(&p, 5);
    qvl_error err = {0};
    const int32_t prompt[3] = {0, 0, 1};
    assert_int_equal(qvl_sampler_accept_prompt(s, prompt, 3, &err), QVL_OK);
    const int32_t gen[4] = {1, 1, 1, 3};
    for (int i = 0; i < 4; i++) assert_int_equal(qvl_sampler_accept_generated(s, gen[i], &err), QVL_OK);
    double got[5];
    penalised(s, l, 5, 4, got);
    expect_row(got, (double[]){1.0, 1.0 - 0.25 - 3 * 0.5, 1.0, 1.0 - 0.25 - 0.5, 1.0}, 5);
    qvl_sampler_clear_history(s);
    penalised(s, l, 5, 4, got);
    expect_row(got, (double[]){1, 1, 1, 1, 1}, 5);
    qvl_sampler_free(s);
}

/* Only the last penalty_window tokens count, for every penalty: a prompt token that left the
 * window is no longer repetition-penalised, and a generated one no longer counted. */
static void test_window(void **state) {
    (void)state;
    const float l[5] = {2.0f, 2.0f, 2.0f, 2.0f, 2.0f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.repetition_penalty = 2.0f;
    p.frequency_penalty = 1.0f;
    p.penalty_window = 3;
    qvl_sampler *s = make(&p, 5);
    qvl_error err = {0};
    const int32_t prompt[2] = {3, 0};
    assert_int_equal(qvl_sampler_accept_prompt(s, prompt, 2, &err), QVL_OK);
    double got[5];
    penalised(s, l, 5, 4, got); /* window {3, 0} */
    expect_row(got, (double[]){1.0, 2.0, 2.0, 1.0, 2.0}, 5);
    const int32_t gen[4] = {1, 2, 2, 1}; /* the window ends as {2, 2, 1}, all generated */
    for (int i = 0; i < 4; i++) assert_int_equal(qvl_sampler_accept_generated(s, gen[i], &err), QVL_OK);
    penalised(s, l, 5, 4, got);
    expect_row(got, (double[]){2.0, 2.0 / 2 - 1, 2.0 / 2 - 2, 2.0, 2.0}, 5);
    qvl_sampler_free(s);

    p.penalty_window = -1;
    qvl_sampler *bad = NULL;
    assert_int_equal(qvl_sampler_create(&p, 5, &bad, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "penalty_window"));
    assert_null(bad);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}

/* Random histories (ids entering, leaving and coming back) over windows of several sizes:
 * each row against the penalties recounted from the history's last `window` entries. */
static void test_window_matches_recount(void **state) {
    (void)state;
    enum { V = 12, STEPS = 400 };
    const int32_t windows[] = {0, 1, 2, 5, 16};
    for (size_t wi = 0; wi < sizeof windows / sizeof windows[0]; wi++) {
        qvl_sampling_params p;
        qvl_sampling_params_default(&p);
        p.repetition_penalty = 1.5f;
        p.presence_penalty = 0.3f;
        p.frequency_penalty = 0.2f;
        p.penalty_window = windows[wi];
        qvl_sampler *s = make(&p, V);
        int32_t hist[STEPS];
        bool hist_gen[STEPS];
        float l[V];
        for (int i = 0; i < V; i++) l[i] = (float)(i % 5) - 1.5f; /* both signs */
        qvl_error err = {0};
        for (int t = 0; t < STEPS; t++) {
            if (t == STEPS / 2) qvl_sampler_clear_history(s); /* a new generation */
            const int32_t id = (int32_t)(next_u32() % (V - 1)); /* id V-1: never seen, the ref */
            const bool g = t % 7 != 0 && next_u32() % 4 != 0;
            hist[t] = id;
            hist_gen[t] = g;
            assert_int_equal(g ? qvl_sampler_accept_generated(s, id, &err)
                               : qvl_sampler_accept_prompt(s, &id, 1, &err), QVL_OK);
            const int from0 = t >= STEPS / 2 ? STEPS / 2 : 0;
            const int from = p.penalty_window > 0 && t + 1 - p.penalty_window > from0
                                 ? t + 1 - p.penalty_window : from0;
            int count[V] = {0}, count_gen[V] = {0};
            for (int k = from; k <= t; k++) {
                count[hist[k]]++;
                count_gen[hist[k]] += hist_gen[k];
            }
            double want[V], got[V];
            for (int i = 0; i < V; i++) {
                double w = l[i];
                if (count[i]) w = w > 0 ? w / 1.5 : w * 1.5;
                if (count_gen[i]) w -= 0.3 + 0.2 * count_gen[i];
                want[i] = w;
            }
            penalised(s, l, V, V - 1, got);
            for (int i = 0; i < V; i++)
                if (fabs(got[i] - want[i]) > 1e-4)
                    fail_msg("window %d, step %d, token %d: %.7g, recounted %.7g", p.penalty_window,
                             t, i, got[i], want[i]);
        }
        qvl_sampler_free(s);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frequency_penalty),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_window_matches_recount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
