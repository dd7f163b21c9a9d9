/* POST /v1/chat/completions and /v1/completions: parse, tokenize, queue, then wait for the answer (or for its
 * first token when streaming, so that a request that fails before answering still gets its
 * proper status). While waiting, the connection thread checks every WAIT_MS whether the client
 * has gone; if so the job is cancelled and the engine drops it before its next token. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve_auth.h"
#include "serve_http.h"
#include "serve_logprobs.h"
#include "serve_request.h"
#include "qvl/prefix_cache.h"

#define WAIT_MS 100

static const char *finish_name(qvl_finish f) {
    return f == QVL_FINISH_LENGTH ? "length" : "stop";
}

/* "chatcmpl-" (or "cmpl-") and 24 hex digits, unique within the process and unlikely to repeat across
 * restarts (the id is a label, not a secret). */
static void make_id(const char *prefix, char *out, size_t n) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec;
    uint64_t k = atomic_fetch_add(&counter, 1) + 1;
    x ^= k * 0x9e3779b97f4a7c15ULL;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)x,
             (unsigned long long)(k & 0xffffffffULL));
}

/* Blanks only (or nothing): a message that calls tools has no content then. */
static bool blank(const char *s) {
    for (; s && *s; s++)
        if (*s != ' ' && *s != '\n' && *s != '\t' && *s != '\r') return false;
    return true;
}

/* The choice of job j (finished STOP or LENGTH) as the answer gives it; with read_calls its
 * tool calls are read out of the text (*text_out: the content left, freed by the caller). */
static bool make_choice(serve_server *s, serve_api api, qvl_job *j, bool read_calls,
                        serve_oai_choice *c, char **text_out) {
    *c = (serve_oai_choice){.content = j->text ? j->text : "",
                            .finish = finish_name(j->finish)};
    *text_out = NULL;
    if (read_calls) {
        serve_toolcalls tc;
        serve_toolcalls_init(&tc);
        cJSON *items = NULL;
        if (!serve_toolcalls_feed(&tc, j->text ? j->text : "", j->len, true, text_out, &items))
            return false;
        c->content = *text_out ? *text_out : "";
        if (tc.n_calls > 0) {
            c->tool_calls = cJSON_CreateArray();
            if (!c->tool_calls) {
                cJSON_Delete(items);
                return false;
            }
            if (!serve_toolcalls_merge(c->tool_calls, items)) return false; /* items taken */
            if (blank(c->content)) c->content = NULL;
            if (j->finish == QVL_FINISH_STOP) c->finish = "tool_calls";
        } else {
            cJSON_Delete(items);
        }
    }
    if (j->req->logprobs) {
        c->logprobs = serve_logprobs_of(s->engine, api, j->logprobs, j->n_logprobs, 0);
        if (!c->logprobs) return false;
    }
    return true;
}

/* Every job finished: the answer, or the first failure's error. Releases the jobs. */
static enum MHD_Result finished_reply(struct MHD_Connection *c, serve_server *s, qvl_job **jobs,
                                      int n, bool read_calls, const serve_oai_meta *meta) {
    enum MHD_Result rc = MHD_NO;
    bool answered = false;
    for (int i = 0; i < n && !answered; i++) {
        qvl_job *j = jobs[i];
        pthread_mutex_lock(&j->mu);
        qvl_finish f = j->finish;
        char msg[sizeof j->error];
        memcpy(msg, j->error, sizeof msg);
        pthread_mutex_unlock(&j->mu);
        answered = true;
        if (f == QVL_FINISH_ERROR) {
            const bool stopping = qvl_engine_state(s->engine) == QVL_ENGINE_STOPPING;
            rc = stopping ? serve_reply_unavailable(c, s)
                          : serve_reply_error(c, s, 500, msg, NULL, NULL);
        } else if (f == QVL_FINISH_TIMEOUT) {
            /* Nothing was generated: 503 tells clients and a load balancer that retrying (here
             * later, or at another replica) is safe. */
            rc = serve_reply_error(c, s, 503, msg, NULL, "timeout");
        } else if (f == QVL_FINISH_CANCELLED) {
            rc = MHD_NO; /* only a client that left cancels: nobody to answer */
        } else {
            answered = false;
        }
    }
    if (!answered) {
        serve_oai_choice choices[SERVE_MAX_CHOICES];
        char *texts[SERVE_MAX_CHOICES];
        memset(choices, 0, sizeof choices);
        memset(texts, 0, sizeof texts);
        serve_oai_usage u = {.prompt = jobs[0]->n_ids, .cached = jobs[0]->cached_tokens};
        bool ok = true;
        /* The jobs are finished: the engine writes none of their fields any more. */
        for (int i = 0; i < n; i++) {
            if (!make_choice(s, meta->api, jobs[i], read_calls, &choices[i], &texts[i]))
                ok = false;
            u.completion += jobs[i]->completion_tokens;
        }
        char *body = ok ? serve_oai_completion(meta, choices, n, &u) : NULL;
        for (int i = 0; i < n; i++) { /* what a failure left */
            cJSON_Delete(choices[i].logprobs);
            cJSON_Delete(choices[i].tool_calls);
            free(texts[i]);
        }
        rc = serve_reply(c, s, 200, "application/json", body);
    }
    for (int i = 0; i < n; i++) qvl_job_release(jobs[i]);
    return rc;
}

static bool client_gone(void *arg) { return serve_peer_gone(arg); }

/* A request whose pictures were not decoded because the guard stopped them. */
static enum MHD_Result stopped_reply(struct MHD_Connection *c, serve_server *s,
                                     const serve_image_guard *g, const serve_bad *bad) {
    switch (g->why) {
    case SERVE_IMAGE_CLIENT_GONE:
        return MHD_NO; /* nobody to answer */
    case SERVE_IMAGE_DEADLINE:
        /* As a request that waited past its deadline for a slot: retrying later is safe. */
        return serve_reply_error(c, s, 503, bad->message, NULL, "timeout");
    default:
        return serve_reply_unavailable(c, s);
    }
}

/* Releases jobs[0, n) after cancelling them (their client is gone or the answer failed). */
static void drop_jobs(qvl_job **jobs, int n) {
    for (int i = 0; i < n; i++) {
        atomic_store(&jobs[i]->cancel, true);
        qvl_job_release(jobs[i]);
    }
}

/* Job k of the request: prepared (the first from req's request, the others from the body
 * parsed again: each choice is its own job with its own pictures) and submitted. 0, or the
 * HTTP status already answered with (then nothing is left to release). */
static enum MHD_Result submit_choice(struct MHD_Connection *c, serve_server *s, qvl_engine_request *gen,
                                     const qvl_partition *partition, double deadline, int k,
                                     qvl_job **out, bool *failed) {
    *failed = true;
    gen->sampling.seed += (uint64_t)k; /* a seeded request's choices differ, reproducibly */
    qvl_job *j = NULL;
    qvl_error err = {0};
    qvl_status st = qvl_engine_prepare(s->engine, gen, &j, &err);
    if (st != QVL_OK)
        return serve_reply_error(c, s, st == QVL_E_NOMEM ? 500 : 400, err.msg, NULL,
                                 st == QVL_E_LIMIT ? "context_length_exceeded" : NULL);
    j->partition = *partition;
    j->deadline = deadline;
    st = qvl_engine_submit(s->engine, j);
    if (st != QVL_OK) {
        qvl_job_release(j);
        if (st != QVL_E_LIMIT) return serve_reply_unavailable(c, s);
        char msg[200];
        snprintf(msg, sizeof msg, "the server is busy: %d slots and %d queued requests are "
                 "taken (each of n choices takes one); retry later", s->cfg->parallel,
                 s->cfg->queue);
        return serve_reply_error(c, s, 429, msg, NULL, "queue_full");
    }
    *out = j;
    *failed = false;
    return MHD_YES;
}

/* Both APIs: parse, queue each choice, wait, answer in the API's shape. */
static enum MHD_Result generate(struct MHD_Connection *c, serve_server *s, const char *body,
                                size_t len, serve_api api) {
    if (qvl_engine_state(s->engine) != QVL_ENGINE_READY) return serve_reply_unavailable(c, s);
    /* The deadline counts from the whole body's arrival: waiting for picture memory, decoding,
     * waiting for a slot and generating all count against it. */
    const double deadline =
        s->cfg->request_timeout > 0 ? qvl_job_now() + s->cfg->request_timeout : 0;
    serve_image_guard guard = {.budget = s->budget, .deadline = deadline,
                               .client_gone = client_gone, .client_arg = c};
    serve_parse_ctx ctx = {.api = api, .defaults = qvl_engine_sampling_defaults(s->engine),
                           .pictures = qvl_engine_picture_rules(s->engine),
                           .videos = qvl_engine_video_rules(s->engine),
                           .image_dir = s->image_dir, .max_images = s->cfg->max_images,
                           .max_video_frames = s->cfg->max_video_frames,
                           .max_video_seconds = s->cfg->max_video_seconds,
                           .max_file_bytes = s->cfg->max_body, .ctx = s->cfg->ctx,
                           .guard = &guard, .vocab = qvl_engine_vocab(s->engine)};
    qvl_job *jobs[SERVE_MAX_CHOICES];
    int n = 1, have = 0;
    bool stream = false, include_usage = false, read_calls = false;
    qvl_partition partition;
    for (int k = 0; k < n; k++) {
        serve_request *req = NULL;
        serve_bad bad;
        if (!serve_request_parse(body, len, &ctx, &req, &bad)) {
            drop_jobs(jobs, have);
            if (guard.why != SERVE_IMAGE_GO_ON) return stopped_reply(c, s, &guard, &bad);
            return serve_reply_error(c, s, (unsigned)bad.status, bad.message, bad.param, bad.code);
        }
        if (k == 0) {
            n = req->n;
            stream = req->stream;
            include_usage = req->include_usage;
            read_calls = req->read_calls;
            /* Prefix reuse stays within one API key and one cache_salt (qvl/prefix_cache.h). */
            const int key = serve_auth_key_index(c, s->cfg);
            qvl_partition_make(key >= 0 ? key : QVL_PARTITION_NO_KEY, req->cache_salt, &partition);
        }
        qvl_engine_request *gen = req->gen;
        req->gen = NULL; /* the engine takes it */
        serve_request_free(req);
        bool failed;
        enum MHD_Result rc = submit_choice(c, s, gen, &partition, deadline, k, &jobs[k], &failed);
        if (failed) {
            drop_jobs(jobs, have);
            return rc;
        }
        have++;
    }
    char id[48];
    make_id(api == SERVE_API_TEXT ? "cmpl-" : "chatcmpl-", id, sizeof id);
    serve_oai_meta meta = {.api = api, .id = id, .created = (long long)time(NULL),
                           .model = s->cfg->model_id};
    /* Non-streamed: every choice finished. Streamed: every choice started (or one finished
     * before starting: it failed, and its status answers the request). */
    for (int k = 0; k < n;) {
        qvl_job *j = jobs[k];
        qvl_job_wait(j, stream ? QVL_WAIT_START : QVL_WAIT_FINISH, 0, WAIT_MS);
        pthread_mutex_lock(&j->mu);
        const bool finished = j->finish != QVL_JOB_RUNNING, started = j->started;
        pthread_mutex_unlock(&j->mu);
        if (stream && finished && !started) {
            /* answer with that job's failure; the others are cancelled */
            for (int i = 0; i < n; i++)
                if (i != k) atomic_store(&jobs[i]->cancel, true);
            qvl_job *first = jobs[0];
            jobs[0] = j;
            jobs[k] = first;
            return finished_reply(c, s, jobs, n, read_calls, &meta);
        }
        if (finished || (stream && started)) {
            k++;
            continue;
        }
        if (serve_peer_gone(c)) {
            drop_jobs(jobs, n);
            return MHD_NO;
        }
    }
    if (!stream) return finished_reply(c, s, jobs, n, read_calls, &meta);
    return serve_sse_start(c, s, jobs, n, &meta, include_usage, read_calls);
}

enum MHD_Result serve_chat(struct MHD_Connection *c, serve_server *s, const char *body, size_t len) {
    return generate(c, s, body, len, SERVE_API_CHAT);
}

enum MHD_Result serve_completions(struct MHD_Connection *c, serve_server *s, const char *body,
                                  size_t len) {
    return generate(c, s, body, len, SERVE_API_TEXT);
}
