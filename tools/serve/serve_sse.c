/* The streamed answer: "data: {chunk}\n\n" events in OpenAI's chat.completion.chunk format (or
 * text_completion for /v1/completions),
 * then "data: [DONE]\n\n". libmicrohttpd pulls the body through stream_read on the connection's
 * own thread, which blocks there until the engine publishes more text. A write to a client that
 * has left fails, the response is freed (stream_free) and the job is cancelled; while waiting,
 * the socket is also checked directly so a silent model does not hide a departure. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "serve_cors.h"
#include "serve_http.h"
#include "serve_logprobs.h"
#include "serve_request.h"

#define WAIT_MS 100
/* With several choices a wait watches one job; another's text may arrive meanwhile: this
 * bounds how late it is sent. */
#define WAIT_MANY_MS 5

typedef enum phase { P_CHOICES, P_USAGE, P_DONE, P_END } phase;
typedef enum choice_phase { C_ROLE, C_TEXT, C_OVER } choice_phase;

typedef struct sse_choice {
    qvl_job *j;
    choice_phase ph;
    size_t sent;       /* answer bytes already streamed */
    size_t lp_sent;    /* logprobs entries already streamed */
    bool read_calls;   /* the text goes through calls */
    serve_toolcalls calls;
} sse_choice;

typedef struct sse {
    serve_server *s;
    struct MHD_Connection *c;
    sse_choice ch[SERVE_MAX_CHOICES];
    int n, cur;        /* choices; the one to look at first (round robin) */
    char id[48];
    serve_oai_meta meta;
    bool include_usage;
    phase ph;
    char *pending; /* event being written */
    size_t n_pending, at;
} sse;

/* Wrap a JSON chunk (taken) as one event; false when out of memory. */
static bool set_event(sse *e, char *json) {
    free(e->pending);
    e->pending = NULL;
    e->n_pending = e->at = 0;
    if (!json) return false;
    size_t n = strlen(json);
    e->pending = malloc(n + 9);
    if (e->pending) {
        memcpy(e->pending, "data: ", 6);
        memcpy(e->pending + 6, json, n);
        memcpy(e->pending + 6 + n, "\n\n", 3);
        e->n_pending = n + 8;
    }
    free(json);
    return e->pending != NULL;
}

/* The logprobs of the choice's tokens whose text ends by `upto` (all of them when final), or
 * NULL (none asked for, or none new). Under the job's mu. *oom on failure. */
static cJSON *take_logprobs(sse *e, sse_choice *c, size_t upto, bool final, bool *oom) {
    qvl_job *j = c->j;
    if (!j->req->logprobs) return NULL;
    size_t k = c->lp_sent;
    while (k < j->n_logprobs && (final || j->logprobs[k].end <= upto)) k++;
    if (k == c->lp_sent) return NULL;
    cJSON *lp = serve_logprobs_of(e->s->engine, e->meta.api, j->logprobs + c->lp_sent,
                                  k - c->lp_sent, c->lp_sent ? j->logprobs[c->lp_sent - 1].end : 0);
    if (!lp) *oom = true;
    c->lp_sent = k;
    return lp;
}

/* Choice i's next event, if it has one now: *made true and the event set (false return: out
 * of memory, or the job was cancelled). */
static bool choice_event(sse *e, int i, bool *made) {
    sse_choice *c = &e->ch[i];
    qvl_job *j = c->j;
    *made = false;
    if (c->ph == C_OVER) return true;
    serve_oai_choice oc = {0};
    if (c->ph == C_ROLE) {
        c->ph = C_TEXT;
        oc.role = true;
        oc.content = "";
        *made = true;
        return set_event(e, serve_oai_chunk(&e->meta, i, &oc, e->include_usage));
    }
    bool oom = false;
    pthread_mutex_lock(&j->mu);
    const qvl_finish f = j->finish;
    const bool over = f != QVL_JOB_RUNNING && j->visible == c->sent;
    if (j->visible > c->sent || (over && c->read_calls)) {
        /* The text so far: as it is, or through the tool-call reader, which may hold some
         * back (a tag's beginning) until it knows what it is. */
        char *text = NULL;
        cJSON *items = NULL;
        bool ok;
        if (c->read_calls) {
            ok = serve_toolcalls_feed(&c->calls, j->text ? j->text : "", j->visible,
                                      over && (f == QVL_FINISH_STOP || f == QVL_FINISH_LENGTH),
                                      &text, &items);
        } else {
            const size_t n = j->visible - c->sent;
            text = malloc(n + 1);
            ok = text != NULL;
            if (ok) {
                memcpy(text, j->text + c->sent, n);
                text[n] = '\0';
            }
        }
        c->sent = j->visible;
        if (ok && (text || items)) oc.logprobs = take_logprobs(e, c, c->sent, false, &oom);
        pthread_mutex_unlock(&j->mu);
        if (!ok || oom) {
            free(text);
            cJSON_Delete(items);
            cJSON_Delete(oc.logprobs);
            return false;
        }
        if (text || items) {
            oc.content = text;
            oc.tool_calls = items;
            *made = true;
            ok = set_event(e, serve_oai_chunk(&e->meta, i, &oc, e->include_usage));
            free(text);
            return ok;
        }
        if (!over) return true;
        pthread_mutex_lock(&j->mu);
        c->read_calls = false; /* read to the end: only the finish remains */
    }
    if (f == QVL_JOB_RUNNING) {
        pthread_mutex_unlock(&j->mu);
        return true;
    }
    char msg[sizeof j->error];
    memcpy(msg, j->error, sizeof msg);
    if (f == QVL_FINISH_STOP || f == QVL_FINISH_LENGTH)
        oc.logprobs = take_logprobs(e, c, 0, true, &oom);
    pthread_mutex_unlock(&j->mu);
    c->ph = C_OVER;
    if (f == QVL_FINISH_CANCELLED || oom) return false;
    *made = true;
    /* Headers are gone: the error travels as an event. (A stream starts after the prefill, so
     * TIMEOUT, which ends a job before it, does not reach here.) */
    if (f == QVL_FINISH_ERROR || f == QVL_FINISH_TIMEOUT)
        return set_event(e, qvl_engine_state(e->s->engine) == QVL_ENGINE_STOPPING
                                ? serve_unavailable_json(e->s)
                                : serve_oai_error(500, msg, NULL, NULL));
    oc.finish = f == QVL_FINISH_LENGTH ? "length"
              : c->calls.n_calls > 0 ? "tool_calls" : "stop";
    return set_event(e, serve_oai_chunk(&e->meta, i, &oc, e->include_usage));
}

/* The next event; false at the end of the stream (or out of memory, or the client left). */
static bool next_event(sse *e) {
    for (;;) {
        switch (e->ph) {
        case P_CHOICES: {
            int running = -1;
            for (int k = 0; k < e->n; k++) {
                const int i = (e->cur + k) % e->n;
                bool made;
                if (!choice_event(e, i, &made)) return false;
                if (made) {
                    e->cur = (i + 1) % e->n;
                    return true;
                }
                if (e->ch[i].ph != C_OVER && running < 0) running = i;
            }
            if (running < 0) {
                e->ph = P_USAGE;
                break;
            }
            if (serve_peer_gone(e->c)) return false;
            qvl_job_wait(e->ch[running].j, QVL_WAIT_TEXT, e->ch[running].sent,
                         e->n > 1 ? WAIT_MANY_MS : WAIT_MS);
            break;
        }
        case P_USAGE: {
            e->ph = P_DONE;
            if (!e->include_usage) break;
            serve_oai_usage u = {0};
            for (int i = 0; i < e->n; i++) {
                qvl_job *j = e->ch[i].j;
                pthread_mutex_lock(&j->mu);
                if (i == 0) {
                    u.prompt = j->n_ids;
                    u.cached = j->cached_tokens;
                }
                u.completion += j->completion_tokens;
                pthread_mutex_unlock(&j->mu);
            }
            return set_event(e, serve_oai_usage_chunk(&e->meta, &u));
        }
        case P_DONE:
            e->ph = P_END;
            free(e->pending);
            e->pending = strdup("data: [DONE]\n\n");
            e->n_pending = e->pending ? strlen(e->pending) : 0;
            e->at = 0;
            return e->pending != NULL;
        case P_END:
            return false;
        }
    }
}

static void cancel_all(sse *e) {
    for (int i = 0; i < e->n; i++) atomic_store(&e->ch[i].j->cancel, true);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *e = cls;
    if (e->at == e->n_pending) {
        if (!next_event(e)) {
            if (e->ph == P_END && e->at == e->n_pending) return MHD_CONTENT_READER_END_OF_STREAM;
            cancel_all(e);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = e->n_pending - e->at;
    if (n > max) n = max;
    memcpy(buf, e->pending + e->at, n);
    e->at += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    sse *e = cls;
    /* Still running: the client left (or the connection broke) before the end. */
    cancel_all(e);
    for (int i = 0; i < e->n; i++) qvl_job_release(e->ch[i].j);
    free(e->pending);
    free(e);
}

enum MHD_Result serve_sse_start(struct MHD_Connection *c, serve_server *s, qvl_job **jobs,
                                int n, const serve_oai_meta *meta, bool include_usage,
                                bool read_calls) {
    sse *e = calloc(1, sizeof *e);
    if (!e) {
        for (int i = 0; i < n; i++) {
            atomic_store(&jobs[i]->cancel, true);
            qvl_job_release(jobs[i]);
        }
        return MHD_NO;
    }
    e->n = n;
    for (int i = 0; i < n; i++) {
        e->ch[i].j = jobs[i];
        e->ch[i].read_calls = read_calls;
        /* A text completion's chunks carry text only: no role chunk first. */
        e->ch[i].ph = meta->api == SERVE_API_TEXT ? C_TEXT : C_ROLE;
        serve_toolcalls_init(&e->ch[i].calls);
    }
    e->s = s;
    e->c = c;
    snprintf(e->id, sizeof e->id, "%s", meta->id);
    e->meta = *meta;
    e->meta.id = e->id;
    e->include_usage = include_usage;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, e, stream_free);
    if (!r) {
        stream_free(e);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no"); /* nginx: pass events through */
    serve_cors_headers(c, s->cfg->cors, r);
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    serve_metrics_response(s->metrics, 200);
    return rc;
}
