/* Batched decode (qvl_model_decode_batch) on every parity backend: several sequences on one
 * model's weights, stepped together, give the logits and greedy tokens each gives stepped
 * alone; a batch that changes (a sequence done, one freed) still gives them; bad batches are
 * one clear error and leave the sequences as they were. Three ways: caches of their own
 * (attention per sequence), all in the model's KV pool (one attention node per layer for the
 * batch), and a pool too small for all (mixed batches fall back to per-sequence nodes). */
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
#include "qvl/backend_helpers.h"
#include "qvl/qwen3vl_model.h"
#include "test_logits.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define N_SEQS 3
#define STEPS 6
/* Batched rows go through GEMMs, single steps through GEMVs: f32 sums in another order, so
 * logits may differ by rounding (f32 KV cache here, so nothing is rounded to f16). */
#define LOGIT_RTOL 1e-4

static const int32_t prompts[N_SEQS][4] = {{1, 2, 3, 4}, {7, 7, 9, 11}, {30, 2, 5, 6}};
static const int64_t prompt_len[N_SEQS] = {4, 3, 2};

static qvl_model *open_model(const char *backend, int kv_slots) {
    qvl_model_options mo = {.backend_name = backend, .ctx = 32, .kv_type = "f32",
                            .kv_slots = kv_slots};
    qvl_model *m = NULL;
    qvl_error err = {0};
    if (qvl_model_open(FIXTURE, &mo, &m, &err) != QVL_OK) fail_msg("%s: %s", backend, err.msg);
    return m;
}

/* Each sequence alone: prompt, then STEPS greedy steps; logits of every step into want. */
static void alone(const char *backend, float *want, int32_t *tokens, int64_t vocab) {
    qvl_model *m = open_model(backend, 0);
    qvl_error err = {0};
    for (int s = 0; s < N_SEQS; s++) {
        qvl_model_truncate(m, 0);
        float *row = want + (size_t)s * STEPS * vocab;
        assert_int_equal(qvl_model_eval(m, prompts[s], prompt_len[s], NULL, false, row, &err), QVL_OK);
        for (int k = 0; k < STEPS; k++) {
            int32_t id = test_argmax(row + (size_t)k * vocab, vocab);
            tokens[s * STEPS + k] = id;
            if (k + 1 < STEPS)
                assert_int_equal(qvl_model_eval(m, &id, 1, NULL, false, row + (size_t)(k + 1) * vocab,
                                                &err), QVL_OK);
        }
    }
    qvl_model_close(m);
}

static void check_backend(const char *backend, int kv_slots) {
    qvl_model *probe = open_model(backend, 0);
    const int64_t vocab = qvl_model_config(probe)->text.vocab_size;
    qvl_model_close(probe);
    float *want = malloc((size_t)N_SEQS * STEPS * vocab * sizeof *want);
    float *first = malloc((size_t)N_SEQS * vocab * sizeof *first);
    int32_t want_tok[N_SEQS * STEPS];
    alone(backend, want, want_tok, vocab);

    qvl_model *m = open_model(backend, kv_slots);
    qvl_error err = {0};
    /* the steps' logits in the model's host memory, as the engine keeps them (page-locked on
     * a GPU: downloaded by DMA alone); more blocks than it has of the backend take malloc's */
    float *logits = qvl_model_host_alloc(m, (size_t)N_SEQS * vocab * sizeof *logits);
    assert_non_null(logits);
    void *extra[6];
    for (int i = 0; i < 6; i++) {
        extra[i] = qvl_model_host_alloc(m, 1000 + (size_t)i);
        assert_non_null(extra[i]);
        memset(extra[i], i, 1000 + (size_t)i);
    }
    for (int i = 0; i < 6; i++) qvl_model_host_free(m, extra[i]);
    qvl_seq *seqs[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        assert_int_equal(qvl_seq_create(m, &seqs[s], &err), QVL_OK);
        qvl_model_set_seq(m, seqs[s]);
        assert_int_equal(qvl_model_eval(m, prompts[s], prompt_len[s], NULL, false,
                                        first + (size_t)s * vocab, &err), QVL_OK);
    }
    qvl_model_set_seq(m, NULL);
    double worst = 0;
    int32_t ids[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) ids[s] = test_argmax(first + (size_t)s * vocab, vocab);
    /* Steps 1..STEPS-1 batched; sequence 2 leaves after step 3 (the batch shrinks). */
    for (int k = 1; k < STEPS; k++) {
        size_t n = k <= 3 ? N_SEQS : N_SEQS - 1;
        assert_int_equal(qvl_model_decode_batch(m, seqs, ids, n, logits, &err), QVL_OK);
        for (size_t s = 0; s < n; s++) {
            assert_int_equal(ids[s], want_tok[s * STEPS + k - 1]);
            const float *w = want + ((size_t)s * STEPS + (size_t)k) * vocab;
            double e = test_rel_err(w, logits + s * vocab, vocab);
            if (e > worst) worst = e;
            if (e > LOGIT_RTOL) fail_msg("%s: sequence %zu step %d: %.3g", backend, s, k, e);
            ids[s] = test_argmax(logits + s * vocab, vocab);
            assert_int_equal(ids[s], want_tok[s * STEPS + k]);
        }
    }
    /* Which graph ran: pooled steps exactly when every sequence of the batch has a pool slot
     * (the model's own sequence takes one). */
    qvl_model_step_stats stats;
    qvl_model_get_step_stats(m, &stats);
    const int pooled_seqs = kv_slots > 1 ? kv_slots - 1 : 0;
    const uint64_t want_pooled = pooled_seqs >= N_SEQS ? STEPS - 1
                                 : pooled_seqs >= N_SEQS - 1 ? STEPS - 1 - 3 : 0;
    assert_int_equal(stats.batch_pooled, want_pooled);
    printf("batched decode on %s, kv_slots %d: %d sequences, %d steps (%llu pooled), worst logit "
           "difference %.3g x max|logit| (allowed %.0e), greedy tokens identical\n", backend,
           kv_slots, N_SEQS, STEPS, (unsigned long long)stats.batch_pooled, worst, LOGIT_RTOL);

    /* Bad batches: refused, nothing moves. */
    qvl_model_set_seq(m, seqs[0]);
    const int64_t before = qvl_model_n_past(m);
    qvl_seq *twice[2] = {seqs[0], seqs[0]};
    assert_int_equal(qvl_model_decode_batch(m, twice, ids, 2, logits, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "appears twice"));
    int32_t bad[2] = {ids[0], (int32_t)vocab};
    assert_int_equal(qvl_model_decode_batch(m, seqs, bad, 2, logits, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_int_equal(qvl_model_n_past(m), before);

    /* Freeing a sequence the kept batch graph is bound to, then batching others, still works. */
    qvl_seq_free(seqs[2]);
    qvl_seq *fresh;
    assert_int_equal(qvl_seq_create(m, &fresh, &err), QVL_OK);
    qvl_model_set_seq(m, fresh);
    assert_int_equal(qvl_model_eval(m, prompts[0], prompt_len[0], NULL, false, first, &err), QVL_OK);
    qvl_seq *pair[2] = {fresh, seqs[1]};
    int32_t pair_ids[2] = {test_argmax(first, vocab), ids[1]};
    assert_int_equal(qvl_model_decode_batch(m, pair, pair_ids, 2, logits, &err), QVL_OK);
    assert_true(test_rel_err(want + (size_t)1 * vocab, logits, vocab) <= LOGIT_RTOL);
    qvl_seq_free(fresh);
    qvl_seq_free(seqs[0]);
    qvl_seq_free(seqs[1]);
    qvl_model_host_free(m, logits);
    qvl_model_close(m);
    free(want);
    free(first);
}

/* Greedy tokens from the device (qvl_model_decode_batch_greedy): the same tokens as the host's
 * argmax of the logits (qvl_model_batch_logits gives those logits), alone's greedy tokens with
 * the whole vocabulary choosable, and never an id past n_valid with part of it (cut: the ids
 * from alone's second token of sequence 0 on are cut, so that its choice must change). */
static void check_greedy(const char *backend, int kv_slots, bool cut) {
    qvl_model *probe = open_model(backend, 0);
    const int64_t vocab = qvl_model_config(probe)->text.vocab_size;
    qvl_model_close(probe);
    float *want = malloc((size_t)N_SEQS * STEPS * vocab * sizeof *want);
    float *logits = malloc((size_t)N_SEQS * vocab * sizeof *logits);
    int32_t want_tok[N_SEQS * STEPS];
    alone(backend, want, want_tok, vocab);
    const int32_t n_valid = cut && want_tok[1] > 0 ? want_tok[1] : (int32_t)vocab;

    qvl_model *m = open_model(backend, kv_slots);
    qvl_error err = {0};
    int32_t next[N_SEQS], ids[N_SEQS];
    assert_int_equal(qvl_model_decode_batch_greedy(m, NULL, ids, 0, next, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "qvl_model_set_greedy_vocab"));
    assert_int_equal(qvl_model_set_greedy_vocab(m, (int32_t)vocab + 1, &err), QVL_E_INVALID);
    const qvl_status on = qvl_model_set_greedy_vocab(m, n_valid, &err);
    if (on == QVL_E_UNSUPPORTED) { /* a backend without ARGMAX (the minimal one) */
        assert_non_null(strstr(err.msg, "has no argmax kernel"));
        printf("greedy on %s: refused (%s)\n", backend, err.msg);
        qvl_model_close(m);
        free(want);
        free(logits);
        return;
    }
    assert_int_equal(on, QVL_OK);
    qvl_seq *seqs[N_SEQS];
    for (int s = 0; s < N_SEQS; s++) {
        assert_int_equal(qvl_seq_create(m, &seqs[s], &err), QVL_OK);
        qvl_model_set_seq(m, seqs[s]);
        assert_int_equal(qvl_model_eval(m, prompts[s], prompt_len[s], NULL, false, logits, &err),
                         QVL_OK);
        ids[s] = want_tok[s * STEPS];
    }
    qvl_model_set_seq(m, NULL);
    for (int k = 1; k < STEPS; k++) {
        size_t n = k <= 3 ? N_SEQS : 1; /* then one sequence alone: the host path */
        assert_int_equal(qvl_model_decode_batch_greedy(m, seqs, ids, n, next, &err), QVL_OK);
        assert_int_equal(qvl_model_batch_logits(m, n, logits, &err), QVL_OK);
        for (size_t s = 0; s < n; s++) {
            assert_in_range(next[s], 0, n_valid - 1);
            assert_int_equal(next[s], qvl_argmax_row(logits + s * vocab, n_valid));
            if (!cut) assert_int_equal(next[s], want_tok[s * STEPS + k]);
            if (cut && k == 1 && s == 0 && n_valid < vocab) assert_true(next[s] != want_tok[1]);
            ids[s] = next[s];
        }
    }
    printf("greedy on %s, kv_slots %d, %lld of %lld ids choosable: %d steps, the host's argmax "
           "of the same logits%s\n", backend, kv_slots, (long long)n_valid, (long long)vocab,
           STEPS - 1, cut ? "" : ", alone's tokens");
    for (int s = 0; s < N_SEQS; s++) qvl_seq_free(seqs[s]);
    qvl_model_close(m);
    free(want);
    free(logits);
}

static void batched_equals_alone(void **state) {
    (void)state;
    parity_backends l;
    parity_backends_get(&l);
    for (size_t b = 0; b < l.n; b++)
        if (parity_backend_loads(&l, b)) {
            check_backend(l.names[b], 0);          /* caches of their own */
            check_backend(l.names[b], N_SEQS + 1); /* all pooled */
            check_backend(l.names[b], N_SEQS);     /* the last sequence unpooled */
        }
}

static void greedy_ids_from_the_backend(void **state) {
    (void)state;
    parity_backends l;
    parity_backends_get(&l);
    for (size_t b = 0; b < l.n; b++)
        if (parity_backend_loads(&l, b)) {
            check_greedy(l.names[b], N_SEQS + 1, false);
            check_greedy(l.names[b], 0, true);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(batched_equals_alone),
                                       cmocka_unit_test(greedy_ids_from_the_backend)};
    /* one test by name (the minimal backend's run: it has no batched or ARGMAX kernels) */
    const char *only = getenv("QVL_TEST_ONLY");
    if (only && *only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
