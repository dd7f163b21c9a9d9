/* A slot's prompt: prefix reuse, the pictures and videos through the vision encoder, then the
 * prompt's tokens in chunks.
 *
 * Chunks start at fixed places (keep, keep + chunk, keep + 2 chunk, ...), so a job's chunks do
 * not depend on what else the engine runs: the same prompt gives the same cache and the same
 * first token alone or beside others. The vision encoder runs whole, before the first chunk
 * (its features are cut into the chunks that hold the pictures' pad tokens). */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "picture_rules.h"
#include "qvl/log.h"
#include "qvl/mm_prompt.h"
#include "slot.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The cache is about to hold j's prompt: remember whose it is and its pictures. false: out of
 * memory (then the cache is forgotten: nothing is reused from it). */
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
    bool *is_video = calloc(r->n_pictures + 1, sizeof *is_video);
    qvl_status st = all && part && grids && is_video ? QVL_OK
                                                     : qvl_fail(err, QVL_E_NOMEM, "out of memory");
    for (size_t i = 0; st == QVL_OK && i < r->n_pictures; i++) {
        grids[i] = qvl_picture_grid(&r->pictures[i]);
        is_video[i] = r->pictures[i].is_video;
    }
    /* Text alone: every row is the token's index (a text-only model has no vision settings
     * for the general rule to read). */
    for (int64_t t = 0; st == QVL_OK && r->n_pictures == 0 && t < n; t++)
        all[t] = all[n + t] = all[2 * n + t] = (int32_t)t;
    if (st == QVL_OK && r->n_pictures > 0)
        st = qvl_mrope_positions_media(j->ids, n, (int32_t)cfg->image_token_id,
                                       (int32_t)cfg->video_token_id, grids, is_video,
                                       r->n_pictures, cfg->vision.spatial_merge_size, 0, all,
                                       NULL, err);
    if (st == QVL_OK) qvl_positions_slice(all, n, from, k, part);
    free(all);
    free(grids);
    free(is_video);
    if (st != QVL_OK) {
        free(part);
        return st;
    }
    *out = part;
    return QVL_OK;
}

/* The encoder's progress on one item, for the observer's encode_progress. */
typedef struct encode_progress_ctx {
    const engine_slot_env *env;
    size_t index, count;
} encode_progress_ctx;

static void on_encoder_progress(void *arg, double done, double total) {
    const encode_progress_ctx *c = arg;
    const qvl_engine_observer *o = c->env->observer;
    o->encode_progress(o->arg, c->index, c->count, total > 0 ? done / total : 1.0);
}

/* Run the vision encoder on the pictures from index `first` on (those not in the cache), one
 * at a time: each item's time is its own (qvl run reports it per picture), and no item waits
 * for a copy of all the pixels into one buffer. */
static qvl_status encode_images(qvl_model *m, const engine_slot_env *env,
                                const qvl_engine_request *r, size_t first,
                                qvl_image_features *feats, qvl_error *err) {
    memset(feats, 0, sizeof *feats);
    const size_t count = r->n_pictures - first;
    qvl_status st = QVL_OK;
    for (size_t i = first; st == QVL_OK && i < r->n_pictures; i++) {
        const qvl_picture *p = &r->pictures[i];
        const qvl_image_grid grid = qvl_picture_grid(p);
        observe_encode(env, i - first, count, p->n_tokens, p->is_video, -1.0);
        const double t0 = now_seconds();
        qvl_image_features one = {0};
        encode_progress_ctx pc = {env, i - first, count};
        if (env->observer->encode_progress)
            qvl_model_set_vision_progress(m, on_encoder_progress, &pc);
        st = qvl_model_encode_images(m, p->pixels, 1, &grid, &one, err);
        qvl_model_set_vision_progress(m, NULL, NULL); /* pc ends with this iteration */
        if (st != QVL_OK) {
            qvl_image_features_free(&one);
            break;
        }
        observe_encode(env, i - first, count, p->n_tokens, p->is_video, now_seconds() - t0);
        st = qvl_image_features_append(feats, &one, err);
    }
    if (st != QVL_OK) qvl_image_features_free(feats);
    return st;
}

void engine_slot_prefill_drop(engine_slot *s) {
    free(s->pos);
    free(s->pos_part);
    s->pos = s->pos_part = NULL;
    qvl_image_features_free(&s->feats);
    s->prefilling = false;
}

/* What the cache holds after a failed evaluation is unknown: forget it all, end the job. */
static void prefill_failed(engine_slot *s, const engine_slot_env *env, const char *msg) {
    qvl_model_truncate(s->m, 0);
    s->n_keys = 0;
    engine_slot_end(s, env, QVL_FINISH_ERROR, msg);
}

static qvl_status begin(engine_slot *s, const engine_slot_env *env, qvl_job *j,
                        qvl_error *err) {
    const qvl_engine_request *r = j->req;
    qvl_model_truncate(s->m, s->keep);
    s->n_keys = s->keep;
    if (!remember_prompt(s, j)) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    size_t first = 0; /* first picture not in the kept prefix */
    while (first < r->n_pictures && j->images[first].at < s->keep) first++;
    const double t0 = now_seconds();
    qvl_status st = suffix_positions(s->m, j, s->keep, &s->pos, err);
    const int64_t rest = j->n_ids - s->keep;
    s->pos_part = st == QVL_OK ? malloc((size_t)rest * 3 * sizeof *s->pos_part) : NULL;
    if (st == QVL_OK && !s->pos_part) st = qvl_fail(err, QVL_E_NOMEM, "out of memory");
    if (st == QVL_OK) st = encode_images(s->m, env, r, first, &s->feats, err);
    s->prefill_seconds = now_seconds() - t0;
    return st;
}

/* The prefix of j that donor's cache holds, copied into s's cache when it is longer than
 * what s's own cache holds (s->keep). A failed copy leaves s's cache empty: the prompt is then
 * prefilled whole. */
static void copy_prefix(engine_slot *s, const qvl_job *j, const engine_slot *donor) {
    const int64_t keep = engine_slot_reusable(donor, j);
    if (keep <= s->keep) return;
    qvl_error err = {0};
    if (qvl_seq_copy_prefix(s->m, s->seq, donor->seq, keep, &err) != QVL_OK) {
        QVL_LOG_W("slot %d: %s; prefilling the prompt instead", s->index, err.msg);
        s->n_keys = 0;
        s->keep = 0;
        return;
    }
    /* The keys of the copied entries are j's (that is what matched); begin() records the
     * partition and pictures of j as the cache's. */
    memcpy(s->keys, j->keys, (size_t)keep * sizeof *s->keys);
    s->n_keys = keep;
    s->keep = keep;
}

void engine_slot_start(engine_slot *s, qvl_job *j, const engine_slot_env *env,
                       const engine_slot *donor) {
    qvl_model_set_seq(s->m, s->seq);
    s->job = j;
    s->n_generated = 0;
    s->decode_start = 0;
    s->searched = 0;
    s->oom = false;
    qvl_text_stream_init(&s->stream, engine_slot_emit_text, s);
    /* The last token is sampled from a full cache and never fed: one more than the free
     * positions (as qvl run always did; engine_slot_next ends at the full cache too). */
    const int64_t room = qvl_model_ctx(s->m) - j->n_ids + 1;
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
    /* every prompt position's logits are wanted: none may come from the cache */
    const bool all = j->req->prompt_logits;
    s->keep = all ? 0 : engine_slot_reusable(s, j);
    if (donor && !all) copy_prefix(s, j, donor);
    s->prefill_at = s->keep;
    s->feat_row = 0;
    s->prefilling = true;
    qvl_error err = {0};
    const qvl_status st = begin(s, env, j, &err);
    /* The vision encoder has consumed the pixels (or failed): give their memory back now, not
     * when the answer is done. Only the engine thread reads them once the job is queued. */
    for (size_t i = 0; i < j->req->n_pictures; i++) qvl_picture_free(&j->req->pictures[i]);
    if (st != QVL_OK) prefill_failed(s, env, err.msg);
}

int64_t engine_slot_chunk_length(const engine_slot *s, int64_t chunk) {
    const int64_t left = s->job ? s->job->n_ids - s->prefill_at : 0;
    return chunk > 0 && chunk < left ? chunk : left;
}

/* The prompt is in the cache: the first token's logits are in s->logits. */
static void finish_prefill(engine_slot *s, const engine_slot_env *env) {
    qvl_job *j = s->job;
    const qvl_engine_request *r = j->req;
    s->row = s->logits;
    engine_slot_prefill_drop(s);
    observe_prefill(env, j->n_ids - s->keep, s->prefill_seconds);
    qvl_error err = {0};
    /* the sampler applies the frequency penalty with the other penalties (qvl/sampling.h) */
    qvl_sampling_params sp = r->sampling;
    sp.frequency_penalty = r->frequency_penalty;
    qvl_status st = qvl_sampler_create(&sp, env->vocab, &s->sampler, &err);
    if (st == QVL_OK) st = qvl_sampler_accept_prompt(s->sampler, j->ids, (size_t)j->n_ids, &err);
    if (st == QVL_OK) st = engine_slot_constrain_begin(s, env, &err);
    if (st != QVL_OK) {
        engine_slot_end(s, env, QVL_FINISH_ERROR, err.msg);
        return;
    }
    s->decode_start = now_seconds();
    qvl_job_set_started(j, s->keep, s->prefill_seconds);
}

/* The checks before a chunk: false when the job ended (cancelled or expired between chunks:
 * the chunks so far stay cached, reusable). */
static bool chunk_may_run(engine_slot *s, const engine_slot_env *env) {
    qvl_job *j = s->job;
    if (!j || !s->prefilling) return false;
    if (atomic_load(&j->cancel)) {
        engine_slot_end(s, env, QVL_FINISH_CANCELLED, NULL);
        return false;
    }
    if (qvl_job_expired(j)) {
        observe_timeout(env);
        engine_slot_end(s, env, QVL_FINISH_TIMEOUT, QVL_JOB_PREFILL_TIMEOUT_MESSAGE);
        return false;
    }
    return true;
}

/* Encoder rows (picture and video pads) among the prompt tokens [at, at + len) that the
 * chunk takes from feats (items before keep are not in feats). */
static int64_t chunk_pads(const engine_slot *s, int64_t at, int64_t len) {
    const qvl_job *j = s->job;
    const qvl_qwen3vl_config *cfg = qvl_model_config(s->m);
    const int32_t pad = (int32_t)cfg->image_token_id, video_pad = (int32_t)cfg->video_token_id;
    int64_t pads = 0;
    for (int64_t i = at; s->feats.n_tokens > 0 && i < at + len; i++)
        pads += j->ids[i] == pad || (video_pad >= 0 && j->ids[i] == video_pad);
    return pads;
}

/* The chunk [at, at + len) is in the cache: keys, progress, and after the last chunk the first
 * token's start. */
static void chunk_done(engine_slot *s, const engine_slot_env *env, int64_t len, int64_t pads,
                       double seconds) {
    qvl_job *j = s->job;
    const int64_t at = s->prefill_at;
    memcpy(s->keys + at, j->keys + at, (size_t)len * sizeof *s->keys);
    s->n_keys = at + len;
    s->prefill_at = at + len;
    s->feat_row += pads;
    s->prefill_seconds += seconds;
    if (s->prefill_at < j->n_ids) return;
    observe_prefill_step(env, j->n_ids, j->n_ids, 0);
    finish_prefill(s, env);
}

/* A chunk's progress for the observer's prefill_progress: the chunk of each of the n slots
 * prefilling in one run (their own done / total / next; one share). */
typedef struct chunk_progress_ctx {
    const engine_slot_env *env;
    int n;
    int64_t done[QVL_TEXT_MAX_SEQS], total[QVL_TEXT_MAX_SEQS], next[QVL_TEXT_MAX_SEQS];
} chunk_progress_ctx;

static void on_chunk_progress(void *arg, double done, double total) {
    const chunk_progress_ctx *c = arg;
    const qvl_engine_observer *o = c->env->observer;
    for (int i = 0; i < c->n; i++)
        o->prefill_progress(o->arg, c->done[i], c->total[i], c->next[i],
                            total > 0 ? done / total : 1.0);
}

/* Reports the run's progress from here until progress_off (when the front end asks for it). */
static void progress_on(qvl_model *m, const engine_slot_env *env, chunk_progress_ctx *c) {
    if (env->observer->prefill_progress && c->n > 0)
        qvl_model_set_prefill_progress(m, on_chunk_progress, c);
}
static void progress_off(qvl_model *m) { qvl_model_set_prefill_progress(m, NULL, NULL); }

void engine_slot_prefill(engine_slot *s, const engine_slot_env *env, int64_t chunk) {
    if (!chunk_may_run(s, env)) return;
    qvl_job *j = s->job;
    qvl_model_set_seq(s->m, s->seq);
    const double t0 = now_seconds();
    const int64_t at = s->prefill_at, len = engine_slot_chunk_length(s, chunk);
    observe_prefill_step(env, at, j->n_ids, len);
    const int64_t rest = j->n_ids - s->keep, pads = chunk_pads(s, at, len);
    qvl_image_features part;
    qvl_error err = {0};
    qvl_status st = qvl_image_features_slice(&s->feats, s->feat_row, pads, &part, &err);
    qvl_positions_slice(s->pos, rest, at - s->keep, len, s->pos_part);
    chunk_progress_ctx pc = {.env = env, .n = 1, .done = {at}, .total = {j->n_ids}, .next = {len}};
    progress_on(s->m, env, &pc);
    if (st == QVL_OK)
        st = qvl_model_eval_images(s->m, j->ids + at, len, s->pos_part,
                                   part.n_tokens > 0 ? &part : NULL, j->prompt_logits != NULL,
                                   j->prompt_logits ? j->prompt_logits + at * env->vocab
                                                    : s->logits, &err);
    progress_off(s->m);
    if (st == QVL_OK && j->prompt_logits) /* the last row is the next token's */
        memcpy(s->logits, j->prompt_logits + (at + len - 1) * env->vocab,
               (size_t)env->vocab * sizeof *s->logits);
    free(part.deepstack);
    if (st != QVL_OK) {
        prefill_failed(s, env, err.msg);
        return;
    }
    chunk_done(s, env, len, pads, now_seconds() - t0);
}

bool engine_slot_chunk_batchable(const engine_slot *s, int64_t chunk) {
    if (!s->job || !s->prefilling || s->job->prompt_logits) return false;
    return chunk_pads(s, s->prefill_at, engine_slot_chunk_length(s, chunk)) == 0;
}

void engine_slots_prefill(engine_slot *const *group, int n, const engine_slot_env *env,
                          int64_t chunk) {
    engine_slot *run[QVL_TEXT_MAX_SEQS];
    qvl_seq *seqs[QVL_TEXT_MAX_SEQS];
    const int32_t *ids[QVL_TEXT_MAX_SEQS], *pos[QVL_TEXT_MAX_SEQS];
    int64_t lens[QVL_TEXT_MAX_SEQS];
    chunk_progress_ctx pc = {.env = env};
    int k = 0;
    for (int i = 0; i < n && i < QVL_TEXT_MAX_SEQS; i++) {
        engine_slot *s = group[i];
        if (!chunk_may_run(s, env)) continue;
        qvl_job *j = s->job;
        const int64_t at = s->prefill_at, len = engine_slot_chunk_length(s, chunk);
        observe_prefill_step(env, at, j->n_ids, len);
        qvl_positions_slice(s->pos, j->n_ids - s->keep, at - s->keep, len, s->pos_part);
        run[k] = s;
        seqs[k] = s->seq;
        ids[k] = j->ids + at;
        pos[k] = s->pos_part;
        pc.done[k] = at, pc.total[k] = j->n_ids, pc.next[k] = len;
        lens[k++] = len;
    }
    if (k == 0) return;
    pc.n = k;
    const double t0 = now_seconds();
    qvl_error err = {0};
    float *logits = malloc((size_t)k * (size_t)env->vocab * sizeof *logits);
    progress_on(run[0]->m, env, &pc);
    qvl_status st = logits ? qvl_model_prefill_batch(run[0]->m, seqs, ids, pos, lens, (size_t)k,
                                                     logits, &err)
                           : qvl_fail(&err, QVL_E_NOMEM, "out of memory");
    progress_off(run[0]->m);
    const double seconds = now_seconds() - t0;
    int64_t rows = 0;
    for (int i = 0; i < k; i++) rows += lens[i];
    for (int i = 0; i < k; i++) {
        if (st != QVL_OK) {
            prefill_failed(run[i], env, err.msg);
            continue;
        }
        memcpy(run[i]->logits, logits + (size_t)i * env->vocab,
               (size_t)env->vocab * sizeof *logits);
        /* each slot's share of the run by its rows: the prompt's tok/s is the batch's, and
         * the server's prefill seconds add up to the wall time */
        chunk_done(run[i], env, lens[i], 0, seconds * (double)lens[i] / (double)rows);
    }
    free(logits);
}
