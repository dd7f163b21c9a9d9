/* Batched prefill (qvl_model_prefill_batch) on every parity backend: the prompts of several
 * sequences in one graph give each sequence the last-token logits and the cache it gets
 * prefilling alone: a decode step after it matches too. Sequences may already hold a prefix
 * (the prompt continues it), have caches of their own or slots of the KV pool, and the
 * cache may be f32 or q8_0 (its attention is then the ATTENTION node). Bad batches are one
 * clear error and leave every sequence as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parity_backends.h"
#include "qvl/qwen3vl_model.h"
#include "test_logits.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define N_SEQS 3
#define CTX 32
/* Batched rows and a single prompt's rows may take matrix kernels of other shapes (f32 sums in
 * another order), so logits may differ by rounding, as in test_decode_batch. */
#define LOGIT_RTOL 1e-4

/* Sequence s first holds cached[s] tokens of its own (prefilled alone), then its prompt of
 * len[s] tokens goes through the batch. */
static const int32_t tokens[N_SEQS][12] = {{1, 2, 3, 4, 5, 6, 7, 8, 9},
                                           {7, 7, 9, 11, 13, 2, 40, 41, 42, 43, 44, 45},
                                           {30, 2, 5}};
static const int64_t cached[N_SEQS] = {0, 5, 0};
static const int64_t len[N_SEQS] = {9, 7, 3};

static qvl_model *open_model(const char *backend, const char *kv, int kv_slots) {
    qvl_model_options mo = {.backend_name = backend, .ctx = CTX, .kv_type = kv,
                            .kv_slots = kv_slots};
    qvl_model *m = NULL;
    qvl_error err = {0};
    if (qvl_model_open(FIXTURE, &mo, &m, &err) != QVL_OK) fail_msg("%s: %s", backend, err.msg);
    return m;
}

/* Each sequence alone: its whole prompt (prefix and rest in two evals), then one step with its
 * greedy token: logits after the prompt into first, after the step into next. */
static void alone(const char *backend, const char *kv, float *first, float *next, int64_t vocab) {
    qvl_model *m = open_model(backend, kv, 0);
    qvl_error err = {0};
    for (int s = 0; s < N_SEQS; s++) {
        qvl_model_truncate(m, 0);
        float *row = first + (size_t)s * vocab;
        if (cached[s] > 0)
            assert_int_equal(qvl_model_eval(m, tokens[s], cached[s], NULL, false, row, &err), QVL_OK);
        assert_int_equal(qvl_model_eval(m, tokens[s] + cached[s], len[s], NULL, false, row, &err),
                         QVL_OK);
        int32_t id = test_argmax(row, vocab);
        assert_int_equal(qvl_model_eval(m, &id, 1, NULL, false, next + (size_t)s * vocab, &err),
                         QVL_OK);
    }
    qvl_model_close(m);
}

static void check(const char *backend, const char *kv, int kv_slots) {
    qvl_model *probe = open_model(backend, kv, 0);
    const int64_t vocab = qvl_model_config(probe)->text.vocab_size;
    qvl_model_close(probe);
    float *want_first = malloc((size_t)N_SEQS * vocab * sizeof(float));
    float *want_next = malloc((size_t)N_SEQS * vocab * sizeof(float));
    float *logits = malloc((size_t)N_SEQS * vocab * sizeof(float));
    float *scratch = malloc((size_t)vocab * sizeof(float));
    alone(backend, kv, want_first, want_next, vocab);

    qvl_model *m = open_model(backend, kv, kv_slots);
    qvl_error err = {0};
    qvl_seq *seqs[N_SEQS];
    const int32_t *ids[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        assert_int_equal(qvl_seq_create(m, &seqs[s], &err), QVL_OK);
        qvl_model_set_seq(m, seqs[s]);
        if (cached[s] > 0)
            assert_int_equal(qvl_model_eval(m, tokens[s], cached[s], NULL, false, scratch, &err),
                             QVL_OK);
        ids[s] = tokens[s] + cached[s];
    }
    qvl_model_set_seq(m, NULL);

    /* Bad batches first: refused, nothing moves. */
    qvl_seq *twice[2] = {seqs[0], seqs[0]};
    assert_int_equal(qvl_model_prefill_batch(m, twice, ids, NULL, len, 2, logits, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "appears twice"));
    const int32_t bad_id[1] = {(int32_t)vocab};
    const int32_t *bad[2] = {ids[0], bad_id};
    const int64_t bad_len[2] = {len[0], 1};
    assert_int_equal(qvl_model_prefill_batch(m, seqs, bad, NULL, bad_len, 2, logits, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    const int64_t too_long[2] = {len[0], CTX};
    assert_int_equal(qvl_model_prefill_batch(m, seqs, ids, NULL, too_long, 2, logits, &err),
                     QVL_E_LIMIT);
    assert_non_null(strstr(err.msg, "do not fit in the context"));
    for (int s = 0; s < N_SEQS; s++) {
        qvl_model_set_seq(m, seqs[s]);
        assert_int_equal(qvl_model_n_past(m), cached[s]);
    }

    assert_int_equal(qvl_model_prefill_batch(m, seqs, ids, NULL, len, N_SEQS, logits, &err),
                     QVL_OK);
    double worst = 0;
    int32_t next_ids[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        qvl_model_set_seq(m, seqs[s]);
        assert_int_equal(qvl_model_n_past(m), cached[s] + len[s]);
        double e = test_rel_err(want_first + (size_t)s * vocab, logits + (size_t)s * vocab, vocab);
        if (e > LOGIT_RTOL) fail_msg("%s, kv %s, %d slots: sequence %d's prompt: %.3g", backend,
                                     kv, kv_slots, s, e);
        worst = fmax(worst, e);
        next_ids[s] = test_argmax(logits + (size_t)s * vocab, vocab);
        assert_int_equal(next_ids[s], test_argmax(want_first + (size_t)s * vocab, vocab));
    }
    qvl_model_set_seq(m, NULL);
    /* The caches it wrote: one batched decode step continues every sequence as alone. */
    assert_int_equal(qvl_model_decode_batch(m, seqs, next_ids, N_SEQS, logits, &err), QVL_OK);
    for (int s = 0; s < N_SEQS; s++) {
        double e = test_rel_err(want_next + (size_t)s * vocab, logits + (size_t)s * vocab, vocab);
        if (e > LOGIT_RTOL) fail_msg("%s, kv %s, %d slots: sequence %d's step after the batch: "
                                     "%.3g", backend, kv, kv_slots, s, e);
        worst = fmax(worst, e);
    }
    qvl_model_step_stats stats;
    qvl_model_get_step_stats(m, &stats);
    assert_int_equal(stats.prefill_batches, 1);
    printf("batched prefill on %s, kv %s, kv_slots %d: %d prompts of %lld, %lld, %lld tokens "
           "(cached %lld, %lld, %lld), worst logit difference %.3g x max|logit| (allowed %.0e)\n",
           backend, kv, kv_slots, N_SEQS, (long long)len[0], (long long)len[1],
           (long long)len[2], (long long)cached[0], (long long)cached[1], (long long)cached[2],
           worst, LOGIT_RTOL);
    for (int s = 0; s < N_SEQS; s++) qvl_seq_free(seqs[s]);
    qvl_model_close(m);
    free(want_first);
    free(want_next);
    free(logits);
    free(scratch);
}

static void batched_prefill_equals_alone(void **state) {
    (void)state;
    parity_backends l;
    parity_backends_get(&l);
    for (size_t b = 0; b < l.n; b++)
        if (parity_backend_loads(&l, b)) {
            check(l.names[b], "f32", 0);          /* caches of their own */
            check(l.names[b], "f32", N_SEQS + 1); /* pool slots (the model's own takes one) */
            check(l.names[b], "q8_0", 0);         /* the ATTENTION node */
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(batched_prefill_equals_alone)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
