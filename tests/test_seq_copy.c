/* qvl_seq_copy_prefix on every parity backend, for each KV cache dtype the backend opens: a
 * sequence that copied another's prefix decodes what a sequence that prefilled that prefix
 * itself decodes (greedy tokens equal, logits within LOGIT_RTOL), from a source that has gone
 * on past the prefix; the rope offset of a prompt whose positions jump (a picture's) comes
 * along; caches of their own and caches in the model's KV pool, and a model split over two
 * backends (each copies the layers whose caches it holds); bad copies are one clear error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parity_backends.h"
#include "qvl/qwen3vl_model.h"
#include "test_logits.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define STEPS 5
#define N_PROMPT 6
#define KEEP 5 /* the prefix copied: all but the last prompt token, as the engine copies */
/* The copy and the prefill it stands for run the same graphs over the same cache values, so
 * the logits match to rounding only where a backend's sums are not deterministic. */
#define LOGIT_RTOL 1e-6

static const int32_t prompt[N_PROMPT] = {3, 14, 15, 92, 65, 35};

/* Greedy steps of the current sequence from `first` (its next-token logits): the logits of
 * each step into out [STEPS, vocab], the tokens into tok. */
static void greedy(qvl_model *m, const float *first, float *out, int32_t *tok, int64_t vocab) {
    qvl_error err = {0};
    memcpy(out, first, (size_t)vocab * sizeof *out);
    for (int k = 0; k < STEPS; k++) {
        tok[k] = test_argmax(out + (size_t)k * vocab, vocab);
        if (k + 1 < STEPS)
            assert_int_equal(qvl_model_eval(m, &tok[k], 1, NULL, false, out + (size_t)(k + 1) * vocab,
                                            &err), QVL_OK);
    }
}

static double compare(const char *what, const float *want, const int32_t *want_tok,
                      const float *got, const int32_t *got_tok, int64_t vocab) {
    double worst = 0;
    for (int k = 0; k < STEPS; k++) {
        assert_int_equal(got_tok[k], want_tok[k]);
        double e = test_rel_err(want + (size_t)k * vocab, got + (size_t)k * vocab, vocab);
        if (e > LOGIT_RTOL) fail_msg("%s: step %d: logits differ by %.3g", what, k, e);
        if (e > worst) worst = e;
    }
    return worst;
}

/* Prompt positions that jump by 7 after token 2, as text after a picture does: the sequence's
 * rope offset is 7 afterwards. */
static void jump_positions(int32_t *pos) {
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < N_PROMPT; i++) pos[c * N_PROMPT + i] = i < 3 ? i : i + 7;
}

/* split: layer 1 and the output on `backend`, layer 0 on the reference (two graph parts, each
 * copying the caches that live on its backend). */
static void check(const char *backend, const char *kv_type, int kv_slots, bool split) {
    qvl_model_options mo = {.backend_name = backend, .ctx = 32, .kv_type = kv_type,
                            .kv_slots = kv_slots, .gpu_layers = split ? "1" : NULL,
                            .cpu_backend_name = split ? "reference" : NULL};
    qvl_model *m = NULL;
    qvl_error err = {0};
    if (qvl_model_open(FIXTURE, &mo, &m, &err) != QVL_OK) {
        /* q8_0 needs fused attention: a backend without it refuses the cache type at open. */
        if (strcmp(kv_type, "q8_0") == 0) {
            printf("%s: no q8_0 KV cache (%s)\n", backend, err.msg);
            return;
        }
        fail_msg("%s %s: %s", backend, kv_type, err.msg);
    }
    char place[256];
    qvl_model_placement(m, place, sizeof place);
    if (split) assert_non_null(strstr(place, "on reference"));
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    float *want = malloc((size_t)STEPS * vocab * sizeof *want);
    float *got = malloc((size_t)STEPS * vocab * sizeof *got);
    float *first = malloc((size_t)vocab * sizeof *first);
    int32_t want_tok[STEPS], got_tok[STEPS], pos[3 * N_PROMPT], tail_pos[3];
    jump_positions(pos);
    qvl_positions_slice(pos, N_PROMPT, KEEP, 1, tail_pos);
    qvl_seq *src, *self, *copy;
    assert_int_equal(qvl_seq_create(m, &src, &err), QVL_OK);
    assert_int_equal(qvl_seq_create(m, &self, &err), QVL_OK);
    assert_int_equal(qvl_seq_create(m, &copy, &err), QVL_OK);

    /* The reference: KEEP tokens, then the last one, then greedy steps. */
    qvl_model_set_seq(m, self);
    assert_int_equal(qvl_model_eval(m, prompt, KEEP, pos, false, first, &err), QVL_OK);
    assert_int_equal(qvl_model_eval(m, prompt + KEEP, 1, tail_pos, false, first, &err), QVL_OK);
    greedy(m, first, want, want_tok, vocab);

    /* The source: the same KEEP tokens, then something else and a few steps past them. */
    qvl_model_set_seq(m, src);
    assert_int_equal(qvl_model_eval(m, prompt, KEEP, pos, false, first, &err), QVL_OK);
    const int32_t other[3] = {200, 201, 202};
    assert_int_equal(qvl_model_eval(m, other, 3, NULL, false, first, &err), QVL_OK);
    const int64_t src_past = qvl_model_n_past(m);

    /* The copy of the source's first KEEP tokens, then what the reference ran after them. */
    assert_int_equal(qvl_seq_copy_prefix(m, copy, src, KEEP, &err), QVL_OK);
    qvl_model_set_seq(m, copy);
    assert_int_equal(qvl_model_n_past(m), KEEP);
    assert_int_equal(qvl_model_eval(m, prompt + KEEP, 1, tail_pos, false, first, &err), QVL_OK);
    greedy(m, first, got, got_tok, vocab);
    double worst = compare("prefix copy", want, want_tok, got, got_tok, vocab);
    qvl_model_set_seq(m, src);
    assert_int_equal(qvl_model_n_past(m), src_past); /* the source is untouched */

    /* A whole copy keeps the rope offset: both go on from position 6 + 7 alike. The copy's
     * old contents (a longer sequence) are overwritten. */
    qvl_model_set_seq(m, self);
    qvl_model_truncate(m, 0);
    assert_int_equal(qvl_model_eval(m, prompt, N_PROMPT, pos, false, first, &err), QVL_OK);
    assert_int_equal(qvl_seq_copy_prefix(m, copy, self, N_PROMPT, &err), QVL_OK);
    greedy(m, first, want, want_tok, vocab);
    qvl_model_set_seq(m, copy);
    assert_int_equal(qvl_model_n_past(m), N_PROMPT);
    greedy(m, first, got, got_tok, vocab);
    double e = compare("whole copy with a rope offset", want, want_tok, got, got_tok, vocab);
    if (e > worst) worst = e;

    /* Refused: more than the source holds, a sequence onto itself. */
    assert_int_equal(qvl_seq_copy_prefix(m, copy, src, src_past + 1, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "the source holds"));
    assert_int_equal(qvl_seq_copy_prefix(m, copy, copy, 1, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "itself"));
    /* Copying nothing empties the destination. */
    assert_int_equal(qvl_seq_copy_prefix(m, copy, src, 0, &err), QVL_OK);
    assert_int_equal(qvl_model_n_past(m), 0);

    printf("prefix copy on %s (%s), %s cache, kv_slots %d: greedy tokens identical, worst "
           "logit difference %.3g x max|logit| (allowed %.0e)\n", backend, place, kv_type,
           kv_slots, worst, LOGIT_RTOL);
    qvl_seq_free(src);
    qvl_seq_free(self);
    qvl_seq_free(copy);
    qvl_model_close(m);
    free(want);
    free(got);
    free(first);
}

static void copy_equals_prefill(void **state) {
    (void)state;
    parity_backends l;
    parity_backends_get(&l);
    static const char *const kv_types[] = {"f32", "f16", "q8_0"};
    for (size_t b = 0; b < l.n; b++) {
        if (!parity_backend_loads(&l, b)) continue;
        for (size_t t = 0; t < sizeof kv_types / sizeof *kv_types; t++) {
            check(l.names[b], kv_types[t], 0, false); /* caches of their own */
            check(l.names[b], kv_types[t], 5, false); /* every sequence in the KV pool */
        }
        /* Split over two backends (the reference as the CPU backend of another one). */
        if (!l.strict && strcmp(l.names[b], "reference") != 0) {
            check(l.names[b], "f16", 0, true);
            check(l.names[b], "f16", 5, true);
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(copy_equals_prefill)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
