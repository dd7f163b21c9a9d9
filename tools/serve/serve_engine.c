/* Loading, the job queue and the scheduling loop. */
#define _XOPEN_SOURCE 700

#include "serve_engine.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/gen_config.h"
#include "qvl/image_preprocess.h"
#include "qvl/log.h"
#include "qvl/mm_prompt.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/tokenizer.h"
#include "serve_prefix.h"
#include "serve_slot.h"

struct serve_engine {
    const serve_config *cfg;
    serve_metrics *metrics;
    pthread_t thread;
    bool thread_started;

    pthread_mutex_t mu; /* state, queue, slot assignment */
    pthread_cond_t cv;
    serve_state state;
    char error[1024];
    serve_job **queue; /* ring of cfg->queue + cfg->parallel entries */
    size_t q_cap, q_head, q_len;
    int idle;          /* slots without a job */

    /* Set while LOADING by the engine thread; read-only afterwards. */
    qvl_tokenizer *tok;
    pthread_mutex_t tok_mu; /* encode is not thread-safe (qvl/tokenizer.h) */
    qvl_gen_config gen;
    qvl_sampling_params defaults;
    qvl_preprocess_config pc;
    bool has_vision;
    int32_t pad_id;
    char image_dir[PATH_MAX];
    qvl_model *model; /* one copy of the weights; each slot decodes its own sequence on it */
    serve_slot *slots;
    int n_slots;
    /* One batched decode step's sequences, token ids, slots and logits [n_slots, vocab]. */
    qvl_seq **batch_seqs;
    int32_t *batch_ids;
    int *batch_slot;
    float *batch_logits;
    serve_slot_env env;
    uint64_t tick;

    serve_budget budget; /* picture memory (--max-image-memory); closed when stopping */
    bool budget_ready;
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Slot i's next token joins the step's batch, unless its job ended (then the slot is idle). */
static int add_to_batch(serve_engine *e, int i, int n) {
    int32_t id;
    if (!serve_slot_next(&e->slots[i], &e->env, &id)) return n;
    e->batch_ids[n] = id;
    e->batch_seqs[n] = e->slots[i].seq;
    e->batch_slot[n] = i;
    return n + 1;
}

/* One token for the n slots of the batch, through the model in one batched step: the weights
 * are read once for all of them (qvl_model_decode_batch). Each slot keeps its row of
 * batch_logits, which the next step's sampling reads before the next decode overwrites it. */
static void decode_batch(serve_engine *e, int n) {
    if (n == 0) return;
    qvl_error err = {0};
    const double t0 = now_seconds();
    qvl_status st = qvl_model_decode_batch(e->model, e->batch_seqs, e->batch_ids, (size_t)n,
                                           e->batch_logits, &err);
    if (st == QVL_OK) serve_metrics_decode(e->metrics, n, now_seconds() - t0);
    const size_t vocab = (size_t)e->env.vocab;
    for (int k = 0; k < n; k++) {
        serve_slot *s = &e->slots[e->batch_slot[k]];
        if (st == QVL_OK) serve_slot_fed(s, e->batch_ids[k], e->batch_logits + (size_t)k * vocab);
        else serve_slot_feed_failed(s, &e->env, err.msg);
    }
}

static void set_state(serve_engine *e, serve_state st, const char *error) {
    pthread_mutex_lock(&e->mu);
    if (e->state != SERVE_STOPPING) e->state = st;
    if (error) snprintf(e->error, sizeof e->error, "%s", error);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static qvl_status load(serve_engine *e, qvl_error *err) {
    const serve_config *c = e->cfg;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tokenizer.json", c->model);
    qvl_status st = qvl_tokenizer_load(path, &e->tok, err);
    if (st != QVL_OK) return st;
    snprintf(path, sizeof path, "%s/generation_config.json", c->model);
    st = qvl_gen_config_load(path, &e->gen, err);
    if (st == QVL_E_NOT_FOUND) {
        QVL_LOG_I("%s not found: greedy decoding, no stop token", path);
        st = QVL_OK;
    }
    if (st != QVL_OK) return st;
    e->slots = calloc((size_t)c->parallel, sizeof *e->slots);
    if (!e->slots) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_model_options mo = {.plugins_path = c->plugins, .backend_name = c->backend,
                            .ctx = c->ctx, .weight_dtype = c->weights,
                            .backend_options = c->backend_options, .gpu_layers = c->gpu_layers,
                            .cpu_backend_name = c->cpu_backend,
                            .vision_backend_name = c->vision_backend};
    st = qvl_model_open(c->model, &mo, &e->model, err);
    if (st != QVL_OK) return st;
    for (int i = 0; i < c->parallel; i++) {
        st = serve_slot_open(&e->slots[i], i, e->model, err);
        e->n_slots = i + 1;
        if (st != QVL_OK) return st;
        QVL_LOG_I("slot %d of %d ready", i + 1, c->parallel);
    }
    const qvl_qwen3vl_config *cfg = qvl_model_config(e->model);
    const int32_t vocab = (int32_t)cfg->text.vocab_size;
    qvl_sampling_params_default(&e->defaults);
    qvl_gen_config_sampling_params(&e->gen, &e->defaults);
    /* Rows past the tokenizer's last id are untrained padding: never sampled (as qvl run). */
    e->defaults.n_valid = qvl_tokenizer_vocab_size(e->tok);
    if (e->defaults.n_valid > vocab) e->defaults.n_valid = vocab;
    e->env = (serve_slot_env){.tok = e->tok, .gen = &e->gen, .metrics = e->metrics, .vocab = vocab};
    e->batch_seqs = calloc((size_t)e->n_slots, sizeof *e->batch_seqs);
    e->batch_ids = calloc((size_t)e->n_slots, sizeof *e->batch_ids);
    e->batch_slot = calloc((size_t)e->n_slots, sizeof *e->batch_slot);
    e->batch_logits = malloc((size_t)e->n_slots * (size_t)vocab * sizeof *e->batch_logits);
    if (!e->batch_seqs || !e->batch_ids || !e->batch_slot || !e->batch_logits)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    e->has_vision = cfg->has_vision && cfg->image_token_id >= 0;
    e->pad_id = (int32_t)cfg->image_token_id;
    if (e->has_vision) {
        snprintf(path, sizeof path, "%s/preprocessor_config.json", c->model);
        st = qvl_preprocess_config_load(path, &cfg->vision, &e->pc, err);
        if (st == QVL_E_NOT_FOUND) {
            qvl_preprocess_config_default(&cfg->vision, &e->pc);
            st = QVL_OK;
        }
        if (st != QVL_OK) return st;
        /* No picture may take more tokens than a slot's context holds. */
        int64_t cap = qvl_preprocess_tokens_to_pixels(&e->pc, c->ctx);
        if (cap > 0 && cap < e->pc.max_pixels) e->pc.max_pixels = cap;
        if (e->pc.min_pixels > e->pc.max_pixels) e->pc.min_pixels = e->pc.max_pixels;
    }
    return QVL_OK;
}

static void update_gauges(serve_engine *e) {
    serve_metrics_set_queue(e->metrics, (int64_t)e->q_len, e->n_slots - e->idle);
}

/* Jobs whose client left, or whose deadline passed, while they waited end here, freeing their
 * place in the queue. Under mu. */
static void purge_cancelled(serve_engine *e) {
    size_t kept = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        serve_job *j = e->queue[(e->q_head + i) % e->q_cap];
        if (atomic_load(&j->cancel)) {
            serve_metrics_completion(e->metrics, j->n_ids, 0, 0, 1);
            serve_job_finish(j, SERVE_FINISH_CANCELLED, NULL);
            serve_job_release(j);
        } else if (serve_job_expired(j)) {
            serve_metrics_completion(e->metrics, j->n_ids, 0, 0, 0);
            serve_metrics_timeout(e->metrics);
            serve_job_finish(j, SERVE_FINISH_TIMEOUT, SERVE_TIMEOUT_MESSAGE);
            serve_job_release(j);
        } else {
            e->queue[(e->q_head + kept++) % e->q_cap] = j;
        }
    }
    e->q_len = kept;
}

/* The idle slot whose cache shares the longest prefix with j; ties go to the least recently
 * used. Under mu. */
static serve_slot *pick_slot(serve_engine *e, const serve_job *j) {
    serve_slot *best = NULL;
    int64_t best_keep = -1;
    for (int i = 0; i < e->n_slots; i++) {
        serve_slot *s = &e->slots[i];
        if (s->job) continue;
        int64_t keep = serve_slot_reusable(s, j);
        if (keep > best_keep || (keep == best_keep && s->last_used < best->last_used)) {
            best = s;
            best_keep = keep;
        }
    }
    return best;
}

/* Queued jobs into idle slots (recounted first: the step's sampling may have ended jobs).
 * Returns how many were claimed into starting[]. Under mu. */
static int claim_jobs(serve_engine *e, serve_slot **starting) {
    int idle = 0;
    for (int i = 0; i < e->n_slots; i++) idle += e->slots[i].job == NULL;
    e->idle = idle;
    purge_cancelled(e);
    int n_starting = 0;
    while (e->q_len > 0 && e->idle > 0) {
        serve_job *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->q_cap;
        e->q_len--;
        serve_slot *s = pick_slot(e, j);
        s->job = j; /* claimed under mu; serve_slot_start runs outside it */
        s->last_used = ++e->tick;
        e->idle--;
        starting[n_starting++] = s;
    }
    update_gauges(e);
    return n_starting;
}

/* One scheduling round: every busy slot samples its next token, then queued jobs take the
 * slots that are idle now (prefill, first token), and all of them decode as one batch. Jobs
 * that end this round are replaced in it, so under load the batch keeps its size and the
 * model keeps its batched graph (it rebuilds one when the number of rows changes). */
static void engine_round(serve_engine *e, serve_slot **starting) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].job) n = add_to_batch(e, i, n);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        const int n_starting = claim_jobs(e, starting);
        pthread_mutex_unlock(&e->mu);
        if (n_starting == 0) break;
        for (int k = 0; k < n_starting; k++) {
            serve_slot *s = starting[k];
            serve_job *j = s->job;
            s->job = NULL;
            serve_slot_start(s, j, &e->env);
            /* A job that ends at its first token (eos, max_tokens 1) frees the slot again:
             * the loop claims the next queued one for it. */
            if (s->job) n = add_to_batch(e, s->index, n);
        }
    }
    decode_batch(e, n);
    pthread_mutex_lock(&e->mu);
    int idle = 0;
    for (int i = 0; i < e->n_slots; i++) idle += e->slots[i].job == NULL;
    e->idle = idle;
    update_gauges(e);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg) {
    serve_engine *e = arg;
    qvl_error err = {0};
    if (load(e, &err) != QVL_OK) {
        set_state(e, SERVE_FAILED, err.msg);
        return NULL;
    }
    pthread_mutex_lock(&e->mu);
    e->idle = e->n_slots;
    pthread_mutex_unlock(&e->mu);
    set_state(e, SERVE_READY, NULL);
    serve_slot **starting = calloc((size_t)e->n_slots, sizeof *starting);
    if (!starting) {
        set_state(e, SERVE_FAILED, "out of memory");
        return NULL;
    }
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (e->state == SERVE_READY && e->q_len == 0 && e->idle == e->n_slots)
            pthread_cond_wait(&e->cv, &e->mu);
        const bool serving = e->state == SERVE_READY;
        pthread_mutex_unlock(&e->mu);
        if (!serving) break;
        engine_round(e, starting);
    }
    free(starting);
    return NULL;
}

serve_engine *serve_engine_start(const serve_config *cfg, serve_metrics *metrics, qvl_error *err) {
    serve_engine *e = calloc(1, sizeof *e);
    if (!e) {
        qvl_fail(err, QVL_E_NOMEM, "out of memory");
        return NULL;
    }
    e->cfg = cfg;
    e->metrics = metrics;
    e->q_cap = (size_t)cfg->queue + (size_t)cfg->parallel;
    e->queue = calloc(e->q_cap, sizeof *e->queue);
    e->budget_ready = serve_budget_init(&e->budget, cfg->max_image_memory);
    if (!e->budget_ready) {
        qvl_fail(err, QVL_E_NOMEM, "cannot make the picture memory budget");
        free(e->queue);
        free(e);
        return NULL;
    }
    serve_metrics_set_image_budget(metrics, &e->budget);
    if (cfg->image_dir && !realpath(cfg->image_dir, e->image_dir)) {
        qvl_fail(err, QVL_E_IO, "--image-dir %s: no such directory", cfg->image_dir);
        serve_metrics_set_image_budget(metrics, NULL);
        serve_budget_destroy(&e->budget);
        free(e->queue);
        free(e);
        return NULL;
    }
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->tok_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->queue || pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        qvl_fail(err, QVL_E_NOMEM, "cannot start the engine thread");
        serve_engine_free(e);
        return NULL;
    }
    e->thread_started = true;
    return e;
}

serve_state serve_engine_state(serve_engine *e) {
    pthread_mutex_lock(&e->mu);
    serve_state st = e->state;
    pthread_mutex_unlock(&e->mu);
    return st;
}

const char *serve_engine_error(serve_engine *e) { return e->error; }

serve_budget *serve_engine_image_budget(serve_engine *e) { return &e->budget; }

void serve_engine_parse_ctx(serve_engine *e, serve_parse_ctx *out) {
    out->defaults = &e->defaults;
    out->pc = e->has_vision ? &e->pc : NULL;
    out->image_dir = e->cfg->image_dir ? e->image_dir : NULL;
    out->max_images = e->cfg->max_images;
    out->max_file_bytes = e->cfg->max_body;
    out->ctx = e->cfg->ctx;
    out->guard = NULL; /* the connection sets its own */
}

static bool refuse(serve_bad *bad, int status, const char *code, const char *msg) {
    bad->status = status;
    bad->code = code;
    bad->param[0] = '\0';
    snprintf(bad->message, sizeof bad->message, "%.500s", msg);
    return false;
}

/* Per token, what its KV cache entry depends on (serve_prefix.h): the id, or for the k-th pad
 * of a picture the picture's digest and k. images gets each picture's pads and digest. */
static void make_keys(const int32_t *ids, int64_t n, int32_t pad, const serve_request *r,
                      uint64_t *keys, serve_prefix_image *images) {
    size_t img = 0;
    int64_t k = 0;
    for (int64_t t = 0; t < n; t++) {
        if (ids[t] == pad && img < r->n_images) {
            const serve_image *im = &r->images[img];
            if (k == 0) {
                images[img].at = t;
                images[img].n_tokens = im->n_tokens;
                memcpy(images[img].digest, im->digest, sizeof images[img].digest);
            }
            keys[t] = serve_prefix_pad_key(im->digest, k);
            if (++k == im->n_tokens) {
                img++;
                k = 0;
            }
        } else {
            keys[t] = serve_prefix_text_key(ids[t]);
        }
    }
}

bool serve_engine_prepare(serve_engine *e, serve_request *req, serve_job **out, serve_bad *bad) {
    *out = NULL;
    int32_t *ids = NULL, *expanded = NULL;
    size_t count = 0;
    qvl_error err = {0};
    pthread_mutex_lock(&e->tok_mu);
    qvl_status st = qvl_tokenizer_encode(e->tok, req->prompt, strlen(req->prompt), &ids, &count,
                                         &err);
    pthread_mutex_unlock(&e->tok_mu);
    int64_t n = (int64_t)count;
    /* Also without pictures: a pad token in the text (the parser refuses the ones it can see
     * in the rendered prompt; this is the tokenizer's own count) has no pixels behind it, and
     * reaching a slot it would fail there and cost the slot its cache. */
    if (st == QVL_OK) {
        int64_t *counts = malloc((req->n_images + 1) * sizeof *counts);
        if (!counts) st = qvl_fail(&err, QVL_E_NOMEM, "out of memory");
        for (size_t i = 0; st == QVL_OK && i < req->n_images; i++) counts[i] = req->images[i].n_tokens;
        if (st == QVL_OK)
            st = qvl_expand_image_pads(ids, n, e->pad_id, counts, req->n_images, &expanded, &n,
                                       &err);
        free(counts);
        free(ids);
        ids = expanded;
    }
    if (st != QVL_OK) {
        free(ids);
        serve_request_free(req);
        /* A text that spells out the picture placeholder token breaks the count. */
        return refuse(bad, st == QVL_E_NOMEM ? 500 : 400, NULL, err.msg);
    }
    const int64_t ctx = e->cfg->ctx;
    if (n >= ctx) {
        char msg[256];
        snprintf(msg, sizeof msg, "the prompt has %lld tokens, but a slot's context (--ctx) holds "
                 "%lld including the answer", (long long)n, (long long)ctx);
        free(ids);
        serve_request_free(req);
        return refuse(bad, 400, "context_length_exceeded", msg);
    }
    uint64_t *keys = malloc((size_t)n * sizeof *keys);
    serve_prefix_image *images = calloc(req->n_images + 1, sizeof *images);
    serve_job *j = keys && images ? serve_job_create(req, ids, keys, images, n) : NULL;
    if (!j) {
        free(ids);
        free(keys);
        free(images);
        serve_request_free(req);
        return refuse(bad, 500, NULL, "out of memory");
    }
    make_keys(ids, n, e->pad_id, req, keys, images);
    serve_partition_make(SERVE_PARTITION_NO_KEY, req->cache_salt, &j->partition);
    *out = j;
    return true;
}

int serve_engine_submit(serve_engine *e, serve_job *j) {
    pthread_mutex_lock(&e->mu);
    int rc = 0;
    if (e->state != SERVE_READY) {
        rc = 503;
    } else if (e->q_len >= (size_t)e->cfg->queue + (size_t)e->idle || e->q_len >= e->q_cap) {
        rc = 429;
    } else {
        serve_job_retain(j);
        e->queue[(e->q_head + e->q_len) % e->q_cap] = j;
        e->q_len++;
        update_gauges(e);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

void serve_engine_stop(serve_engine *e) {
    if (!e) return;
    /* Decodes and waits for picture memory end first: they make no connection thread wait. */
    if (e->budget_ready) serve_budget_close(&e->budget);
    pthread_mutex_lock(&e->mu);
    e->state = SERVE_STOPPING;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    e->thread_started = false;
    static const char bye[] = "the server is shutting down";
    for (int i = 0; i < e->n_slots; i++) serve_slot_end(&e->slots[i], &e->env, SERVE_FINISH_ERROR, bye);
    pthread_mutex_lock(&e->mu);
    while (e->q_len > 0) {
        serve_job *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->q_cap;
        e->q_len--;
        serve_job_finish(j, SERVE_FINISH_ERROR, bye);
        serve_job_release(j);
    }
    pthread_mutex_unlock(&e->mu);
}

void serve_engine_free(serve_engine *e) {
    if (!e) return;
    serve_engine_stop(e);
    for (int i = 0; i < e->n_slots; i++) serve_slot_close(&e->slots[i]);
    free(e->slots);
    free(e->batch_seqs);
    free(e->batch_ids);
    free(e->batch_slot);
    free(e->batch_logits);
    qvl_model_close(e->model);
    qvl_tokenizer_free(e->tok);
    free(e->queue);
    serve_metrics_set_image_budget(e->metrics, NULL);
    if (e->budget_ready) serve_budget_destroy(&e->budget);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->tok_mu);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
