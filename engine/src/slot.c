/* One slot's generation: prefix reuse, prefill with pictures, then one token per step. The
 * loop is qvl_generate's (models/qwen3vl/src/generate.c) taken apart so the engine can
 * interleave slots, stop at stop strings and cancel between tokens. */
#define _POSIX_C_SOURCE 200809L

#include "slot.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "picture_rules.h"
#include "qvl/mm_prompt.h"
#include "qvl/stop_strings.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

qvl_status engine_slot_open(engine_slot *s, int index, qvl_model *m, qvl_error *err) {
    memset(s, 0, sizeof *s);
    s->index = index;
    s->m = m;
    qvl_status st = qvl_seq_create(m, &s->seq, err);
    if (st != QVL_OK) return qvl_error_prefix(err, "slot %d", index);
    const size_t ctx = (size_t)qvl_model_ctx(s->m);
    const size_t vocab = (size_t)qvl_model_config(s->m)->text.vocab_size;
    s->keys = malloc(ctx * sizeof *s->keys);
    s->generated = malloc(ctx * sizeof *s->generated);
    s->logits = malloc(vocab * sizeof *s->logits);
    s->work = malloc(vocab * sizeof *s->work);
    if (!s->keys || !s->generated || !s->logits || !s->work)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory for slot %d", index);
    return QVL_OK;
}

void engine_slot_close(engine_slot *s) {
    qvl_seq_free(s->seq);
    qvl_sampler_free(s->sampler);
    free(s->keys);
    free(s->images);
    free(s->generated);
    free(s->logits);
    free(s->work);
    memset(s, 0, sizeof *s);
}

int64_t engine_slot_reusable(const engine_slot *s, const qvl_job *j) {
    const qvl_prefix cache = {.partition = &s->partition, .keys = s->keys, .n_keys = s->n_keys,
                                .images = s->images, .n_images = s->n_images};
    const qvl_prefix prompt = {.partition = &j->partition, .keys = j->keys, .n_keys = j->n_ids,
                                 .images = j->images, .n_images = j->req->n_pictures};
    return qvl_prefix_match(&cache, &prompt);
}

/* The cache now holds j's prompt: remember whose it is and its pictures. false: out of memory
 * (then the cache is forgotten: nothing is reused from it). */
static bool remember_prompt(engine_slot *s, const qvl_job *j) {
    const size_t n = j->req->n_pictures;
    qvl_prefix_image *images = realloc(s->images, (n + 1) * sizeof *images);
    if (!images) return false;
    memcpy(images, j->images, n * sizeof *images);
    s->images = images;
    s->n_images = n;
    s->partition = j->partition;
    return true;
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
    /* Counted before the client is woken: whoever holds an answer sees it in /metrics. */
    observe_completion(env, j->n_ids, cached, s->n_generated, how == QVL_FINISH_CANCELLED);
    qvl_job_finish(j, how, error);
    qvl_sampler_free(s->sampler);
    s->sampler = NULL;
    s->job = NULL;
    qvl_job_release(j);
}

/* Answer text from the UTF-8 stream. A NUL byte (a token of its own in byte-level BPE) becomes
 * U+FFFD: the answer is handled as a C string and cJSON cannot write "\u0000". */
static void emit_text(const char *text, size_t len, void *user) {
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

/* Positions of the prompt tokens [from, n) as 3 rows of n - from, computed over the whole
 * prompt (text from position 0, pictures as in get_rope_index): the cache's rope offset is not
 * trusted after truncation. */
static qvl_status suffix_positions(const qvl_model *m, const qvl_job *j, int64_t from,
                                   int32_t **out, qvl_error *err) {
    const qvl_qwen3vl_config *cfg = qvl_model_config(m);
    const qvl_engine_request *r = j->req;
    const int64_t n = j->n_ids, k = n - from;
    int32_t *all = malloc((size_t)n * 3 * sizeof *all);
    int32_t *part = malloc((size_t)k * 3 * sizeof *part);
    qvl_image_grid *grids = calloc(r->n_pictures + 1, sizeof *grids);
    qvl_status st = all && part && grids ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; st == QVL_OK && i < r->n_pictures; i++) grids[i] = qvl_picture_grid(&r->pictures[i]);
    if (st == QVL_OK)
        st = qvl_mrope_positions(j->ids, n, (int32_t)cfg->image_token_id, grids, r->n_pictures,
                                 cfg->vision.spatial_merge_size, 0, all, NULL, err);
    if (st == QVL_OK)
        for (int c = 0; c < 3; c++)
            memcpy(part + (size_t)c * (size_t)k, all + (size_t)c * (size_t)n + from,
                   (size_t)k * sizeof *part);
    free(all);
    free(grids);
    if (st != QVL_OK) {
        free(part);
        return st;
    }
    *out = part;
    return QVL_OK;
}

/* Run the vision encoder on the pictures from index `first` on (those not in the cache). */
static qvl_status encode_images(qvl_model *m, const qvl_engine_request *r, size_t first,
                                qvl_image_features *feats, qvl_error *err) {
    memset(feats, 0, sizeof *feats);
    size_t count = r->n_pictures - first;
    if (count == 0) return QVL_OK;
    const qvl_qwen3vl_config *cfg = qvl_model_config(m);
    const int64_t width = 3 * cfg->vision.temporal_patch_size * cfg->vision.patch_size *
                          cfg->vision.patch_size;
    int64_t rows = 0;
    for (size_t i = first; i < r->n_pictures; i++) rows += r->pictures[i].n_rows;
    float *pixels = malloc((size_t)(rows * width) * sizeof *pixels);
    qvl_image_grid *grids = malloc(count * sizeof *grids);
    qvl_status st = pixels && grids ? QVL_OK : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    int64_t at = 0;
    for (size_t i = first; st == QVL_OK && i < r->n_pictures; i++) {
        memcpy(pixels + at * width, r->pictures[i].pixels,
               (size_t)(r->pictures[i].n_rows * width) * sizeof *pixels);
        at += r->pictures[i].n_rows;
        grids[i - first] = qvl_picture_grid(&r->pictures[i]);
    }
    if (st == QVL_OK) st = qvl_model_encode_images(m, pixels, count, grids, feats, err);
    free(pixels);
    free(grids);
    return st;
}

static qvl_status prefill(engine_slot *s, qvl_job *j, const engine_slot_env *env, int64_t keep,
                          qvl_error *err) {
    const qvl_engine_request *r = j->req;
    qvl_model_truncate(s->m, keep);
    s->n_keys = keep;
    if (!remember_prompt(s, j)) {
        qvl_model_truncate(s->m, 0);
        s->n_keys = 0;
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    }
    size_t first = 0; /* first picture not in the kept prefix */
    while (first < r->n_pictures && j->images[first].at < keep) first++;
    double t0 = now_seconds();
    int32_t *pos = NULL;
    qvl_image_features feats;
    memset(&feats, 0, sizeof feats);
    qvl_status st = suffix_positions(s->m, j, keep, &pos, err);
    if (st == QVL_OK) st = encode_images(s->m, r, first, &feats, err);
    if (st == QVL_OK)
        st = qvl_model_eval_images(s->m, j->ids + keep, j->n_ids - keep, pos,
                                   feats.n_tokens > 0 ? &feats : NULL, false, s->logits, err);
    free(pos);
    qvl_image_features_free(&feats);
    if (st != QVL_OK) {
        /* What the cache holds after a failed evaluation is unknown: forget it all. */
        qvl_model_truncate(s->m, 0);
        s->n_keys = 0;
        return st;
    }
    memcpy(s->keys + keep, j->keys + keep, (size_t)(j->n_ids - keep) * sizeof *s->keys);
    s->n_keys = j->n_ids;
    s->row = s->logits;
    observe_prefill(env, j->n_ids - keep, now_seconds() - t0);
    st = qvl_sampler_create(&r->sampling, env->vocab, &s->sampler, err);
    if (st == QVL_OK) st = qvl_sampler_accept_prompt(s->sampler, j->ids, (size_t)j->n_ids, err);
    return st;
}

void engine_slot_start(engine_slot *s, qvl_job *j, const engine_slot_env *env) {
    qvl_model_set_seq(s->m, s->seq);
    s->job = j;
    s->n_generated = 0;
    s->decode_start = 0;
    s->searched = 0;
    s->oom = false;
    qvl_text_stream_init(&s->stream, emit_text, s);
    const int64_t room = qvl_model_ctx(s->m) - j->n_ids;
    s->max_new = j->req->max_tokens > 0 && j->req->max_tokens < room ? j->req->max_tokens : room;
    if (atomic_load(&j->cancel)) {
        engine_slot_end(s, env, QVL_FINISH_CANCELLED, NULL);
        return;
    }
    if (qvl_job_expired(j)) { /* waited past its deadline: nothing to answer with */
        observe_timeout(env);
        engine_slot_end(s, env, QVL_FINISH_TIMEOUT, QVL_JOB_TIMEOUT_MESSAGE);
        return;
    }
    const int64_t keep = engine_slot_reusable(s, j);
    qvl_error err = {0};
    const double t0 = now_seconds();
    const qvl_status st = prefill(s, j, env, keep, &err);
    /* The vision encoder has consumed the pixels (or failed): give their memory back now, not
     * when the answer is done. Only the engine thread reads them once the job is queued. */
    for (size_t i = 0; i < j->req->n_pictures; i++) qvl_picture_free(&j->req->pictures[i]);
    if (st != QVL_OK) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, err.msg);
        return;
    }
    s->decode_start = now_seconds();
    qvl_job_set_started(j, keep, s->decode_start - t0);
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
    const float fp = j->req->frequency_penalty;
    if (fp != 0.0f && s->n_generated > 0) {
        /* Once per occurrence: logit -= penalty x count. */
        memcpy(s->work, row, (size_t)env->vocab * sizeof *s->work);
        for (int64_t i = 0; i < s->n_generated; i++) s->work[s->generated[i]] -= fp;
        row = s->work;
    }
    int32_t id;
    if (qvl_sampler_sample(s->sampler, row, (size_t)env->vocab, &id, &err) != QVL_OK ||
        (!qvl_gen_config_is_eos(env->gen, id) &&
         qvl_sampler_accept_generated(s->sampler, id, &err) != QVL_OK)) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, err.msg);
        return false;
    }
    if (qvl_gen_config_is_eos(env->gen, id)) {
        engine_slot_end(s, env, QVL_FINISH_STOP, NULL);
        return false;
    }
    s->generated[s->n_generated++] = id;
    if (!qvl_tokenizer_is_special(env->tok, id)) {
        const char *bytes;
        size_t len;
        if (qvl_tokenizer_token_to_piece(env->tok, id, &bytes, &len, NULL) == QVL_OK)
            qvl_text_stream_feed(&s->stream, bytes, len);
    }
    if (s->oom) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, "out of memory for the answer");
        return false;
    }
    if (check_stops(s)) {
        s->stream.n_pending = 0; /* the cut text ends before any unfinished character */
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

void engine_slot_feed_failed(engine_slot *s, const engine_slot_env *env, const char *error) {
    qvl_model_set_seq(s->m, s->seq);
    qvl_model_truncate(s->m, 0); /* what the failed step left in the cache is unknown */
    s->n_keys = 0;
    engine_slot_end(s, env, QVL_FINISH_ERROR, error);
}
