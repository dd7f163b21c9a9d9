/* The streamed answer: "data: {chunk}\n\n" events in OpenAI's chat.completion.chunk format,
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

#include "serve_http.h"

#define WAIT_MS 100

typedef enum phase { P_ROLE, P_TEXT, P_FINISH, P_USAGE, P_DONE, P_END } phase;

typedef struct sse {
    serve_server *s;
    struct MHD_Connection *c;
    qvl_job *j;
    char id[48];
    serve_oai_meta meta;
    bool include_usage;
    phase ph;
    size_t sent;   /* answer bytes already streamed */
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

/* The next event; false at the end of the stream (or out of memory, or the client left). */
static bool next_event(sse *e) {
    qvl_job *j = e->j;
    for (;;) {
        switch (e->ph) {
        case P_ROLE:
            e->ph = P_TEXT;
            return set_event(e, serve_oai_chunk(&e->meta, true, "", NULL, e->include_usage));
        case P_TEXT: {
            pthread_mutex_lock(&j->mu);
            if (j->visible > e->sent) {
                size_t n = j->visible - e->sent;
                char *text = malloc(n + 1);
                if (text) {
                    memcpy(text, j->text + e->sent, n);
                    text[n] = '\0';
                    e->sent = j->visible;
                }
                pthread_mutex_unlock(&j->mu);
                if (!text) return false;
                bool ok = set_event(e, serve_oai_chunk(&e->meta, false, text, NULL, e->include_usage));
                free(text);
                return ok;
            }
            const bool finished = j->finish != QVL_JOB_RUNNING;
            pthread_mutex_unlock(&j->mu);
            if (finished) {
                e->ph = P_FINISH;
                break;
            }
            if (serve_peer_gone(e->c)) return false;
            qvl_job_wait(j, QVL_WAIT_TEXT, e->sent, WAIT_MS);
            break;
        }
        case P_FINISH: {
            pthread_mutex_lock(&j->mu);
            qvl_finish f = j->finish;
            char msg[sizeof j->error];
            memcpy(msg, j->error, sizeof msg);
            pthread_mutex_unlock(&j->mu);
            if (f == QVL_FINISH_CANCELLED) return false;
            e->ph = P_USAGE;
            /* Headers are gone: the error travels as an event. (A stream starts after the
             * prefill, so TIMEOUT, which ends a job before it, does not reach here.) */
            if (f == QVL_FINISH_ERROR || f == QVL_FINISH_TIMEOUT)
                return set_event(e, serve_oai_error(500, msg, NULL, NULL));
            return set_event(e, serve_oai_chunk(&e->meta, false, NULL,
                                                f == QVL_FINISH_LENGTH ? "length" : "stop",
                                                e->include_usage));
        }
        case P_USAGE:
            e->ph = P_DONE;
            if (!e->include_usage) break;
            pthread_mutex_lock(&j->mu);
            serve_oai_usage u = {.prompt = j->n_ids, .completion = j->completion_tokens,
                                 .cached = j->cached_tokens};
            pthread_mutex_unlock(&j->mu);
            return set_event(e, serve_oai_usage_chunk(&e->meta, &u));
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

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    sse *e = cls;
    if (e->at == e->n_pending) {
        if (!next_event(e)) {
            if (e->ph == P_END && e->at == e->n_pending) return MHD_CONTENT_READER_END_OF_STREAM;
            atomic_store(&e->j->cancel, true);
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
    atomic_store(&e->j->cancel, true);
    qvl_job_release(e->j);
    free(e->pending);
    free(e);
}

enum MHD_Result serve_sse_start(struct MHD_Connection *c, serve_server *s, qvl_job *j,
                                const serve_oai_meta *meta, bool include_usage) {
    sse *e = calloc(1, sizeof *e);
    if (!e) {
        atomic_store(&j->cancel, true);
        qvl_job_release(j);
        return MHD_NO;
    }
    e->s = s;
    e->c = c;
    e->j = j;
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
    enum MHD_Result rc = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    serve_metrics_response(s->metrics, 200);
    return rc;
}
