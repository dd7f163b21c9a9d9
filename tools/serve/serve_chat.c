/* POST /v1/chat/completions: parse, tokenize, queue, then wait for the answer (or for its
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
#include "serve_request.h"
#include "qvl/prefix_cache.h"

#define WAIT_MS 100

static const char *finish_name(qvl_finish f) {
    return f == QVL_FINISH_LENGTH ? "length" : "stop";
}

/* "chatcmpl-" and 24 hex digits, unique within the process and unlikely to repeat across
 * restarts (the id is a label, not a secret). */
static void make_id(char *out, size_t n) {
    static atomic_uint_fast64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec;
    uint64_t k = atomic_fetch_add(&counter, 1) + 1;
    x ^= k * 0x9e3779b97f4a7c15ULL;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    snprintf(out, n, "chatcmpl-%016llx%08llx", (unsigned long long)x,
             (unsigned long long)(k & 0xffffffffULL));
}

static enum MHD_Result finished_reply(struct MHD_Connection *c, serve_server *s, qvl_job *j,
                                      const serve_oai_meta *meta) {
    enum MHD_Result rc;
    pthread_mutex_lock(&j->mu);
    qvl_finish f = j->finish;
    if (f == QVL_FINISH_ERROR) {
        char msg[sizeof j->error];
        memcpy(msg, j->error, sizeof msg);
        pthread_mutex_unlock(&j->mu);
        const bool stopping = qvl_engine_state(s->engine) == QVL_ENGINE_STOPPING;
        rc = serve_reply_error(c, s, stopping ? 503 : 500, msg, NULL, NULL);
    } else if (f == QVL_FINISH_TIMEOUT) {
        char msg[sizeof j->error];
        memcpy(msg, j->error, sizeof msg);
        pthread_mutex_unlock(&j->mu);
        /* Nothing was generated: 503 tells clients and a load balancer that retrying (here
         * later, or at another replica) is safe. */
        rc = serve_reply_error(c, s, 503, msg, NULL, "timeout");
    } else if (f == QVL_FINISH_CANCELLED) {
        pthread_mutex_unlock(&j->mu);
        rc = MHD_NO; /* only a client that left cancels: nobody to answer */
    } else {
        serve_oai_usage u = {.prompt = j->n_ids, .completion = j->completion_tokens,
                             .cached = j->cached_tokens};
        char *body = serve_oai_completion(meta, j->text ? j->text : "", finish_name(f), &u);
        pthread_mutex_unlock(&j->mu);
        rc = serve_reply(c, s, 200, "application/json", body);
    }
    qvl_job_release(j);
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
        return serve_reply_error(c, s, 503, "the server is shutting down", NULL, "model_loading");
    }
}

enum MHD_Result serve_chat(struct MHD_Connection *c, serve_server *s, const char *body, size_t len) {
    if (qvl_engine_state(s->engine) != QVL_ENGINE_READY)
        return serve_reply_error(c, s, 503, "the server is not serving (loading or stopping)",
                                 NULL, "model_loading");
    /* The deadline counts from the whole body's arrival: waiting for picture memory, decoding,
     * waiting for a slot and generating all count against it. */
    const double deadline =
        s->cfg->request_timeout > 0 ? qvl_job_now() + s->cfg->request_timeout : 0;
    serve_image_guard guard = {.budget = s->budget, .deadline = deadline,
                               .client_gone = client_gone, .client_arg = c};
    serve_parse_ctx ctx = {.defaults = qvl_engine_sampling_defaults(s->engine),
                           .pictures = qvl_engine_picture_rules(s->engine),
                           .videos = qvl_engine_video_rules(s->engine),
                           .image_dir = s->image_dir, .max_images = s->cfg->max_images,
                           .max_video_frames = s->cfg->max_video_frames,
                           .max_video_seconds = s->cfg->max_video_seconds,
                           .max_file_bytes = s->cfg->max_body, .ctx = s->cfg->ctx,
                           .guard = &guard};
    serve_request *req = NULL;
    serve_bad bad;
    if (!serve_request_parse(body, len, &ctx, &req, &bad)) {
        if (guard.why != SERVE_IMAGE_GO_ON) return stopped_reply(c, s, &guard, &bad);
        return serve_reply_error(c, s, (unsigned)bad.status, bad.message, bad.param, bad.code);
    }
    const bool stream = req->stream, include_usage = req->include_usage;
    /* Prefix reuse stays within one API key and one cache_salt (qvl/prefix_cache.h). */
    const int key = serve_auth_key_index(c, s->cfg);
    qvl_partition partition;
    qvl_partition_make(key >= 0 ? key : QVL_PARTITION_NO_KEY, req->cache_salt, &partition);
    qvl_job *j = NULL;
    qvl_error err = {0};
    qvl_engine_request *gen = req->gen;
    req->gen = NULL; /* the engine takes it */
    serve_request_free(req);
    qvl_status st = qvl_engine_prepare(s->engine, gen, &j, &err);
    if (st != QVL_OK)
        return serve_reply_error(c, s, st == QVL_E_NOMEM ? 500 : 400, err.msg, NULL,
                                 st == QVL_E_LIMIT ? "context_length_exceeded" : NULL);
    j->partition = partition;
    j->deadline = deadline;
    st = qvl_engine_submit(s->engine, j);
    if (st != QVL_OK) {
        qvl_job_release(j);
        const int rc = st == QVL_E_LIMIT ? 429 : 503;
        char msg[160];
        if (rc == 429)
            snprintf(msg, sizeof msg, "the server is busy: %d slots and %d queued requests are "
                     "taken; retry later", s->cfg->parallel, s->cfg->queue);
        else
            snprintf(msg, sizeof msg, "the server is not serving (loading or stopping)");
        return serve_reply_error(c, s, (unsigned)rc, msg, NULL,
                                 rc == 429 ? "queue_full" : "model_loading");
    }
    char id[48];
    make_id(id, sizeof id);
    serve_oai_meta meta = {.id = id, .created = (long long)time(NULL), .model = s->cfg->model_id};
    for (;;) {
        qvl_job_wait(j, stream ? QVL_WAIT_START : QVL_WAIT_FINISH, 0, WAIT_MS);
        pthread_mutex_lock(&j->mu);
        const bool finished = j->finish != QVL_JOB_RUNNING, started = j->started;
        pthread_mutex_unlock(&j->mu);
        if (finished && (!stream || !started)) return finished_reply(c, s, j, &meta);
        if (stream && started) return serve_sse_start(c, s, j, &meta, include_usage);
        if (serve_peer_gone(c)) {
            atomic_store(&j->cancel, true);
            qvl_job_release(j);
            return MHD_NO;
        }
    }
}
