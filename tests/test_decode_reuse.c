/* Decode-graph reuse and batched decode do not depend on a fused op: the reference with its
 * fused ops off (the primitive attention chain) and the linear test plugin with the reference
 * beside it (per-op fallback) keep one decode graph for every single-token step and one
 * batched graph for every batched step, as the fused reference does, and give its greedy
 * tokens. The model's step counters say which graphs were built and which were reused.
 *
 * ctest runs it with the allocators filling new memory with 0xfe bytes (MALLOC_PERTURB_,
 * ASan's malloc_fill_byte): an f16 NaN in every cache row nothing has written yet. The
 * unfused chain reads those rows (masked), so the tokens match only because the model
 * zero-fills a cache when it allocates it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/qwen3vl_model.h"
#include "test_logits.h"

#define FIXTURE QVL_SOURCE_DIR "/tests/fixtures/tiny-tied"
#define STEPS 8       /* single-token steps after the prompt */
#define BATCH_STEPS 4 /* batched steps of two sequences */

static const int32_t prompt[4] = {1, 2, 3, 4};
static const int32_t prompt2[3] = {7, 7, 9};

typedef struct run_result {
    int32_t single[STEPS];
    int32_t batched[2][BATCH_STEPS];
    qvl_model_step_stats steps;
    size_t n_backends;
} run_result;

/* Greedy single steps on the model's own sequence, then two new sequences stepped together. */
static void run(const char *plugins, const char *backend, run_result *r) {
    qvl_model_options mo = {.plugins_path = plugins, .backend_name = backend, .ctx = 32};
    qvl_model *m = NULL;
    qvl_error err = {0};
    if (qvl_model_open(FIXTURE, &mo, &m, &err) != QVL_OK) fail_msg("%s: %s", backend, err.msg);
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    float *logits = malloc((size_t)(2 * vocab) * sizeof *logits);
    assert_non_null(logits);
    assert_int_equal(qvl_model_eval(m, prompt, 4, NULL, false, logits, &err), QVL_OK);
    for (int k = 0; k < STEPS; k++) {
        r->single[k] = test_argmax(logits, vocab);
        assert_int_equal(qvl_model_eval(m, &r->single[k], 1, NULL, false, logits, &err), QVL_OK);
    }
    qvl_seq *seqs[2];
    int32_t ids[2];
    const int32_t *prompts[2] = {prompt, prompt2};
    const int64_t lens[2] = {4, 3};
    for (int s = 0; s < 2; s++) {
        assert_int_equal(qvl_seq_create(m, &seqs[s], &err), QVL_OK);
        qvl_model_set_seq(m, seqs[s]);
        assert_int_equal(qvl_model_eval(m, prompts[s], lens[s], NULL, false, logits, &err), QVL_OK);
        ids[s] = test_argmax(logits, vocab);
    }
    qvl_model_set_seq(m, NULL);
    for (int k = 0; k < BATCH_STEPS; k++) {
        for (int s = 0; s < 2; s++) r->batched[s][k] = ids[s];
        assert_int_equal(qvl_model_decode_batch(m, seqs, ids, 2, logits, &err), QVL_OK);
        for (int s = 0; s < 2; s++) ids[s] = test_argmax(logits + s * vocab, vocab);
    }
    qvl_model_get_step_stats(m, &r->steps);
    qvl_model_backend_memory mem[8];
    r->n_backends = qvl_model_memory(m, mem, 8);
    qvl_seq_free(seqs[0]);
    qvl_seq_free(seqs[1]);
    qvl_model_close(m);
    free(logits);
}

/* One decode graph built and reused for every later single step, one batched graph built and
 * reused for every later batched step, and no single step built a graph of its own. */
static void assert_reused(const char *what, const run_result *r) {
    printf("%s: decode graphs built %llu, reused %llu, per-step %llu; batched built %llu, "
           "reused %llu\n", what, (unsigned long long)r->steps.decode_builds,
           (unsigned long long)r->steps.decode_reuses, (unsigned long long)r->steps.decode_unkept,
           (unsigned long long)r->steps.batch_builds, (unsigned long long)r->steps.batch_reuses);
    assert_int_equal(r->steps.decode_builds, 1);
    assert_int_equal(r->steps.decode_reuses, STEPS - 1);
    assert_int_equal(r->steps.decode_unkept, 0);
    assert_int_equal(r->steps.batch_builds, 1);
    assert_int_equal(r->steps.batch_reuses, BATCH_STEPS - 1);
}

static void assert_same_tokens(const char *what, const run_result *got, const run_result *want) {
    assert_memory_equal(got->single, want->single, sizeof want->single);
    assert_memory_equal(got->batched, want->batched, sizeof want->batched);
    printf("%s: the fused reference's %d single-step and 2 x %d batched greedy tokens\n", what,
           STEPS, BATCH_STEPS);
}

static void unfused_reference_reuses(void **state) {
    (void)state;
    run_result fused, unfused;
    memset(&fused, 0, sizeof fused);
    memset(&unfused, 0, sizeof unfused);
    run(NULL, "reference", &fused);
    assert_reused("reference, fused", &fused);
    run(QVL_UNFUSED_PLUGINS, "reference", &unfused);
    assert_reused("reference, fused_ops: false", &unfused);
    assert_same_tokens("reference, fused_ops: false", &unfused, &fused);
}

static void linear_with_fallback_reuses(void **state) {
    (void)state;
    run_result fused, linear;
    memset(&fused, 0, sizeof fused);
    memset(&linear, 0, sizeof linear);
    run(NULL, "reference", &fused);
    run(QVL_LINEAR_PLUGINS, "linear", &linear);
    assert_int_equal(linear.n_backends, 2); /* linear and the reference it fell back to */
    assert_reused("linear + reference", &linear);
    assert_same_tokens("linear + reference", &linear, &fused);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unfused_reference_reuses),
        cmocka_unit_test(linear_with_fallback_reuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
