/* Loading, the job queue and the scheduling loop. */
#define _XOPEN_SOURCE 700

#include "engine_internal.h"

/* An A/B switch of the environment set to "0". */
static bool env_off(const char *name) {
    const char *v = getenv(name);
    return v && strcmp(v, "0") == 0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Slot i's next token joins the step's batch, unless its job ended (then the slot is idle). */
/* What /slots shows, from the slots as the engine thread left them. Under mu. */
static void record_slots(qvl_engine *e) {
    for (int i = 0; i < e->n_slots; i++) {
        const engine_slot *s = &e->slots[i];
        e->info[i] = (qvl_engine_slot_info){.id = i, .busy = s->job != NULL,
                                            .n_prompt = s->job ? s->job->n_ids : 0,
                                            .n_generated = s->job ? s->n_generated : 0,
                                            .n_cached = s->n_keys};
    }
}

static int add_to_batch(qvl_engine *e, int i, int n) {
    int32_t id;
    if (!engine_slot_next(&e->slots[i], &e->env, &id)) return n;
    e->batch_ids[n] = id;
    e->batch_seqs[n] = e->slots[i].seq;
    e->batch_slot[n] = i;
    return n + 1;
}

/* One token for the n slots of the batch, through the model in one batched step: the weights
 * are read once for all of them (qvl_model_decode_batch). Each slot keeps its row of
 * batch_logits, which the next step's sampling reads before the next decode overwrites it. */
typedef struct premask_work {
    qvl_engine *e;
    int n;
} premask_work;

static void *premask_thread(void *arg) {
    const premask_work *w = arg;
    for (int k = 0; k < w->n; k++) engine_slot_premask(&w->e->slots[w->e->batch_slot[k]]);
    return NULL;
}

static void decode_batch(qvl_engine *e, int n) {
    if (n == 0) return;
    qvl_error err = {0};
    /* The grammar jobs' next masks depend only on the tokens just chosen: they are computed on
     * a helper thread while the model runs the step, off the engine thread's path. (Without a
     * thread, apply() computes them when sampling.) */
    bool grammar = false;
    for (int k = 0; k < n; k++) grammar |= e->slots[e->batch_slot[k]].grammar != NULL;
    premask_work work = {.e = e, .n = n};
    pthread_t helper;
    const bool helped = grammar && pthread_create(&helper, NULL, premask_thread, &work) == 0;
    /* Every row greedy as its sampler would be: the step brings back their tokens only (a row
     * the device could not choose, -1, takes the logits to its sampler, which says why). */
    bool chosen = true;
    for (int k = 0; k < n && chosen; k++)
        chosen = engine_slot_plain_greedy(&e->slots[e->batch_slot[k]], &e->env);
    const double t0 = now_seconds();
    qvl_status st = chosen ? qvl_model_decode_batch_greedy(e->model, e->batch_seqs, e->batch_ids,
                                                           (size_t)n, e->batch_next, &err)
                           : qvl_model_decode_batch(e->model, e->batch_seqs, e->batch_ids,
                                                    (size_t)n, e->batch_logits, &err);
    bool refused = false;
    for (int k = 0; st == QVL_OK && chosen && k < n; k++) refused |= e->batch_next[k] < 0;
    if (refused) st = qvl_model_batch_logits(e->model, (size_t)n, e->batch_logits, &err);
    const double t1 = now_seconds();
    if (helped) pthread_join(helper, NULL); /* before any slot may end and free its matcher */
    if (st == QVL_OK) observe_decode(&e->env, n, t1 - t0);
    const size_t vocab = (size_t)e->env.vocab;
    for (int k = 0; k < n; k++) {
        engine_slot *s = &e->slots[e->batch_slot[k]];
        if (st != QVL_OK) engine_slot_feed_failed(s, &e->env, err.msg);
        else if (chosen && e->batch_next[k] >= 0)
            engine_slot_fed_chosen(s, e->batch_ids[k], e->batch_next[k]);
        else engine_slot_fed(s, e->batch_ids[k], e->batch_logits + (size_t)k * vocab);
    }
}

static void set_state(qvl_engine *e, qvl_engine_phase st, const char *error) {
    pthread_mutex_lock(&e->mu);
    if (e->state != QVL_ENGINE_STOPPING) e->state = st;
    if (error) snprintf(e->error, sizeof e->error, "%s", error);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static qvl_status load_parts(qvl_engine *e, const qvl_model_files *files, qvl_error *err);

static qvl_status load(qvl_engine *e, qvl_error *err) {
    const qvl_engine_options *c = &e->opts;
    qvl_model_files files;
    qvl_status st = qvl_model_files_find(c->model, c->mmproj, &files, err);
    if (st != QVL_OK) return st;
    st = load_parts(e, &files, err);
    qvl_model_files_free(&files);
    return st;
}

/* A slot's job is ending (engine_slot_end): the slot counts as idle for admission
 * (qvl_engine_submit) from now, not from the end of the round, whose recount agrees. Else a
 * client that asks again the moment it has its answer could find its own slot still counted
 * busy, and a full house a 429 it never caused. */
static void slot_freeing(void *arg) {
    qvl_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    if (e->idle < e->n_slots) e->idle++;
    pthread_mutex_unlock(&e->mu);
}

/* The tokenizer, generation settings, model and processors from the model's files. */
static qvl_status load_parts(qvl_engine *e, const qvl_model_files *files, qvl_error *err) {
    const qvl_engine_options *c = &e->opts;
    qvl_status st = qvl_model_files_tokenizer(files, &e->tok, err);
    if (st == QVL_E_NOT_FOUND && c->tokenizer_optional) st = QVL_OK; /* e->tok stays NULL */
    if (st != QVL_OK) return st;
    st = qvl_model_files_gen_config(files, &e->gen, err);
    if (st == QVL_E_NOT_FOUND) {
        QVL_LOG_I("%s: no generation_config.json: greedy decoding, no stop token", c->model);
        st = QVL_OK;
    }
    if (st != QVL_OK) return st;
    e->slots = calloc((size_t)c->slots, sizeof *e->slots);
    if (!e->slots) return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    qvl_model_options mo = {.plugins_path = c->plugins, .backend_name = c->backend,
                            .ctx = c->ctx, .weight_dtype = c->weights, .kv_type = c->kv_type,
                            .no_fuse = c->no_fuse, .no_mmap = c->no_mmap,
                            .backend_options = c->backend_options, .gpu_layers = c->gpu_layers,
                            .cpu_backend_name = c->cpu_backend,
                            .vision_backend_name = c->vision_backend, .mmproj = c->mmproj,
                            .image_max_tokens = c->image_max_tokens,
                            .on_convert = c->on_convert, .convert_user = c->convert_user,
                            .batch = c->prefill_chunk,
                            /* the model's own sequence and one per slot: batched steps over
                             * the slots then run one attention node per layer; one slot
                             * takes the model's own (qvl run and chat: one cache, as the
                             * model alone would hold) */
                            .kv_slots = c->slots == 1 ? 1 : c->slots + 1};
    st = qvl_model_open(c->model, &mo, &e->model, err);
    if (st != QVL_OK) return st;
    for (int i = 0; i < c->slots; i++) {
        st = engine_slot_open(&e->slots[i], i, e->model, c->slots == 1, err);
        e->n_slots = i + 1;
        if (st != QVL_OK) return st;
        /* one slot is the model alone (qvl run, qvl chat): nothing to tell */
        if (c->slots > 1) QVL_LOG_I("slot %d of %d ready", i + 1, c->slots);
    }
    const qvl_qwen3vl_config *cfg = qvl_model_config(e->model);
    const int32_t vocab = (int32_t)cfg->text.vocab_size;
    qvl_sampling_params_default(&e->defaults);
    qvl_gen_config_sampling_params(&e->gen, &e->defaults);
    /* Rows past the tokenizer's last id are untrained padding: never sampled (as qvl run). */
    e->defaults.n_valid = e->tok ? qvl_tokenizer_vocab_size(e->tok) : vocab;
    if (e->defaults.n_valid > vocab) e->defaults.n_valid = vocab;
    /* Built once at load (a walk of the vocabulary), not per request. With the plain added
     * tokens: a tool call's grammar spells "<tool_call>", which the model writes as one. */
    st = e->tok ? qvl_grammar_vocab_from_tokenizer_plain(e->tok, &e->trie, err) : QVL_OK;
    if (st != QVL_OK) return st;
    e->env = (engine_slot_env){.tok = e->tok, .gen = &e->gen, .observer = &e->opts.observer,
                              .vocab = vocab, .trie = e->trie, .slot_freeing = slot_freeing,
                              .slot_freeing_arg = e};
    e->batch_seqs = calloc((size_t)e->n_slots, sizeof *e->batch_seqs);
    e->batch_ids = calloc((size_t)e->n_slots, sizeof *e->batch_ids);
    e->batch_slot = calloc((size_t)e->n_slots, sizeof *e->batch_slot);
    /* page-locked where the logits are on a GPU: a step's rows arrive by DMA alone */
    e->batch_logits = qvl_model_host_alloc(e->model, (size_t)e->n_slots * (size_t)vocab *
                                                         sizeof *e->batch_logits);
    e->batch_next = calloc((size_t)e->n_slots, sizeof *e->batch_next);
    e->info = calloc((size_t)e->n_slots, sizeof *e->info);
    if (!e->batch_seqs || !e->batch_ids || !e->batch_slot || !e->batch_logits ||
        !e->batch_next || !e->info)
        return qvl_fail(err, QVL_E_NOMEM, "out of memory");
    /* Greedy jobs' tokens are chosen where the logits are: a step of several slots then brings
     * back their ids, not their rows of logits (QVL_DEVICE_GREEDY=0: A/B runs). */
    if (!env_off("QVL_DEVICE_GREEDY") && c->slots > 1) {
        qvl_error why = {0};
        if (qvl_model_set_greedy_vocab(e->model, e->defaults.n_valid, &why) == QVL_OK)
            e->env.greedy_vocab = e->defaults.n_valid;
        else QVL_LOG_I("%s", why.msg); /* a backend without ARGMAX: the host chooses */
    }
    e->has_vision = cfg->has_vision && cfg->image_token_id >= 0;
    e->pad_id = (int32_t)cfg->image_token_id;
    if (e->has_vision) {
        const char *source = NULL;
        st = qvl_model_files_preprocess(files, &cfg->vision, &e->pictures.pc, &source, err);
        if (st != QVL_OK) return st;
        /* No picture may take more tokens than a slot's context holds. */
        qvl_preprocess_config *pc = &e->pictures.pc;
        int64_t cap = qvl_preprocess_tokens_to_pixels(pc, c->ctx);
        if (cap > 0 && cap < pc->max_pixels) pc->max_pixels = cap;
        if (pc->min_pixels > pc->max_pixels) pc->min_pixels = pc->max_pixels;
    }
    e->has_video = e->has_vision && cfg->video_token_id >= 0;
    e->video_pad_id = (int32_t)cfg->video_token_id;
    if (e->has_video) {
        st = qvl_model_files_video(files, &cfg->vision, &e->videos.vc, err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

static void update_gauges(qvl_engine *e) {
    observe_queue(&e->env, (int64_t)e->q_len, e->n_slots - e->idle);
}

/* Jobs whose client left, or whose deadline passed, while they waited end here, freeing their
 * place in the queue. Under mu. */
static void purge_cancelled(qvl_engine *e) {
    size_t kept = 0;
    for (size_t i = 0; i < e->q_len; i++) {
        qvl_job *j = e->queue[(e->q_head + i) % e->q_cap];
        if (atomic_load(&j->cancel)) {
            observe_completion(&e->env, j->n_ids, 0, 0, true);
            qvl_job_finish(j, QVL_FINISH_CANCELLED, NULL);
            qvl_job_release(j);
        } else if (qvl_job_expired(j)) {
            observe_completion(&e->env, j->n_ids, 0, 0, false);
            observe_timeout(&e->env);
            qvl_job_finish(j, QVL_FINISH_TIMEOUT, QVL_JOB_TIMEOUT_MESSAGE);
            qvl_job_release(j);
        } else {
            e->queue[(e->q_head + kept++) % e->q_cap] = j;
        }
    }
    e->q_len = kept;
}

/* The idle slot whose cache shares the longest prefix with j; ties go to the least recently
 * used. Under mu. */
static engine_slot *pick_slot(qvl_engine *e, const qvl_job *j) {
    engine_slot *best = NULL;
    int64_t best_keep = -1;
    for (int i = 0; i < e->n_slots; i++) {
        engine_slot *s = &e->slots[i];
        if (s->job) continue;
        int64_t keep = engine_slot_reusable(s, j);
        if (keep > best_keep || (keep == best_keep && s->last_used < best->last_used)) {
            best = s;
            best_keep = keep;
        }
    }
    return best;
}

/* Queued jobs into idle slots (recounted first: the step's sampling may have ended jobs).
 * Returns how many were claimed into starting[]. Under mu. */
static int claim_jobs(qvl_engine *e, engine_slot **starting) {
    int idle = 0;
    for (int i = 0; i < e->n_slots; i++) idle += e->slots[i].job == NULL;
    e->idle = idle;
    purge_cancelled(e);
    int n_starting = 0;
    while (e->q_len > 0 && e->idle > 0) {
        qvl_job *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->q_cap;
        e->q_len--;
        engine_slot *s = pick_slot(e, j);
        s->job = j; /* claimed under mu; engine_slot_start runs outside it */
        s->last_used = ++e->tick;
        e->idle--;
        starting[n_starting++] = s;
    }
    update_gauges(e);
    return n_starting;
}

/* The prefilling slot claimed first (FIFO by claim tick) whose next chunk fits `budget`
 * tokens and is not one of the n in `taken`, or NULL. */
static engine_slot *next_prefill(qvl_engine *e, int64_t budget, engine_slot *const *taken,
                                 int n) {
    engine_slot *best = NULL;
    for (int i = 0; i < e->n_slots; i++) {
        engine_slot *s = &e->slots[i];
        if (!s->job || !s->prefilling) continue;
        if (engine_slot_chunk_length(s, e->opts.prefill_chunk) > budget) continue;
        bool in = false;
        for (int k = 0; k < n && !in; k++) in = taken[k] == s;
        if (in) continue;
        if (!best || s->last_used < best->last_used) best = s;
    }
    return best;
}

/* After slot s's chunk: a job whose prompt is done samples its first token and joins the
 * round's batch; one that ends at its first token (eos, max_tokens 1) frees the slot again,
 * and the round claims the next queued job for it. */
static void after_chunk(qvl_engine *e, engine_slot *s, int *n, bool *freed) {
    if (s->job && !s->prefilling) *n = add_to_batch(e, s->index, *n);
    *freed |= s->job == NULL;
}

/* Prefill chunks of this round: at most prefill_chunk prompt tokens in all (0: every waiting
 * prompt whole), oldest claim first. Text chunks of several slots run as one batched prefill
 * (the weights read once for all their rows); a chunk with picture rows, or one whose prompt
 * logits are wanted, runs alone. Returns whether a slot became idle (its job ended). */
static bool run_prefills(qvl_engine *e, int64_t *budget, int *n) {
    bool freed = false;
    const int64_t chunk = e->opts.prefill_chunk;
    for (;;) {
        engine_slot *group[QVL_TEXT_MAX_SEQS];
        int k = 0;
        engine_slot *s;
        while (k < QVL_TEXT_MAX_SEQS && (s = next_prefill(e, *budget, group, k)) != NULL) {
            const int64_t len = engine_slot_chunk_length(s, chunk);
            if (chunk > 0) *budget -= len;
            if (e->prefill_batch && engine_slot_chunk_batchable(s, chunk)) {
                group[k++] = s;
                continue;
            }
            engine_slot_prefill(s, &e->env, chunk);
            after_chunk(e, s, n, &freed);
        }
        if (k == 0) break;
        engine_slots_prefill(group, k, &e->env, chunk);
        for (int i = 0; i < k; i++) after_chunk(e, group[i], n, &freed);
    }
    return freed;
}

/* One scheduling round: every decoding slot samples its next token; queued jobs take the slots
 * that are idle now; prompts run a chunk's worth (those that finish sample their first token);
 * then every decoding slot's token runs in one batched step. A running stream so waits at
 * most one chunk and one step between two tokens, however long a new prompt is. Jobs that end
 * this round are replaced in it, so under load the batch keeps its size and the model keeps
 * its batched graph (it rebuilds one when the number of rows changes). */
static void engine_round(qvl_engine *e, engine_slot **starting) {
    int n = 0;
    for (int i = 0; i < e->n_slots; i++)
        if (e->slots[i].job && !e->slots[i].prefilling && !e->slots[i].waiting)
            n = add_to_batch(e, i, n);
    int64_t budget = e->opts.prefill_chunk > 0 ? e->opts.prefill_chunk : INT64_MAX;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        const int n_starting = claim_jobs(e, starting);
        pthread_mutex_unlock(&e->mu);
        for (int k = 0; k < n_starting; k++) {
            engine_slot *s = starting[k];
            qvl_job *j = s->job;
            s->job = NULL;
            engine_share_start(e->slots, e->n_slots, s, j, &e->env);
        }
        const bool freed = run_prefills(e, &budget, &n);
        /* A prefill that just passed what a waiting job shares with it lets that job start
         * (copying the prefix) in this same round. */
        const int resumed = engine_share_resume(e->slots, e->n_slots, &e->env);
        if (n_starting == 0 && !freed && resumed == 0) break;
    }
    decode_batch(e, n);
    pthread_mutex_lock(&e->mu);
    int idle = 0;
    for (int i = 0; i < e->n_slots; i++) idle += e->slots[i].job == NULL;
    e->idle = idle;
    update_gauges(e);
    record_slots(e);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg) {
    qvl_engine *e = arg;
    qvl_error err = {0};
    if (load(e, &err) != QVL_OK) {
        set_state(e, QVL_ENGINE_FAILED, err.msg);
        return NULL;
    }
    engine_slot **starting = calloc((size_t)e->n_slots, sizeof *starting);
    if (!starting) {
        set_state(e, QVL_ENGINE_FAILED, "out of memory");
        return NULL;
    }
    pthread_mutex_lock(&e->mu);
    e->idle = e->n_slots;
    record_slots(e);
    pthread_mutex_unlock(&e->mu);
    set_state(e, QVL_ENGINE_READY, NULL);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (e->state == QVL_ENGINE_READY && e->q_len == 0 && e->idle == e->n_slots)
            pthread_cond_wait(&e->cv, &e->mu);
        const bool serving = e->state == QVL_ENGINE_READY;
        pthread_mutex_unlock(&e->mu);
        if (!serving) break;
        engine_round(e, starting);
    }
    free(starting);
    return NULL;
}

qvl_engine *qvl_engine_start(const qvl_engine_options *opts, qvl_error *err) {
    if (!opts->model || opts->slots < 1 || opts->queue < 0 || opts->ctx < 2) {
        qvl_fail(err, QVL_E_INVALID, "engine: a model, at least one slot and a context of two "
                 "tokens or more are needed");
        return NULL;
    }
    qvl_engine *e = calloc(1, sizeof *e);
    if (!e) {
        qvl_fail(err, QVL_E_NOMEM, "out of memory");
        return NULL;
    }
    e->opts = *opts;
    e->prefill_batch = !env_off("QVL_PREFILL_BATCH");
    e->q_cap = (size_t)opts->queue + (size_t)opts->slots;
    e->queue = calloc(e->q_cap, sizeof *e->queue);
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->tok_mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->queue || pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        qvl_fail(err, QVL_E_NOMEM, "cannot start the engine thread");
        qvl_engine_free(e);
        return NULL;
    }
    e->thread_started = true;
    return e;
}

qvl_engine_phase qvl_engine_state(qvl_engine *e) {
    pthread_mutex_lock(&e->mu);
    qvl_engine_phase st = e->state;
    pthread_mutex_unlock(&e->mu);
    return st;
}

qvl_engine_phase qvl_engine_wait_loaded(qvl_engine *e) {
    pthread_mutex_lock(&e->mu);
    while (e->state == QVL_ENGINE_LOADING) pthread_cond_wait(&e->cv, &e->mu);
    qvl_engine_phase st = e->state;
    pthread_mutex_unlock(&e->mu);
    return st;
}

const char *qvl_engine_error(qvl_engine *e) { return e->error; }

const qvl_sampling_params *qvl_engine_sampling_defaults(qvl_engine *e) { return &e->defaults; }

const qvl_picture_rules *qvl_engine_picture_rules(qvl_engine *e) {
    return e->has_vision ? &e->pictures : NULL;
}

const qvl_video_rules *qvl_engine_video_rules(qvl_engine *e) {
    return e->has_video ? &e->videos : NULL;
}

int64_t qvl_engine_ctx(qvl_engine *e) { return e->opts.ctx; }

int qvl_engine_slots(qvl_engine *e) { return e->opts.slots; }

void qvl_engine_placement(qvl_engine *e, char *out, size_t size) {
    qvl_model_placement(e->model, out, size);
}

int qvl_engine_slot_info_get(qvl_engine *e, qvl_engine_slot_info *out, int max) {
    pthread_mutex_lock(&e->mu);
    const int n = e->info ? e->n_slots : 0;
    for (int i = 0; i < n && i < max; i++) out[i] = e->info[i];
    pthread_mutex_unlock(&e->mu);
    return n;
}

int32_t qvl_engine_vocab(qvl_engine *e) { return e->defaults.n_valid; }

const qvl_model *qvl_engine_model(qvl_engine *e) { return e->model; }

bool qvl_engine_token_bytes(qvl_engine *e, int32_t id, const char **bytes, size_t *len) {
    if (!e->tok || id < 0 || id >= qvl_tokenizer_vocab_size(e->tok)) return false;
    return qvl_tokenizer_token_to_piece(e->tok, id, bytes, len, NULL) == QVL_OK;
}

qvl_status qvl_engine_submit(qvl_engine *e, qvl_job *j) {
    pthread_mutex_lock(&e->mu);
    qvl_status st = QVL_OK;
    if (e->state != QVL_ENGINE_READY) {
        st = QVL_E_INVALID;
    } else if (e->q_len >= (size_t)e->opts.queue + (size_t)e->idle || e->q_len >= e->q_cap) {
        st = QVL_E_LIMIT;
    } else {
        qvl_job_retain(j);
        e->queue[(e->q_head + e->q_len) % e->q_cap] = j;
        e->q_len++;
        update_gauges(e);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

void qvl_engine_stop(qvl_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->state = QVL_ENGINE_STOPPING;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    e->thread_started = false;
    static const char bye[] = "the server is shutting down";
    for (int i = 0; i < e->n_slots; i++) engine_slot_end(&e->slots[i], &e->env, QVL_FINISH_ERROR, bye);
    pthread_mutex_lock(&e->mu);
    while (e->q_len > 0) {
        qvl_job *j = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->q_cap;
        e->q_len--;
        qvl_job_finish(j, QVL_FINISH_ERROR, bye);
        qvl_job_release(j);
    }
    pthread_mutex_unlock(&e->mu);
}

void qvl_engine_free(qvl_engine *e) {
    if (!e) return;
    qvl_engine_stop(e);
    for (int i = 0; i < e->n_slots; i++) engine_slot_close(&e->slots[i]);
    free(e->slots);
    free(e->batch_seqs);
    free(e->batch_ids);
    free(e->batch_slot);
    if (e->model) qvl_model_host_free(e->model, e->batch_logits);
    free(e->batch_next);
    qvl_model_close(e->model);
    qvl_grammar_vocab_free(e->trie);
    qvl_tokenizer_free(e->tok);
    free(e->queue);
    free(e->info);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->tok_mu);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
