/* The HTTP side of qvl serve, on libmicrohttpd: one thread per connection (a connection
 * thread may block while its answer is generated; the engine thread never touches sockets). */
#ifndef QVL_SERVE_HTTP_H
#define QVL_SERVE_HTTP_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "serve_budget.h"
#include "serve_config.h"
#include "qvl/engine.h"
#include "qvl/engine_job.h"
#include "serve_metrics.h"
#include "serve_oai.h"

typedef struct serve_server {
    const serve_config *cfg;
    qvl_engine *engine;
    serve_metrics *metrics;
    serve_budget *budget;      /* picture memory (--max-image-memory), closed when stopping */
    const char *image_dir;     /* real path of --image-dir, or NULL */
    struct MHD_Daemon *daemon;
    struct serve_guard *guard; /* receive deadline (serve_guard.h) */
    bool listen_loopback;      /* --host is a loopback address: Host names are checked */
    long long started; /* Unix seconds: /v1/models' "created" */
    int port;          /* the port bound (--port 0 picks a free one) */
    /* Requests whose answer is not yet sent whole (from their first byte to libmicrohttpd's
     * completion callback): shutting down waits for them, since stopping the daemon closes
     * every socket, and an answer queued but not yet written would be lost with it. */
    pthread_mutex_t flight_mu;
    pthread_cond_t flight_cv;
    int in_flight;
} serve_server;

/* Listen on cfg->host:cfg->port. false: msg says why. */
bool serve_http_start(serve_server *s, char *msg, size_t msg_len);
/* Once every job has been finished (qvl_engine_stop): wait until each request in flight has
 * had its answer written (a 503, or a stream's error event and [DONE]), at most `seconds`
 * (a client that stops reading cannot hold the shutdown longer than that). */
void serve_http_drain(serve_server *s, int seconds);
/* Stop accepting, close every connection and join their threads. Jobs the connections wait
 * on must be finished first (qvl_engine_stop) so no thread stays blocked. */
void serve_http_stop(serve_server *s);

/* ---- shared by the handlers (serve_http.c, serve_chat.c, serve_sse.c) ---------------------- */
/* Queue a response with this body (taken; NULL: a 500 for lack of memory) and count it. */
enum MHD_Result serve_reply(struct MHD_Connection *c, serve_server *s, unsigned status,
                            const char *content_type, char *body);
/* An error in OpenAI's shape. */
enum MHD_Result serve_reply_error(struct MHD_Connection *c, serve_server *s, unsigned status,
                                  const char *message, const char *param, const char *code);
/* What every request still running or queued when the server stops is told (503, or a
 * stream's error event). */
#define SERVE_SHUTDOWN_MESSAGE "the server is shutting down"
/* The 503 body for a server that does not serve now: loading (code model_loading), shutting
 * down (shutting_down) or failed to load (model_unavailable). */
char *serve_unavailable_json(serve_server *s);
enum MHD_Result serve_reply_unavailable(struct MHD_Connection *c, serve_server *s);
/* True once the client has closed its side or reset the connection. */
bool serve_peer_gone(struct MHD_Connection *c);

/* POST /v1/chat/completions and /v1/completions with their whole body (serve_chat.c). */
enum MHD_Result serve_chat(struct MHD_Connection *c, serve_server *s, const char *body, size_t len);
enum MHD_Result serve_completions(struct MHD_Connection *c, serve_server *s, const char *body,
                                  size_t len);
/* POST /tokenize and /detokenize (serve_tokenize.c). */
enum MHD_Result serve_tokenize(struct MHD_Connection *c, serve_server *s, const char *body,
                               size_t len);
enum MHD_Result serve_detokenize(struct MHD_Connection *c, serve_server *s, const char *body,
                                 size_t len);

/* Answer with a Server-Sent Events stream of the jobs' answers, choice i from jobs[i] (n <=
 * SERVE_MAX_CHOICES), chunks interleaved (serve_sse.c); with read_calls the text goes through
 * the tool-call reader (serve_tools.h) and calls stream as delta.tool_calls; takes the caller's references to the
 * jobs. meta's strings are copied. */
enum MHD_Result serve_sse_start(struct MHD_Connection *c, serve_server *s, qvl_job **jobs,
                                int n, const serve_oai_meta *meta, bool include_usage,
                                bool read_calls);

#endif
