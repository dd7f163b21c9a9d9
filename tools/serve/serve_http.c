/* Daemon setup, routing, authentication, request bodies and the small endpoints.
 *
 * Checks that need no body answer on the first call of the request (before the body is read):
 * 400 for ambiguous framing or a missing Host, 403 for a foreign Host (serve_host.h), 404, 405,
 * 401, 503, 415 and 413 when Content-Length is too big. A body sent without a length
 * (chunked) that grows past --max-body has the connection closed, since libmicrohttpd cannot
 * queue an answer in the middle of an upload. */
#define _GNU_SOURCE /* POLLRDHUP */

#include "serve_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "serve_auth.h"
#include "serve_cors.h"
#include "serve_guard.h"
#include "serve_host.h"
#include "serve_json.h"
#include "serve_oai.h"
#include "serve_webui.h"
#include "serve_props.h"

/* Bodies of at least this many bytes (buffer capacity) give memory back when their request ends. */
#define SERVE_TRIM_AFTER_BYTES ((size_t)1 << 20)

typedef enum route {
    R_NOT_FOUND, R_CHAT, R_COMPLETIONS, R_TOKENIZE, R_DETOKENIZE, /* POST, with a body */
    R_MODELS, R_MODEL, R_HEALTH, R_METRICS, R_SLOTS, R_PROPS, R_WEBUI, /* GET */
} route;

#define MODEL_PREFIX "/v1/models/"

static bool is_post(route r) { return r >= R_CHAT && r <= R_DETOKENIZE; }

typedef struct conn_state {
    route r;
    char *body;
    size_t len, cap;
    serve_json_stream scan; /* commas so far: refuses a body of too many values as it arrives */
    bool too_many_values;   /* refused: the rest of the body is read and dropped */
} conn_state;

enum MHD_Result serve_reply(struct MHD_Connection *c, serve_server *s, unsigned status,
                            const char *content_type, char *body) {
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        status = 500;
        content_type = "application/json";
        body = strdup(oom);
        if (!body) return MHD_NO;
    }
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    serve_cors_headers(c, s->cfg->cors, r);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    serve_metrics_response(s->metrics, (int)status);
    return ok;
}

enum MHD_Result serve_reply_error(struct MHD_Connection *c, serve_server *s, unsigned status,
                                  const char *message, const char *param, const char *code) {
    return serve_reply(c, s, status, "application/json",
                       serve_oai_error((int)status, message, param, code));
}

char *serve_unavailable_json(serve_server *s) {
    switch (qvl_engine_state(s->engine)) {
    case QVL_ENGINE_LOADING:
        return serve_oai_error(503, "the model is loading; retry when GET /health says ok", NULL,
                               "model_loading");
    case QVL_ENGINE_STOPPING:
        return serve_oai_error(503, SERVE_SHUTDOWN_MESSAGE, NULL, "shutting_down");
    default:
        return serve_oai_error(503, "the model could not be loaded (see the server's log)", NULL,
                               "model_unavailable");
    }
}

enum MHD_Result serve_reply_unavailable(struct MHD_Connection *c, serve_server *s) {
    return serve_reply(c, s, 503, "application/json", serve_unavailable_json(s));
}

/* poll() with POLLRDHUP reports the client's FIN (or a reset) even while bytes it sent earlier,
 * such as a pipelined next request, wait unread; a peek at the next byte would see those bytes
 * and never the close. */
bool serve_peer_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
#ifdef POLLRDHUP
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    if (poll(&p, 1, 0) > 0) return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
    return false;
#else
    char byte;
    ssize_t n = recv(ci->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true; /* orderly shutdown by the client */
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
#endif
}

static void flight_add(serve_server *s, int d) {
    pthread_mutex_lock(&s->flight_mu);
    s->in_flight += d;
    if (s->in_flight == 0) pthread_cond_broadcast(&s->flight_cv);
    pthread_mutex_unlock(&s->flight_mu);
}

static route route_of(const char *url, const serve_config *cfg) {
    static const struct {
        const char *path;
        route r;
    } routes[] = {{"/v1/chat/completions", R_CHAT}, {"/v1/completions", R_COMPLETIONS},
                  {"/tokenize", R_TOKENIZE},         {"/detokenize", R_DETOKENIZE},
                  {"/v1/models", R_MODELS},          {"/health", R_HEALTH},
                  {"/metrics", R_METRICS},           {"/slots", R_SLOTS},
                  {"/props", R_PROPS}};
    if (strcmp(url, "/") == 0 && !cfg->no_webui) return R_WEBUI;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0)
            return routes[i].r == R_SLOTS && cfg->no_slots ? R_NOT_FOUND : routes[i].r;
    if (strncmp(url, MODEL_PREFIX, strlen(MODEL_PREFIX)) == 0 && url[strlen(MODEL_PREFIX)])
        return R_MODEL;
    return R_NOT_FOUND;
}

static bool authorized(struct MHD_Connection *c, const serve_config *cfg) {
    return serve_auth_key_index(c, cfg) != SERVE_KEY_DENIED;
}

static bool json_content_type(struct MHD_Connection *c) {
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    static const char want[] = "application/json";
    if (!ct || strncasecmp(ct, want, sizeof want - 1) != 0) return false;
    char next = ct[sizeof want - 1];
    return next == '\0' || next == ';' || next == ' ' || next == '\t';
}

static enum MHD_Result reply_405(struct MHD_Connection *c, serve_server *s, const char *allow,
                                  const char *msg) {
    char *body = serve_oai_error(405, msg, NULL, "method_not_allowed");
    struct MHD_Response *r =
        body ? MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE) : NULL;
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    serve_cors_headers(c, s->cfg->cors, r);
    enum MHD_Result rc = MHD_queue_response(c, 405, r);
    MHD_destroy_response(r);
    serve_metrics_response(s->metrics, 405);
    return rc;
}

static enum MHD_Result get_endpoint(struct MHD_Connection *c, serve_server *s, route r,
                                    const char *url) {
    qvl_engine_phase st = qvl_engine_state(s->engine);
    switch (r) {
    case R_MODEL: {
        /* libmicrohttpd hands the path %-decoded: an alias with a '/' arrives whole. */
        const char *id = url + strlen(MODEL_PREFIX);
        if (strcmp(id, s->cfg->model_id) == 0)
            return serve_reply(c, s, 200, "application/json",
                               serve_oai_model(s->cfg->model_id, s->started));
        char msg[200];
        snprintf(msg, sizeof msg, "the model '%.64s' does not exist: this server serves '%.64s'",
                 id, s->cfg->model_id);
        return serve_reply_error(c, s, 404, msg, "model", "model_not_found");
    }
    case R_PROPS:
        if (st != QVL_ENGINE_READY) return serve_reply_unavailable(c, s);
        return serve_reply(c, s, 200, "application/json", serve_props_json(s));
    case R_HEALTH:
        return st == QVL_ENGINE_READY
                   ? serve_reply(c, s, 200, "application/json", strdup("{\"status\":\"ok\"}"))
                   : serve_reply(c, s, 503, "application/json",
                                 strdup(st == QVL_ENGINE_LOADING ? "{\"status\":\"loading\"}"
                                                            : "{\"status\":\"unavailable\"}"));
    case R_MODELS:
        return serve_reply(c, s, 200, "application/json",
                           serve_oai_models(s->cfg->model_id, s->started));
    case R_METRICS:
        return serve_reply(c, s, 200, "text/plain; version=0.0.4; charset=utf-8",
                           serve_metrics_render(s->metrics));
    case R_WEBUI:
        return serve_webui_reply(c, s);
    case R_SLOTS: {
        if (st != QVL_ENGINE_READY) return serve_reply_unavailable(c, s);
        qvl_engine_slot_info info[256]; /* --parallel is at most 256 */
        const int n = qvl_engine_slot_info_get(s->engine, info, 256);
        return serve_reply(c, s, 200, "application/json",
                           serve_oai_slots(info, n < 256 ? n : 256, s->cfg->ctx));
    }
    default:
        return serve_reply_error(c, s, 404, "not found", NULL, "not_found");
    }
}

typedef struct header_count {
    const char *name;
    int n;
} header_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    (void)value;
    header_count *hc = cls;
    if (key && strcasecmp(key, hc->name) == 0) hc->n++;
    return MHD_YES;
}

static int header_count_of(struct MHD_Connection *c, const char *name) {
    header_count hc = {name, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &hc);
    return hc.n;
}

/* The framing and the Host of a request, checked before anything else. A Content-Length
 * libmicrohttpd cannot parse never reaches here (serve_guard_on_mhd_log answers it); two of
 * them, or one beside a Transfer-Encoding, leave the body's end ambiguous (request smuggling
 * through a proxy that reads the other one), so they are refused (RFC 9112, section 6.3). */
static bool answer_bad_framing_or_host(struct MHD_Connection *c, serve_server *s,
                                       const char *version, enum MHD_Result *rc) {
    char msg[320];
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (header_count_of(c, MHD_HTTP_HEADER_HOST) > 1 ||
        (!host && strcmp(version, MHD_HTTP_VERSION_1_0) != 0)) {
        *rc = serve_reply_error(c, s, 400, "send exactly one Host header (HTTP/1.1 requires it)",
                                NULL, "invalid_host");
        return true;
    }
    if (!serve_host_allowed(host, s->listen_loopback, s->cfg->allow_host)) {
        snprintf(msg, sizeof msg, "Host '%.64s' is not allowed: this server listens on a loopback "
                 "address and answers Host localhost, *.localhost, 127.x.x.x or [::1] only (DNS "
                 "rebinding protection); connect by one of those, or start qvl serve with "
                 "--allow-host NAME", host);
        *rc = serve_reply_error(c, s, 403, msg, NULL, "host_not_allowed");
        return true;
    }
    const int n_length = header_count_of(c, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (n_length > 1) {
        snprintf(msg, sizeof msg, "the request has %d Content-Length headers; send one", n_length);
        *rc = serve_reply_error(c, s, 400, msg, NULL, "invalid_content_length");
        return true;
    }
    if (n_length == 1 &&
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING)) {
        *rc = serve_reply_error(c, s, 400, "send either Content-Length or Transfer-Encoding, not "
                                "both", NULL, "invalid_content_length");
        return true;
    }
    return false;
}

/* First call of a request: everything that can be decided from the headers. Returns true when
 * a response was queued (*rc holds the result). */
static bool answer_early(struct MHD_Connection *c, serve_server *s, route r, const char *url,
                         const char *method, const char *version, enum MHD_Result *rc) {
    if (answer_bad_framing_or_host(c, s, version, rc)) return true;
    const bool post = is_post(r);
    const bool allowed = post ? strcmp(method, "POST") == 0
                              : strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    char msg[160];
    if (r == R_NOT_FOUND) {
        *rc = serve_reply_error(c, s, 404, "not found: the server answers POST "
                                "/v1/chat/completions, /v1/completions, /tokenize, /detokenize; "
                                "GET /v1/models, /props, /health, /metrics and /slots",
                                NULL, "not_found");
        return true;
    }
    /* A browser's preflight carries no Authorization: it is answered before the key check. */
    if (s->cfg->cors && strcmp(method, "OPTIONS") == 0) {
        *rc = serve_cors_preflight(c, s->cfg->cors, post ? "POST, OPTIONS" : "GET, HEAD, OPTIONS");
        serve_metrics_response(s->metrics, 204);
        return true;
    }
    if (!allowed) {
        snprintf(msg, sizeof msg, "method %.16s is not allowed here (use %s)", method,
                 post ? "POST" : "GET");
        *rc = reply_405(c, s, post ? "POST" : "GET, HEAD", msg);
        return true;
    }
    /* The page holds no data; it asks for the key and sends it with its own requests. */
    if (r != R_HEALTH && r != R_WEBUI && !authorized(c, s->cfg)) {
        *rc = serve_reply_error(c, s, 401, "invalid API key (send Authorization: Bearer KEY)",
                                NULL, "invalid_api_key");
        return true;
    }
    if (!post) {
        *rc = get_endpoint(c, s, r, url);
        return true;
    }
    if (qvl_engine_state(s->engine) != QVL_ENGINE_READY) {
        *rc = serve_reply_unavailable(c, s);
        return true;
    }
    if (!json_content_type(c)) {
        *rc = serve_reply_error(c, s, 415, "the body must be sent as Content-Type: "
                                "application/json", NULL, "unsupported_media_type");
        return true;
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        unsigned long long n = 0;
        if (!serve_guard_plain_decimal(cl, &n) || n > s->cfg->max_body) {
            snprintf(msg, sizeof msg, "the body is larger than %zu bytes (--max-body)",
                     s->cfg->max_body);
            *rc = serve_reply_error(c, s, 413, msg, NULL, "body_too_large");
            return true;
        }
    }
    return false;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    serve_server *s = cls;
    conn_state *st = *con_cls;
    if (!st) {
        st = calloc(1, sizeof *st);
        if (!st) return MHD_NO;
        *con_cls = st;
        flight_add(s, 1);
        st->r = route_of(url, s->cfg);
        enum MHD_Result rc;
        if (answer_early(c, s, st->r, url, method, version, &rc)) {
            /* libmicrohttpd discards any body and closes after this answer. */
            serve_guard_request_received(s->guard, c);
            return rc;
        }
        return MHD_YES; /* the body follows */
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (st->len + n > s->cfg->max_body) return MHD_NO; /* chunked and too large: close */
        if (st->too_many_values) return MHD_YES;
        if (!serve_json_stream_feed(&st->scan, upload_data, n)) {
            st->too_many_values = true;
            free(st->body);
            st->body = NULL;
            st->len = st->cap = 0;
            return MHD_YES;
        }
        if (st->len + n + 1 > st->cap) {
            size_t cap = st->cap ? st->cap : 4096;
            while (cap < st->len + n + 1) cap *= 2;
            char *grown = realloc(st->body, cap);
            if (!grown) return MHD_NO;
            st->body = grown;
            st->cap = cap;
        }
        memcpy(st->body + st->len, upload_data, n);
        st->len += n;
        st->body[st->len] = '\0';
        return MHD_YES;
    }
    if (!serve_guard_request_received(s->guard, c)) return MHD_NO; /* past --receive-timeout */
    if (st->too_many_values) {
        char msg[160];
        snprintf(msg, sizeof msg, "the JSON body holds more than the %d values a request may "
                 "hold (SERVE_MAX_JSON_VALUES)", SERVE_MAX_JSON_VALUES);
        return serve_reply_error(c, s, 413, msg, NULL, "too_many_json_values");
    }
    if (st->len == 0)
        return serve_reply_error(c, s, 400, "the request has no body", NULL, "invalid_json");
    switch (st->r) {
    case R_TOKENIZE: return serve_tokenize(c, s, st->body, st->len);
    case R_DETOKENIZE: return serve_detokenize(c, s, st->body, st->len);
    case R_COMPLETIONS: return serve_completions(c, s, st->body, st->len);
    default: return serve_chat(c, s, st->body, st->len);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    serve_server *s = cls;
    (void)toe;
    serve_guard_request_completed(s->guard, c);
    conn_state *st = *con_cls;
    if (!st) return;
    const bool big = st->cap >= SERVE_TRIM_AFTER_BYTES;
    free(st->body);
    free(st);
    *con_cls = NULL;
    flight_add(s, -1);
#ifdef __GLIBC__
    /* glibc keeps what a thread freed in that thread's arena for reuse, and one connection
     * thread per client means many arenas: after a big body (and the tree and pictures made
     * from it) hand the free pages of every arena back to the system. */
    if (big) malloc_trim(0);
#else
    (void)big;
#endif
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    const serve_server *s = cls;
    serve_guard_on_mhd_log(s->guard);
    if (!s->cfg->verbose) return;
    fprintf(stderr, "qvl serve: http: ");
    vfprintf(stderr, fmt, ap);
}

bool serve_http_start(serve_server *s, char *msg, size_t msg_len) {
    const serve_config *cfg = s->cfg;
    struct sockaddr_storage addr;
    memset(&addr, 0, sizeof addr);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&addr;
    if (inet_pton(AF_INET, cfg->host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(msg, msg_len, "--host %s: not an IPv4 or IPv6 address", cfg->host);
        return false;
    }
    s->started = (long long)time(NULL);
    pthread_mutex_init(&s->flight_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the drain's bound ignores clock changes */
    pthread_cond_init(&s->flight_cv, &ca);
    pthread_condattr_destroy(&ca);
    s->in_flight = 0;
    s->listen_loopback = serve_host_is_loopback_address(cfg->host);
    s->guard = serve_guard_create(cfg->receive_timeout, s->metrics, cfg->verbose);
    if (!s->guard) {
        snprintf(msg, msg_len, "cannot start the connection watchdog (out of memory or threads)");
        serve_http_stop(s);
        return false;
    }
    /* The logger goes first so that it also receives messages about the options after it.
     * Connections over the per-address limit are closed by the listener as soon as accepted. */
    s->daemon = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_log, (void *)s, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)cfg->timeout, MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)cfg->max_connections_per_ip,
        MHD_OPTION_NOTIFY_CONNECTION, serve_guard_on_connection, s->guard,
        MHD_OPTION_URI_LOG_CALLBACK, serve_guard_on_request_line, s->guard,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        serve_http_stop(s);
        snprintf(msg, msg_len, "cannot listen on %s port %d (in use, or not an address of this "
                 "machine)", cfg->host, cfg->port);
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : cfg->port;
    return true;
}

void serve_http_drain(serve_server *s, int seconds) {
    if (!s->daemon) return;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += seconds;
    pthread_mutex_lock(&s->flight_mu);
    while (s->in_flight > 0)
        if (pthread_cond_timedwait(&s->flight_cv, &s->flight_mu, &until) != 0) break;
    pthread_mutex_unlock(&s->flight_mu);
}

void serve_http_stop(serve_server *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    serve_guard_free(s->guard); /* after the daemon: every connection is closed */
    s->guard = NULL;
    pthread_cond_destroy(&s->flight_cv);
    pthread_mutex_destroy(&s->flight_mu);
}
