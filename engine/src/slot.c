/* One slot's generation after its prefill (slot_prefill.c): one token per step. The loop is
 * qvl_generate's (models/qwen3vl/src/generate.c) taken apart so the engine can interleave
 * slots, stop at stop strings and cancel between tokens. */
#define _POSIX_C_SOURCE 200809L

#include "slot.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/stop_strings.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

qvl_status engine_slot_open(engine_slot *s, int index, qvl_model *m, bool own, qvl_error *err) {
    memset(s, 0, sizeof *s);
    s->index = index;
    s->m = m;
    s->own_seq = own;
    if (own) s->seq = qvl_model_own_seq(m);
    qvl_status st = own ? QVL_OK : qvl_seq_create(m, &s->seq, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "slot %d", index);
    const size_t ctx = (size_t)qvl_model_ctx(s->m);
    const size_t vocab = (size_t)qvl_model_config(s->m)->text.vocab_size;
    s->keys = malloc(ctx * sizeof *s->keys);
    s->generated = malloc(ctx * sizeof *s->generated);
    s->logits = malloc(vocab * sizeof *s->logits);
    s->work = malloc(vocab * sizeof *s->work);
    s->lp = malloc(vocab * sizeof *s->lp);
    if (!s->keys || !s->generated || !s->logits || !s->work || !s->lp)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory for slot %d", index);
    return QVL_OK;
}

void engine_slot_close(engine_slot *s) {
    if (!s->own_seq) qvl_seq_free(s->seq);
    qvl_sampler_free(s->sampler);
    free(s->keys);
    free(s->images);
    free(s->generated);
    free(s->logits);
    free(s->work);
    free(s->lp);
    memset(s, 0, sizeof *s);
}

int64_t engine_slot_reusable(const engine_slot *s, const qvl_job *j) {
    const qvl_prefix cache = {.partition = &s->partition, .keys = s->keys, .n_keys = s->n_keys,
                                .images = s->images, .n_images = s->n_images};
    const qvl_prefix prompt = {.partition = &j->partition, .keys = j->keys, .n_keys = j->n_ids,
                                 .images = j->images, .n_images = j->req->n_pictures};
    return qvl_prefix_match(&cache, &prompt);
}

void engine_slot_end(engine_slot *s, const engine_slot_env *env, qvl_finish how, const char *error) {
    qvl_job *j = s->job;
    if (!j) return;
    if (how == QVL_FINISH_STOP || how == QVL_FINISH_LENGTH) {
        qvl_text_stream_flush(&s->stream);
        if (s->oom) {
            how = QVL_FINISH_ERROR;
            error = "out of memory for the answer";
        }
    }
    int32_t *tokens = NULL;
    if (s->n_generated > 0) {
        tokens = malloc((size_t)s->n_generated * sizeof *tokens);
        if (tokens) {
            memcpy(tokens, s->generated, (size_t)s->n_generated * sizeof *tokens);
        } else if (how != QVL_FINISH_ERROR) {
            how = QVL_FINISH_ERROR;
            error = "out of memory for the answer";
        }
    }
    const double decode_seconds = s->decode_start > 0 ? now_seconds() - s->decode_start : 0;
    pthread_mutex_lock(&j->mu);
    j->completion_tokens = s->n_generated;
    free(j->tokens);
    j->tokens = tokens;
    j->decode_seconds = decode_seconds;
    int64_t cached = j->cached_tokens;
    pthread_mutex_unlock(&j->mu);
    if (env->slot_freeing) env->slot_freeing(env->slot_freeing_arg);
    /* Counted before the client is woken: whoever holds an answer sees it in /metrics. */
    engine_slot_constrain_end(s, env); /* before the waiters wake: the mask's cost is in the job */
    observe_completion(env, j->n_ids, cached, s->n_generated, how == QVL_FINISH_CANCELLED);
    qvl_job_finish(j, how, error);
    qvl_sampler_free(s->sampler);
    s->sampler = NULL;
    engine_slot_prefill_drop(s);
    s->job = NULL;
    s->waiting = false;
    qvl_job_release(j);
}

/* Answer text from the UTF-8 stream. A NUL byte (a token of its own in byte-level BPE) becomes
 * U+FFFD: the answer is handled as a C string and cJSON cannot write "\u0000". */
void engine_slot_emit_text(const char *text, size_t len, void *user) {
    engine_slot *s = user;
    static const char replacement[] = "\xEF\xBF\xBD";
    while (len > 0 && !s->oom) {
        const char *nul = memchr(text, '\0', len);
        size_t n = nul ? (size_t)(nul - text) : len;
        if (n > 0 && !qvl_job_append(s->job, text, n)) s->oom = true;
        if (nul && !s->oom && !qvl_job_append(s->job, replacement, sizeof replacement - 1))
            s->oom = true;
        n += nul != NULL;
        text += n;
        len -= n;
    }
}

/* After new text: end at a stop string, else publish what no stop string can still claim. */
static bool check_stops(engine_slot *s) {
    qvl_job *j = s->job;
    const qvl_engine_request *r = j->req;
    /* The engine is the only writer of j->text, so it reads it without the lock. */
    size_t len = j->len, at;
    if (r->n_stops > 0 && qvl_stop_find(r->stops, r->n_stops, j->text, len, s->searched, &at)) {
        qvl_job_truncate(j, at);
        return true;
    }
    s->searched = len;
    size_t hold = r->n_stops > 0 ? qvl_stop_holdback(r->stops, r->n_stops, j->text, len) : 0;
    qvl_job_set_visible(j, len - hold);
    return false;
}

/* A stop token of the model's ends the answer unless the request ignores them. */
static bool ends(const engine_slot_env *env, const qvl_job *j, int32_t id) {
    return !j->req->ignore_eos && qvl_gen_config_is_eos(env->gen, id);
}

bool engine_slot_next(engine_slot *s, const engine_slot_env *env, int32_t *next) {
    qvl_job *j = s->job;
    if (!j) return false;
    qvl_model_set_seq(s->m, s->seq);
    if (atomic_load(&j->cancel)) {
        engine_slot_end(s, env, QVL_FINISH_CANCELLED, NULL);
        return false;
    }
    if (qvl_job_expired(j)) { /* the answer so far, cut as max_tokens would cut it */
        observe_timeout(env);
        engine_slot_end(s, env, QVL_FINISH_LENGTH, NULL);
        return false;
    }
    qvl_error err = {0};
    const float *row = s->row;
    int32_t id = s->chosen; /* row NULL: the device chose it (engine_slot_fed_chosen) */
    bool done = false;
    qvl_token_logprob lp;
    if ((row && (engine_slot_process(s, env, &row, &err) != QVL_OK ||
                 qvl_sampler_sample(s->sampler, row, (size_t)env->vocab, &id, &err) != QVL_OK)) ||
        engine_slot_chosen(s, env, row, id, &done, &lp, &err) != QVL_OK ||
        (!ends(env, j, id) && qvl_sampler_accept_generated(s->sampler, id, &err) != QVL_OK)) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, err.msg);
        return false;
    }
    if (ends(env, j, id)) {
        engine_slot_end(s, env, QVL_FINISH_STOP, NULL);
        return false;
    }
    s->generated[s->n_generated++] = id;
    if (env->tok && !qvl_tokenizer_is_special(env->tok, id)) { /* no tokenizer: ids only */
        const char *bytes;
        size_t len;
        if (qvl_tokenizer_token_to_piece(env->tok, id, &bytes, &len, NULL) == QVL_OK)
            qvl_text_stream_feed(&s->stream, bytes, len);
    }
    if (j->req->logprobs) {
        /* The token's bytes held back as an unfinished character count as its text too. */
        lp.end = j->len + s->stream.n_pending;
        if (!qvl_job_add_logprob(j, &lp)) s->oom = true;
    }
    if (s->oom) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, "out of memory for the answer");
        return false;
    }
    if (engine_slot_trigger(s, &err) != QVL_OK) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, err.msg);
        return false;
    }
    if (check_stops(s)) {
        s->stream.n_pending = 0; /* the cut text ends before any unfinished character */
        engine_slot_end(s, env, QVL_FINISH_STOP, NULL);
        return false;
    }
    if (done) { /* the grammar allows only the end: stop as its stop token would */
        engine_slot_end(s, env, QVL_FINISH_STOP, NULL);
        return false;
    }
    if (s->n_generated >= s->max_new || qvl_model_n_past(s->m) >= qvl_model_ctx(s->m)) {
        engine_slot_end(s, env, QVL_FINISH_LENGTH, NULL);
        return false;
    }
    *next = id;
    return true;
}

void engine_slot_fed(engine_slot *s, int32_t id, const float *logits) {
    s->row = logits;
    s->keys[s->n_keys++] = qvl_prefix_text_key(id);
}

void engine_slot_fed_chosen(engine_slot *s, int32_t id, int32_t next) {
    s->row = NULL;
    s->chosen = next;
    s->keys[s->n_keys++] = qvl_prefix_text_key(id);
}

bool engine_slot_plain_greedy(const engine_slot *s, const engine_slot_env *env) {
    const qvl_job *j = s->job;
    if (!j || s->prefilling || env->greedy_vocab <= 0) return false;
    const qvl_engine_request *r = j->req;
    const qvl_sampling_params *p = &r->sampling;
    const int32_t n_valid = p->n_valid > 0 && p->n_valid < env->vocab ? p->n_valid : env->vocab;
    return p->temperature <= 0.0f && p->repetition_penalty == 1.0f &&
           p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f &&
           r->frequency_penalty == 0.0f && r->n_bias == 0 && !s->grammar && !r->logprobs &&
           n_valid == env->greedy_vocab;
}

void engine_slot_feed_failed(engine_slot *s, const engine_slot_env *env, const char *error) {
    qvl_model_set_seq(s->m, s->seq);
    qvl_model_truncate(s->m, 0); /* what the failed step left in the cache is unknown */
    s->n_keys = 0;
    engine_slot_end(s, env, QVL_FINISH_ERROR, error);
}
