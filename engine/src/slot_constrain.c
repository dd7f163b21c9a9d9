/* What a job asks of its logits besides sampling (slot.h): logit_bias and a grammar mask shape
 * the row before the sampler (which applies the penalties, the frequency penalty included);
 * logprobs read the same row afterwards.
 *
 * Order, and why: the bias is arithmetic on logits and commutes with the penalties' additive
 * part; the grammar mask comes last so that no bias, however large, can make the sampler pick
 * a token the grammar refuses. */
#define _POSIX_C_SOURCE 200809L

#include "slot.h"

#include <math.h>
#include <string.h>

qvl_status engine_slot_constrain_begin(engine_slot *s, const engine_slot_env *env, qvl_error *err) {
    const qvl_job *j = s->job;
    if (!j->grammar) return QVL_OK;
    if (!env->trie) return qvl_fail(err, QVL_E_INVALID, "this model has no tokenizer vocabulary "
                                    "for a grammar");
    const int n_eos = env->gen->n_eos > 0 ? env->gen->n_eos : 0;
    s->grammar_live = j->req->grammar_trigger == NULL;
    s->trigger_from = 0;
    return qvl_grammar_sampler_create(j->grammar, env->trie, env->gen->eos_token_ids,
                                      (size_t)n_eos, env->vocab, &s->grammar, err);
}

void engine_slot_constrain_end(engine_slot *s, const engine_slot_env *env) {
    if (s->grammar && s->job) {
        int64_t masks = 0;
        const double sec = qvl_grammar_sampler_seconds(s->grammar, &masks);
        pthread_mutex_lock(&s->job->mu);
        s->job->mask_seconds = sec;
        pthread_mutex_unlock(&s->job->mu);
        if (masks > 0) observe_mask(env, masks, sec, qvl_grammar_sampler_apply_seconds(s->grammar));
    }
    qvl_grammar_sampler_free(s->grammar);
    s->grammar = NULL;
}

void engine_slot_premask(engine_slot *s) {
    if (!s->grammar || !s->grammar_live) return;
    qvl_error err = {0};
    /* a failure here is found again, and reported, by the apply that needs the set */
    (void)qvl_grammar_sampler_prepare(s->grammar, &err);
}

qvl_status engine_slot_process(engine_slot *s, const engine_slot_env *env, const float **row,
                               qvl_error *err) {
    const qvl_engine_request *r = s->job->req;
    const bool mask = s->grammar && s->grammar_live;
    if (r->n_bias == 0 && !mask) return QVL_OK;
    if (*row != s->work) memcpy(s->work, *row, (size_t)env->vocab * sizeof *s->work);
    *row = s->work;
    for (size_t i = 0; i < r->n_bias; i++) s->work[r->bias[i].id] += r->bias[i].bias;
    return mask ? qvl_grammar_sampler_apply(s->grammar, s->work, (size_t)env->vocab, err) : QVL_OK;
}

/* The k most probable ids of lp[0, n) into out (descending; ties: lower id first). */
static int top_k(const float *lp, size_t n, int k, int32_t *ids, float *vals) {
    int have = 0;
    for (size_t i = 0; i < n; i++) {
        const float v = lp[i];
        if (v == -INFINITY || (have == k && !(v > vals[have - 1]))) continue;
        int at = have < k ? have++ : k - 1;
        while (at > 0 && v > vals[at - 1]) {
            vals[at] = vals[at - 1];
            ids[at] = ids[at - 1];
            at--;
        }
        vals[at] = v;
        ids[at] = (int32_t)i;
    }
    return have;
}

qvl_status engine_slot_chosen(engine_slot *s, const engine_slot_env *env, const float *row,
                              int32_t id, bool *done, qvl_token_logprob *lp, qvl_error *err) {
    *done = false;
    const qvl_engine_request *r = s->job->req;
    if (r->logprobs) {
        qvl_status st = qvl_sampler_logprobs(s->sampler, row, (size_t)env->vocab, s->lp, err);
        if (st != QVL_OK) return st;
        memset(lp, 0, sizeof *lp);
        lp->id = id;
        lp->logprob = s->lp[id];
        if (r->top_logprobs > 0)
            lp->n_top = top_k(s->lp, (size_t)env->vocab, r->top_logprobs, lp->top_id,
                              lp->top_logprob);
    }
    if (!s->grammar || !s->grammar_live) return QVL_OK;
    qvl_status st = qvl_grammar_sampler_accept(s->grammar, id, err);
    if (st == QVL_OK) *done = qvl_grammar_sampler_done(s->grammar);
    return st;
}

qvl_status engine_slot_trigger(engine_slot *s, qvl_error *err) {
    const qvl_job *j = s->job;
    const char *trigger = j->req->grammar_trigger;
    if (!s->grammar || s->grammar_live || !trigger) return QVL_OK;
    const size_t tn = strlen(trigger);
    if (j->len < s->trigger_from + tn) return QVL_OK;
    /* The engine is the only writer of j->text, so it reads it without the lock. */
    for (size_t at = s->trigger_from; at + tn <= j->len; at++) {
        if (memcmp(j->text + at, trigger, tn) != 0) continue;
        s->grammar_live = true;
        return qvl_grammar_sampler_feed(s->grammar, j->text + at + tn, j->len - at - tn, err);
    }
    s->trigger_from = j->len - tn + 1; /* a trigger may still end in text to come */
    return QVL_OK;
}
