/* Batched decode of several sequences (bench_parallel.h). */
#define _POSIX_C_SOURCE 200809L
#include "bench_parallel.h"

#include <stdlib.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int32_t argmax(const float *v, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int32_t)i;
    return best;
}

/* One repetition: fresh sequences, their prompts in one batched prefill (its seconds in
 * *prefill_seconds), n_gen steps (their seconds in *seconds): each step's logits to the host,
 * or with greedy only its tokens (chosen on the device). With prof non-NULL the last step
 * runs profiled (*prof, its wall seconds in *prof_wall). */
static qvl_status one_rep(qvl_model *m, qvl_seq **seqs, size_t n, const int32_t *prompt,
                          int64_t n_prompt, int64_t n_gen, bool greedy, float *logits,
                          int32_t *ids, double *prefill_seconds, double *seconds,
                          qvl_op_profile *prof, double *prof_wall, qvl_error *err) {
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    const int32_t *prompts[QVL_TEXT_MAX_SEQS];
    int64_t lens[QVL_TEXT_MAX_SEQS];
    for (size_t i = 0; i < n; i++) {
        qvl_model_set_seq(m, seqs[i]);
        qvl_model_truncate(m, 0);
        prompts[i] = prompt;
        lens[i] = n_prompt;
    }
    qvl_model_set_seq(m, NULL);
    const double p0 = now_seconds();
    qvl_status st = qvl_model_prefill_batch(m, seqs, prompts, NULL, lens, n, logits, err);
    *prefill_seconds = now_seconds() - p0;
    for (size_t i = 0; i < n && st == QVL_OK; i++)
        ids[i] = argmax(logits + i * (size_t)vocab, vocab);
    *seconds = 0;
    for (int64_t k = 0; k < n_gen && st == QVL_OK; k++) {
        const bool profiled = prof && k == n_gen - 1;
        if (profiled) {
            qvl_model_profile_reset(m);
            qvl_model_set_profiling(m, true);
        }
        double t0 = now_seconds();
        int32_t next[QVL_TEXT_MAX_SEQS];
        st = greedy ? qvl_model_decode_batch_greedy(m, seqs, ids, n, next, err)
                    : qvl_model_decode_batch(m, seqs, ids, n, logits, err);
        *seconds += now_seconds() - t0;
        if (profiled) {
            *prof_wall = now_seconds() - t0;
            qvl_model_profile(m, prof);
            qvl_model_set_profiling(m, false);
        }
        for (size_t i = 0; i < n; i++)
            ids[i] = greedy ? next[i] : argmax(logits + (size_t)i * (size_t)vocab, vocab);
    }
    return st;
}

qvl_status bench_parallel(qvl_model *m, int64_t n_seqs, const int32_t *prompt, int64_t n_prompt,
                          int64_t n_gen, int64_t reps, bench_spread *out, bench_spread *greedy,
                          bench_spread *prefill, qvl_op_profile *prof, double *prof_wall,
                          qvl_error *err) {
    if (n_seqs < 1 || n_seqs > QVL_TEXT_MAX_SEQS)
        return qvl_fail(err, QVL_E_INVALID, "--parallel takes 1 to %d sequences, not %lld",
                        QVL_TEXT_MAX_SEQS, (long long)n_seqs);
    const size_t n = (size_t)n_seqs;
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    qvl_seq **seqs = calloc(n, sizeof *seqs);
    int32_t *ids = calloc(n, sizeof *ids);
    float *logits = qvl_model_host_alloc(m, n * (size_t)vocab * sizeof *logits); /* as a server's */
    double *tps = calloc((size_t)reps, sizeof *tps);
    double *pps = calloc((size_t)reps, sizeof *pps);
    double *gps = calloc((size_t)reps, sizeof *gps);
    qvl_status st = seqs && ids && logits && tps && pps && gps ? QVL_OK
                                                 : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n && st == QVL_OK; i++) st = qvl_seq_create(m, &seqs[i], err);
    for (int64_t r = 0; r < reps && st == QVL_OK; r++) {
        double seconds, pre;
        st = one_rep(m, seqs, n, prompt, n_prompt, n_gen, false, logits, ids, &pre, &seconds,
                     NULL, NULL, err);
        tps[r] = seconds > 0 ? (double)(n_seqs * n_gen) / seconds : 0;
        pps[r] = pre > 0 ? (double)(n_seqs * n_prompt) / pre : 0;
    }
    /* The same steps with greedy tokens chosen on the device (what a server's greedy clients
     * get), the whole vocabulary choosable; then off again. A backend without ARGMAX: not
     * measured (greedy stays zero). */
    const int32_t vocab32 = (int32_t)vocab;
    qvl_error why = {0};
    const bool ids_only = st == QVL_OK && qvl_model_set_greedy_vocab(m, vocab32, &why) == QVL_OK;
    for (int64_t r = 0; r < reps && st == QVL_OK && ids_only; r++) {
        double seconds, pre;
        st = one_rep(m, seqs, n, prompt, n_prompt, n_gen, true, logits, ids, &pre, &seconds,
                     NULL, NULL, err);
        gps[r] = seconds > 0 ? (double)(n_seqs * n_gen) / seconds : 0;
    }
    if (st == QVL_OK && ids_only) st = qvl_model_set_greedy_vocab(m, 0, err);
    if (st == QVL_OK) *out = bench_spread_of(tps, (int)reps);
    if (st == QVL_OK && ids_only) *greedy = bench_spread_of(gps, (int)reps);
    if (st == QVL_OK) *prefill = bench_spread_of(pps, (int)reps);
    if (st == QVL_OK && prof) {
        /* One more repetition whose last step is profiled: the context holds no more tokens
         * than the timed ones used, and the step is at the same depth as theirs. */
        double seconds, pre;
        st = one_rep(m, seqs, n, prompt, n_prompt, n_gen, false, logits, ids, &pre, &seconds,
                     prof, prof_wall, err);
    }
    for (size_t i = 0; seqs && i < n; i++) qvl_seq_free(seqs[i]);
    free(seqs);
    free(ids);
    qvl_model_host_free(m, logits);
    free(tps);
    free(pps);
    free(gps);
    return st;
}
