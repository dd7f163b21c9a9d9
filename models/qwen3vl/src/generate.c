/* Prefill, then sample / feed back one token at a time. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/generate.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

qvl_status qvl_generate(qvl_model *m, const int32_t *prompt, int64_t n_prompt,
                        const qvl_generation *g, qvl_generation_result *res, qvl_error *err) {
    memset(res, 0, sizeof *res);
    if (g->max_new <= 0) return qvl_fail(err, QVL_E_INVALID, "the token budget must be positive");
    const int64_t vocab = qvl_model_config(m)->text.vocab_size;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    if (!logits) return qvl_fail(err, QVL_E_NOMEM, "out of memory");

    double t0 = now_seconds();
    qvl_status st;
    if (g->prompt_logits) {
        st = qvl_model_eval_images(m, prompt, n_prompt, g->prompt_pos, g->images, true,
                                   g->prompt_logits, err);
        if (st == QVL_OK)
            memcpy(logits, g->prompt_logits + (size_t)(n_prompt - 1) * (size_t)vocab,
                   (size_t)vocab * sizeof *logits);
    } else {
        st = qvl_model_eval_images(m, prompt, n_prompt, g->prompt_pos, g->images, false, logits,
                                   err);
    }
    if (st == QVL_OK) st = qvl_sampler_accept_prompt(g->sampler, prompt, (size_t)n_prompt, err);
    double t1 = now_seconds();
    res->prefill_seconds = t1 - t0;

    while (st == QVL_OK) {
        if (g->cancel && g->cancel(g->user)) {
            res->stop = QVL_STOP_CANCELLED;
            break;
        }
        if (g->grammar && qvl_grammar_sampler_done(g->grammar)) {
            res->stop = QVL_STOP_GRAMMAR;
            break;
        }
        int32_t id;
        if (g->grammar) st = qvl_grammar_sampler_apply(g->grammar, logits, (size_t)vocab, err);
        if (st == QVL_OK) st = qvl_sampler_sample(g->sampler, logits, (size_t)vocab, &id, err);
        if (st != QVL_OK) break;
        if (qvl_gen_config_is_eos(g->stop, id)) {
            res->stop = QVL_STOP_EOS;
            break;
        }
        if (g->grammar) st = qvl_grammar_sampler_accept(g->grammar, id, err);
        if (st == QVL_OK) st = qvl_sampler_accept_generated(g->sampler, id, err);
        if (st != QVL_OK) break;
        res->n_generated++;
        if (g->on_token) g->on_token(id, g->user);
        bool done = g->grammar && qvl_grammar_sampler_done(g->grammar);
        bool last = res->n_generated >= g->max_new || done;
        if (qvl_model_n_past(m) >= qvl_model_ctx(m)) {
            res->stop = QVL_STOP_CONTEXT;
            break;
        }
        const qvl_stop_reason why = done ? QVL_STOP_GRAMMAR : QVL_STOP_MAX_NEW;
        if (last && !g->feed_last) {
            res->stop = why;
            break;
        }
        st = qvl_model_eval(m, &id, 1, NULL, false, logits, err);
        if (last) res->stop = why;
        if (last) break;
    }
    res->decode_seconds = now_seconds() - t1;
    free(logits);
    return st;
}
