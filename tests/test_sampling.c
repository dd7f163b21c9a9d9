/* The sampler: each processor against hand-computed distributions, the fast paths against a
 * plain full-sort implementation written here, and the draw against the softmax. */
#include <setjmp.h>
#include <stdarg.h>
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
    qvl_status st = qvl_sampler_create(p, n_vocab, &s, &err);
    if (st != QVL_OK) fail_msg("qvl_sampler_create: %s", err.msg);
    return s;
}

static int32_t draw(qvl_sampler *s, const float *logits, size_t n) {
    int32_t tok = -1;
    qvl_error err = {0};
    qvl_status st = qvl_sampler_sample(s, logits, n, &tok, &err);
    if (st != QVL_OK) fail_msg("qvl_sampler_sample: %s", err.msg);
    assert_true(tok >= 0 && (size_t)tok < n);
    return tok;
}

static void distribution(qvl_sampler *s, const float *logits, size_t n, float *probs) {
    qvl_error err = {0};
    qvl_status st = qvl_sampler_distribution(s, logits, n, probs, &err);
    if (st != QVL_OK) fail_msg("qvl_sampler_distribution: %s", err.msg);
}

/* A test-local generator (not the sampler's) for random logits. */
static uint64_t test_rng = 0x1234567887654321ull;
static double test_uniform(void) {
    test_rng ^= test_rng << 13;
    test_rng ^= test_rng >> 7;
    test_rng ^= test_rng << 17;
    return (double)(test_rng >> 11) * 0x1.0p-53;
}
static void random_logits(float *l, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) l[i] = (float)((test_uniform() * 2.0 - 1.0) * scale);
}

static size_t argmax(const float *l, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    return best;
}

/* softmax of the given logits restricted to `keep` (NULL: all) */
static void softmax_ref(const double *l, const int *keep, size_t n, double *p) {
    double mx = -INFINITY, z = 0.0;
    for (size_t i = 0; i < n; i++)
        if (!keep || keep[i]) mx = fmax(mx, l[i]);
    for (size_t i = 0; i < n; i++) {
        p[i] = (!keep || keep[i]) ? exp(l[i] - mx) : 0.0;
        z += p[i];
    }
    for (size_t i = 0; i < n; i++) p[i] /= z;
}

static void expect_probs(const float *got, const double *want, size_t n, double tol) {
    for (size_t i = 0; i < n; i++)
        if (fabs((double)got[i] - want[i]) > tol)
            fail_msg("token %zu: probability %.9g, expected %.9g", i, (double)got[i], want[i]);
}

static void test_greedy(void **state) {
    (void)state;
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.temperature = 0.0f;
    qvl_sampler *s = make(&p, 10);
    float l[10] = {0.1f, -3.0f, 2.0f, 0.5f, 1.0f, -INFINITY, 7.5f, 7.25f, 0.0f, 1.0f};
    assert_int_equal(draw(s, l, 10), 6);
    /* ties go to the lowest id, as torch.argmax */
    float t[10] = {1, 2, 5, 0, 5, 5, -1, 0, 0, 0};
    assert_int_equal(draw(s, t, 10), 2);
    float probs[10];
    distribution(s, t, 10, probs);
    for (int i = 0; i < 10; i++) assert_true(probs[i] == (i == 2 ? 1.0f : 0.0f));
    qvl_sampler_free(s);

    p.temperature = -1.0f; /* any non-positive temperature is greedy */
    s = make(&p, 10);
    assert_int_equal(draw(s, l, 10), 6);
    qvl_sampler_free(s);
}

/* A vanishing temperature and top_k = 1 both reduce sampling to the argmax. */
static void test_degenerate_sampling_is_greedy(void **state) {
    (void)state;
    enum { N = 1000 };
    float l[N];
    qvl_sampling_params cold, k1;
    qvl_sampling_params_default(&cold);
    cold.temperature = 1e-6f;
    cold.seed = 7;
    qvl_sampling_params_default(&k1);
    k1.top_k = 1;
    k1.seed = 8;
    qvl_sampler *a = make(&cold, N), *b = make(&k1, N);
    for (int row = 0; row < 200; row++) {
        random_logits(l, N, 4.0);
        size_t best = argmax(l, N);
        assert_int_equal(draw(a, l, N), best);
        assert_int_equal(draw(b, l, N), best);
    }
    qvl_sampler_free(a);
    qvl_sampler_free(b);
}

static void test_top_p(void **state) {
    (void)state;
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = (float)log(pr[i]);
    float probs[4];
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);

    /* mass before each token: 0, 0.5, 0.8, 0.95 -> top_p 0.75 keeps two, 0.85 three */
    p.top_p = 0.75f;
    qvl_sampler *s = make(&p, 4);
    distribution(s, l, 4, probs);
    expect_probs(probs, (double[]){0.5 / 0.8, 0.3 / 0.8, 0, 0}, 4, 1e-6);
    qvl_sampler_free(s);
    p.top_p = 0.85f;
    s = make(&p, 4);
    distribution(s, l, 4, probs);
    expect_probs(probs, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 4, 1e-6);
    qvl_sampler_free(s);

    /* a tiny top_p keeps only the most probable token */
    p.top_p = 1e-6f;
    p.seed = 3;
    s = make(&p, 4);
    for (int i = 0; i < 500; i++) assert_int_equal(draw(s, l, 4), 0);
    qvl_sampler_free(s);
}

static void test_min_p(void **state) {
    (void)state;
    const double pr[4] = {0.5, 0.3, 0.15, 0.05};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = (float)log(pr[i]);
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.min_p = 0.2f; /* threshold 0.2 * 0.5 = 0.1: drops only 0.05 */
    p.seed = 11;
    qvl_sampler *s = make(&p, 4);
    float probs[4];
    distribution(s, l, 4, probs);
    expect_probs(probs, (double[]){0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 4, 1e-6);
    int seen[4] = {0};
    for (int i = 0; i < 2000; i++) seen[draw(s, l, 4)]++;
    assert_int_equal(seen[3], 0);
    assert_true(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    qvl_sampler_free(s);
}

/* HF's top-k keeps every token tied with the k-th largest logit. */
static void test_top_k_ties(void **state) {
    (void)state;
    float l[5] = {0.0f, 2.0f, 1.0f, 1.0f, -1.0f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.top_k = 2;
    qvl_sampler *s = make(&p, 5);
    float probs[5];
    distribution(s, l, 5, probs);
    double z = exp(2.0) + 2 * exp(1.0);
    expect_probs(probs, (double[]){0, exp(2.0) / z, exp(1.0) / z, exp(1.0) / z, 0}, 5, 1e-6);
    qvl_sampler_free(s);
}

/* Hand-computed HF repetition penalty: seen tokens with logit > 0 are divided, others
 * multiplied, and that moves the argmax. */
static void test_repetition_penalty(void **state) {
    (void)state;
    float l[4] = {2.0f, 1.5f, -1.0f, -1.2f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.temperature = 0.0f;
    p.repetition_penalty = 2.0f;
    qvl_sampler *s = make(&p, 4);
    qvl_error err = {0};
    assert_int_equal(draw(s, l, 4), 0); /* no history yet */
    int32_t prompt[3] = {0, 2, 0};
    assert_int_equal(qvl_sampler_accept_prompt(s, prompt, 3, &err), QVL_OK);
    assert_int_equal(draw(s, l, 4), 1); /* 2.0 / 2 = 1.0 < 1.5 */
    qvl_sampler_free(s);

    /* penalised logits {1.0, 1.5, -2.0, -1.2}: -1.0 * 2 now ranks below -1.2 */
    p.temperature = 1.0f;
    s = make(&p, 4);
    assert_int_equal(qvl_sampler_accept_prompt(s, prompt, 3, &err), QVL_OK);
    float probs[4];
    distribution(s, l, 4, probs);
    double want[4];
    softmax_ref((double[]){1.0, 1.5, -2.0, -1.2}, NULL, 4, want);
    expect_probs(probs, want, 4, 1e-6);
    assert_true(probs[3] > probs[2]);

    /* forgetting the history removes the penalty */
    qvl_sampler_clear_history(s);
    distribution(s, l, 4, probs);
    softmax_ref((double[]){2.0, 1.5, -1.0, -1.2}, NULL, 4, want);
    expect_probs(probs, want, 4, 1e-6);
    qvl_sampler_free(s);
}

/* The presence penalty hits generated tokens once each and leaves prompt tokens alone. */
static void test_presence_penalty(void **state) {
    (void)state;
    float l[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.presence_penalty = 0.5f;
    qvl_sampler *s = make(&p, 4);
    qvl_error err = {0};
    int32_t prompt[1] = {0};
    assert_int_equal(qvl_sampler_accept_prompt(s, prompt, 1, &err), QVL_OK);
    assert_int_equal(qvl_sampler_accept_generated(s, 1, &err), QVL_OK);
    assert_int_equal(qvl_sampler_accept_generated(s, 1, &err), QVL_OK);
    assert_int_equal(qvl_sampler_accept_generated(s, 3, &err), QVL_OK);
    float probs[4];
    distribution(s, l, 4, probs);
    double want[4];
    softmax_ref((double[]){1.0, 0.5, 1.0, 0.5}, NULL, 4, want);
    expect_probs(probs, want, 4, 1e-6);
    qvl_sampler_free(s);
}

/* Log-probabilities: penalties and temperature applied, masked and invalid ids -inf, no top-k /
 * top-p cut; a temperature of 0 scores as 1. */
static void test_logprobs(void **state) {
    (void)state;
    const float l[5] = {2.0f, 1.0f, -INFINITY, 0.5f, 3.0f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.temperature = 0.5f;
    p.top_k = 1; /* no effect on log-probabilities */
    p.presence_penalty = 1.0f;
    p.n_valid = 4; /* id 4 is padding */
    qvl_sampler *s = make(&p, 5);
    qvl_error err = {0};
    assert_int_equal(qvl_sampler_accept_generated(s, 0, &err), QVL_OK);
    float lp[5];
    assert_int_equal(qvl_sampler_logprobs(s, l, 5, lp, &err), QVL_OK);
    const double w[3] = {(2.0 - 1.0) / 0.5, 1.0 / 0.5, 0.5 / 0.5}; /* ids 0, 1, 3 */
    const double z = log(exp(w[0]) + exp(w[1]) + exp(w[2]));
    assert_true(fabs(lp[0] - (w[0] - z)) < 1e-5);
    assert_true(fabs(lp[1] - (w[1] - z)) < 1e-5);
    assert_true(fabs(lp[3] - (w[2] - z)) < 1e-5);
    assert_true(isinf(lp[2]) && lp[2] < 0);
    assert_true(isinf(lp[4]) && lp[4] < 0);
    qvl_sampler_free(s);
    p.temperature = 0.0f; /* greedy: the distribution at temperature 1 */
    p.presence_penalty = 0.0f;
    s = make(&p, 5);
    assert_int_equal(qvl_sampler_logprobs(s, l, 5, lp, &err), QVL_OK);
    const double z1 = log(exp(2.0) + exp(1.0) + exp(0.5));
    assert_true(fabs(lp[0] - (2.0 - z1)) < 1e-5);
    const float masked[5] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, 1.0f};
    assert_int_equal(qvl_sampler_logprobs(s, masked, 5, lp, &err), QVL_E_INVALID);
    qvl_sampler_free(s);
}

/* Ids >= n_valid are never chosen, even when they score best. */
static void test_n_valid(void **state) {
    (void)state;
    float l[6] = {0.0f, 1.0f, 0.5f, 0.2f, 9.0f, 8.0f};
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.n_valid = 4;
    p.temperature = 0.0f;
    qvl_sampler *s = make(&p, 6);
    assert_int_equal(draw(s, l, 6), 1);
    qvl_sampler_free(s);
    p.temperature = 1.0f;
    p.seed = 5;
    s = make(&p, 6);
    for (int i = 0; i < 1000; i++) assert_true(draw(s, l, 6) < 4);
    float probs[6];
    distribution(s, l, 6, probs);
    assert_true(probs[4] == 0.0f && probs[5] == 0.0f);
    qvl_sampler_free(s);
}

static void test_seeds(void **state) {
    (void)state;
    enum { N = 100, STEPS = 64 };
    float l[N];
    random_logits(l, N, 0.5); /* close to flat: many tokens likely */
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.seed = 42;
    qvl_sampler *a = make(&p, N), *b = make(&p, N);
    p.seed = 43;
    qvl_sampler *c = make(&p, N);
    int32_t sa[STEPS], sb[STEPS], sc[STEPS];
    for (int i = 0; i < STEPS; i++) {
        sa[i] = draw(a, l, N);
        sb[i] = draw(b, l, N);
        sc[i] = draw(c, l, N);
    }
    assert_memory_equal(sa, sb, sizeof sa);
    int differ = 0;
    for (int i = 0; i < STEPS; i++) differ += sa[i] != sc[i];
    assert_true(differ > STEPS / 2);
    /* restarting the stream replays it */
    qvl_sampler_set_seed(a, 42);
    for (int i = 0; i < STEPS; i++) assert_int_equal(draw(a, l, N), sa[i]);
    qvl_sampler_free(a);
    qvl_sampler_free(b);
    qvl_sampler_free(c);
}

/* Draw counts at temperature 1 follow the softmax: Pearson chi-square with 7 degrees of
 * freedom. The seed is fixed, so the result is deterministic; 40 is beyond the 1e-6 tail. */
static void test_draws_follow_softmax(void **state) {
    (void)state;
    enum { N = 8, DRAWS = 200000 };
    const double ld[N] = {0.3, -1.0, 1.2, 0.0, -0.5, 2.0, 0.9, -2.0};
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)ld[i];
    double want[N];
    softmax_ref(ld, NULL, N, want);
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.seed = 20240601;
    qvl_sampler *s = make(&p, N);
    long count[N] = {0};
    for (int i = 0; i < DRAWS; i++) count[draw(s, l, N)]++;
    double chi2 = 0.0;
    for (int i = 0; i < N; i++) {
        double e = want[i] * DRAWS;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    if (!(chi2 < 40.0)) fail_msg("chi-square %.2f with 7 degrees of freedom", chi2);
    qvl_sampler_free(s);
}

/* ---- the fast paths against a plain implementation that sorts everything ---------------- */

static const double *ref_logits; /* for the qsort comparator */
static int ref_cmp(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (ref_logits[i] != ref_logits[j]) return ref_logits[i] > ref_logits[j] ? -1 : 1;
    return i < j ? -1 : 1;
}

/* temperature > 0 only; follows the HF warpers step by step */
static void reference_distribution(const float *logits, size_t n, const qvl_sampling_params *p,
                                   double *out) {
    double *l = malloc(n * sizeof *l);
    int *keep = malloc(n * sizeof *keep);
    int32_t *order = malloc(n * sizeof *order);
    double *prob = malloc(n * sizeof *prob);
    assert_true(l && keep && order && prob);
    for (size_t i = 0; i < n; i++) {
        l[i] = (double)logits[i] / p->temperature;
        keep[i] = 1;
        order[i] = (int32_t)i;
    }
    ref_logits = l;
    qsort(order, n, sizeof *order, ref_cmp);
    if (p->top_k > 0 && (size_t)p->top_k < n) {
        double kth = l[order[p->top_k - 1]];
        for (size_t i = 0; i < n; i++)
            if (l[i] < kth) keep[i] = 0;
    }
    if (p->top_p < 1.0f) {
        softmax_ref(l, keep, n, prob);
        double before = 0.0;
        size_t kept = 0;
        for (size_t r = 0; r < n; r++) {
            int32_t id = order[r];
            if (!keep[id]) continue;
            if (kept > 0 && before >= p->top_p) keep[id] = 0;
            else kept++;
            before += prob[id];
        }
    }
    if (p->min_p > 0.0f) {
        softmax_ref(l, keep, n, prob);
        double top = prob[order[0]];
        for (size_t i = 0; i < n; i++)
            if (prob[i] < p->min_p * top) keep[i] = 0;
    }
    softmax_ref(l, keep, n, out);
    free(l);
    free(keep);
    free(order);
    free(prob);
}

/* A Qwen-sized vocabulary, so quickselect and the growing top-p prefix are exercised. */
static void test_large_vocab_matches_full_sort(void **state) {
    (void)state;
    const int32_t n = 151936;
    float *l = malloc((size_t)n * sizeof *l);
    float *got = malloc((size_t)n * sizeof *got);
    double *want = malloc((size_t)n * sizeof *want);
    assert_true(l && got && want);
    const struct {
        float temperature, top_p, min_p;
        int32_t top_k;
        double scale, step; /* step > 0: logits rounded to multiples of it, to make ties */
    } cases[] = {
        {0.7f, 0.8f, 0.0f, 20, 6.0, 0},      /* the model's defaults */
        {1.0f, 0.95f, 0.0f, 0, 6.0, 0},      /* top-p alone, peaked */
        {2.0f, 0.999f, 0.0f, 0, 1.0, 0},     /* top-p alone, needs most of the vocabulary */
        {1.0f, 1.0f, 0.05f, 0, 6.0, 0},      /* min-p alone */
        {0.8f, 0.9f, 0.1f, 1000, 4.0, 0},    /* all three */
        {1.0f, 1.0f, 0.0f, 5000, 3.0, 0},    /* large k */
        {1.0f, 1.0f, 0.0f, 20, 8.0, 0.5},    /* small k, ties at the k-th */
        {1.0f, 1.0f, 0.0f, 1000, 8.0, 0.25}, /* large k, ties at the k-th */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        random_logits(l, (size_t)n, cases[c].scale);
        if (cases[c].step > 0)
            for (int32_t i = 0; i < n; i++) l[i] = (float)(round(l[i] / cases[c].step) * cases[c].step);
        qvl_sampling_params p;
        qvl_sampling_params_default(&p);
        p.temperature = cases[c].temperature;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.top_k = cases[c].top_k;
        p.seed = c;
        qvl_sampler *s = make(&p, n);
        distribution(s, l, (size_t)n, got);
        reference_distribution(l, (size_t)n, &p, want);
        size_t support = 0;
        for (int32_t i = 0; i < n; i++) support += want[i] > 0.0;
        for (int32_t i = 0; i < n; i++) {
            if ((want[i] > 0.0) != (got[i] > 0.0f))
                fail_msg("case %zu: token %d kept by %s only (support %zu)", c, i,
                         want[i] > 0.0 ? "the reference" : "the sampler", support);
            if (fabs((double)got[i] - want[i]) > 1e-6)
                fail_msg("case %zu: token %d probability %.9g, reference %.9g", c, i, (double)got[i], want[i]);
        }
        for (int i = 0; i < 10; i++) {
            int32_t t = draw(s, l, (size_t)n);
            assert_true(want[t] > 0.0);
        }
        qvl_sampler_free(s);
    }
    free(l);
    free(got);
    free(want);
}

/* Greedy finds the lowest id of the best logit wherever the scan keeps it: in a lane that
 * rose to it late, in several lanes at once, in the tail past the last whole group of 16, or
 * nowhere above -inf but one entry. */
static void test_greedy_where_the_best_lies(void **state) {
    (void)state;
    const int32_t n = 16 * 5 + 3; /* a tail of 3 */
    float l[16 * 5 + 3];
    const struct {
        int32_t at[3]; /* the best value's positions (-1: unused) */
        float rest;    /* every other entry */
        int32_t want;
    } cases[] = {
        {{37, 21, 70}, 0.0f, 21},        /* lanes 5, 5 and 6: the earliest */
        {{81, 64, -1}, -1.0f, 64},       /* the tail ties the body: the body's */
        {{82, -1, -1}, -1.0f, 82},       /* only in the tail */
        {{3, 19, 35}, -1.0f, 3},         /* one lane, three times */
        {{50, -1, -1}, -INFINITY, 50},   /* the only finite one */
        {{-1, -1, -1}, -INFINITY, -2},   /* none: every token masked, an error */
    };
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);
    p.temperature = 0.0f;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int32_t i = 0; i < n; i++) l[i] = cases[c].rest;
        for (int k = 0; k < 3; k++)
            if (cases[c].at[k] >= 0) l[cases[c].at[k]] = 2.5f;
        qvl_sampler *s = make(&p, n);
        if (cases[c].want >= 0) {
            assert_int_equal(draw(s, l, (size_t)n), cases[c].want);
        } else {
            int32_t tok = -1;
            qvl_error err = {0};
            assert_int_equal(qvl_sampler_sample(s, l, (size_t)n, &tok, &err), QVL_E_INVALID);
        }
        qvl_sampler_free(s);
    }
}

/* Greedy over a full-size row equals a scalar argmax (ties to the lowest id) of the penalised
 * valid logits, with ties, signed zeros, -inf entries and odd lengths (the vectorised scan's
 * tail) in the rows. */
static void test_greedy_large_vocab(void **state) {
    (void)state;
    const int32_t n = 151936;
    float *l = malloc((size_t)n * sizeof *l);
    float *pen = malloc((size_t)n * sizeof *pen);
    unsigned char *seen = malloc((size_t)n), *gen = malloc((size_t)n);
    assert_true(l && pen && seen && gen);
    const struct {
        int32_t n_valid;
        float rp, pp;
        double step; /* logits rounded to multiples of it: many ties at the top */
        int zeros;   /* every logit > 0 becomes -0.0 or +0.0 by id parity: the best are zeros of
                      * both signs, which compare equal */
    } cases[] = {
        {0, 1.0f, 0.0f, 0, 0},       {0, 1.0f, 0.0f, 0.5, 0},     {151655, 1.0f, 0.0f, 0.25, 0},
        {151643, 1.3f, 0.0f, 0.5, 0}, {0, 1.0f, 0.7f, 0.5, 0},     {151937 - 7, 1.1f, 0.2f, 0, 0},
        {0, 1.0f, 0.0f, 0, 1},       {13, 1.0f, 0.0f, 0.5, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int32_t nv = cases[c].n_valid > 0 && cases[c].n_valid <= n ? cases[c].n_valid : n;
        random_logits(l, (size_t)n, 4.0);
        if (cases[c].step > 0)
            for (int32_t i = 0; i < n; i++) l[i] = (float)(round(l[i] / cases[c].step) * cases[c].step);
        for (int32_t i = 0; i < n; i += 97) l[i] = -INFINITY;
        if (cases[c].zeros)
            for (int32_t i = 0; i < n; i++)
                if (l[i] > 0.0f) l[i] = i % 2 ? -0.0f : 0.0f;
        qvl_sampling_params p;
        qvl_sampling_params_default(&p);
        p.temperature = 0.0f;
        p.n_valid = cases[c].n_valid;
        p.repetition_penalty = cases[c].rp;
        p.presence_penalty = cases[c].pp;
        qvl_sampler *s = make(&p, n);
        /* history: the current best few ids (so the penalties change the answer) and others */
        int32_t hist[64];
        size_t nh = 0;
        for (int32_t i = 0; i < nv && nh < 32; i++)
            if (l[i] >= 3.0f) hist[nh++] = i;
        for (size_t k = 0; k < 32; k++) hist[nh++] = (int32_t)(test_uniform() * nv);
        qvl_error err = {0};
        assert_int_equal(qvl_sampler_accept_prompt(s, hist, nh / 2, &err), QVL_OK);
        for (size_t k = nh / 2; k < nh; k++)
            assert_int_equal(qvl_sampler_accept_generated(s, hist[k], &err), QVL_OK);
        memcpy(pen, l, (size_t)n * sizeof *pen);
        memset(seen, 0, (size_t)n);
        memset(gen, 0, (size_t)n);
        for (size_t k = 0; k < nh; k++) {
            seen[hist[k]] = 1;
            if (k >= nh / 2) gen[hist[k]] = 1;
        }
        for (int32_t i = 0; i < nv; i++) {
            if (seen[i] && p.repetition_penalty != 1.0f)
                pen[i] = pen[i] > 0.0f ? pen[i] / p.repetition_penalty : pen[i] * p.repetition_penalty;
            if (gen[i] && p.presence_penalty != 0.0f) pen[i] -= p.presence_penalty;
        }
        const int32_t want = (int32_t)argmax(pen, (size_t)nv);
        const int32_t got = draw(s, l, (size_t)n);
        if (got != want)
            fail_msg("case %zu: greedy picked %d (%g), the reference %d (%g)", c, got, (double)pen[got],
                     want, (double)pen[want]);
        qvl_sampler_free(s);
    }
    /* A NaN or +inf anywhere (inside the scan's vector part or its tail), greedy or not, is
     * an error naming the token; -inf is not. */
    const int32_t at[] = {0, 17, 75000, n - 17, n - 1};
    const float badv[] = {NAN, -NAN, INFINITY};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
        for (size_t b = 0; b < sizeof badv / sizeof badv[0]; b++) {
            for (int greedy = 0; greedy < 2; greedy++) {
                random_logits(l, (size_t)n, 4.0);
                l[at[a]] = badv[b];
                qvl_sampling_params p;
                qvl_sampling_params_default(&p);
                p.temperature = greedy ? 0.0f : 1.0f;
                qvl_sampler *s = make(&p, n);
                qvl_error err = {0};
                int32_t tok;
                char want[64];
                snprintf(want, sizeof want, "token %d is", at[a]);
                if (qvl_sampler_sample(s, l, (size_t)n, &tok, &err) != QVL_E_INVALID ||
                    !strstr(err.msg, want))
                    fail_msg("logit %g at %d: not refused (%s)", (double)badv[b], at[a], err.msg);
                l[at[a]] = -INFINITY;
                assert_int_equal(qvl_sampler_sample(s, l, (size_t)n, &tok, &err), QVL_OK);
                qvl_sampler_free(s);
            }
        }
    }
    free(l);
    free(pen);
    free(seen);
    free(gen);
}

static void test_errors(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_sampler *s = NULL;
    qvl_sampling_params p;
    qvl_sampling_params_default(&p);

    qvl_sampling_params bad = p;
    bad.top_p = 1.5f;
    assert_int_equal(qvl_sampler_create(&bad, 10, &s, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "top_p"));
    bad = p;
    bad.repetition_penalty = 0.0f;
    assert_int_equal(qvl_sampler_create(&bad, 10, &s, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "repetition_penalty"));
    bad = p;
    bad.min_p = -0.1f;
    assert_int_equal(qvl_sampler_create(&bad, 10, &s, &err), QVL_E_INVALID);
    bad = p;
    bad.temperature = NAN;
    assert_int_equal(qvl_sampler_create(&bad, 10, &s, &err), QVL_E_INVALID);
    bad = p;
    bad.n_valid = 11;
    assert_int_equal(qvl_sampler_create(&bad, 10, &s, &err), QVL_E_INVALID);
    assert_int_equal(qvl_sampler_create(&p, 0, &s, &err), QVL_E_INVALID);
    assert_null(s);

    s = make(&p, 4);
    int32_t tok = -1;
    float nan_row[4] = {0.0f, NAN, 1.0f, 2.0f};
    assert_int_equal(qvl_sampler_sample(s, nan_row, 4, &tok, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "NaN"));
    float masked[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    assert_int_equal(qvl_sampler_sample(s, masked, 4, &tok, &err), QVL_E_INVALID);
    float ok[4] = {0.0f, 1.0f, 2.0f, 3.0f};
    assert_int_equal(qvl_sampler_sample(s, ok, 3, &tok, &err), QVL_E_SHAPE);
    assert_int_equal(qvl_sampler_accept_generated(s, 4, &err), QVL_E_INVALID);
    assert_int_equal(qvl_sampler_accept_generated(s, -1, &err), QVL_E_INVALID);
    int32_t prompt[2] = {1, 99};
    assert_int_equal(qvl_sampler_accept_prompt(s, prompt, 2, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "99"));
    /* a row with a single finite logit always gives that token */
    float one[4] = {-INFINITY, -INFINITY, 0.5f, -INFINITY};
    for (int i = 0; i < 20; i++) assert_int_equal(draw(s, one, 4), 2);
    qvl_sampler_free(s);
    qvl_sampler_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_degenerate_sampling_is_greedy),
        cmocka_unit_test(test_top_p),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_top_k_ties),
        cmocka_unit_test(test_repetition_penalty),
        cmocka_unit_test(test_presence_penalty),
        cmocka_unit_test(test_n_valid),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_draws_follow_softmax),
        cmocka_unit_test(test_large_vocab_matches_full_sort),
        cmocka_unit_test(test_greedy_where_the_best_lies),
        cmocka_unit_test(test_greedy_large_vocab),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
