/* The receive deadline and the answers written beside libmicrohttpd (serve_guard.h says why).
 *
 * Every connection has an entry from MHD_CONNECTION_NOTIFY_STARTED to ..._CLOSED, kept in the
 * connection's socket context and in one list under the guard's mutex. libmicrohttpd closes the
 * socket only after the CLOSED notification, so while the watchdog holds the mutex every fd in
 * the list is still the connection's own: a shutdown() never reaches a reused descriptor. */
#define _POSIX_C_SOURCE 200809L

#include "serve_guard.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "serve_oai.h"

typedef enum guard_phase { G_WAITING, G_RECEIVING, G_ANSWERING } guard_phase;

typedef struct guard_entry {
    struct guard_entry *prev, *next;
    int fd;
    guard_phase phase;
    double since; /* CLOCK_MONOTONIC seconds: opened, or the previous answer sent */
    bool cut;     /* the watchdog shut the socket */
} guard_entry;

struct serve_guard {
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_t watchdog;
    guard_entry *head;
    bool stop;
    int receive_timeout;
    serve_metrics *metrics;
    bool verbose;
};

/* The connection this thread serves (libmicrohttpd runs one thread per connection), set when
 * its request line arrives; the logger hook needs it and is given nothing else. */
static _Thread_local struct MHD_Connection *tl_connection;
static _Thread_local bool tl_answered; /* the hook answered this request already */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool serve_guard_plain_decimal(const char *s, unsigned long long *value) {
    unsigned long long v = 0;
    if (!s || !*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (ULLONG_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (value) *value = v;
    return true;
}

/* Writes a whole response with an OpenAI error body on fd, best effort: the socket is
 * non-blocking and the answer (under 1 KiB) fits its send buffer. */
static void write_raw_error(int fd, int status, const char *reason, const char *message,
                            const char *code) {
    char *body = serve_oai_error(status, message, NULL, code);
    if (!body) return;
    char head[256];
    size_t n_body = strlen(body);
    int n = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\nContent-Length: %zu\r\n\r\n", status, reason, n_body);
    if (n > 0 && (size_t)n < sizeof head && send(fd, head, (size_t)n, MSG_NOSIGNAL) == n)
        (void)send(fd, body, n_body, MSG_NOSIGNAL);
    free(body);
}

static void cut(serve_guard *g, guard_entry *e) {
    if (e->phase == G_RECEIVING) {
        char msg[200];
        snprintf(msg, sizeof msg, "the request did not arrive whole within %d s "
                 "(--receive-timeout); send it faster, or raise the limit", g->receive_timeout);
        write_raw_error(e->fd, 408, "Request Timeout", msg, "request_timeout");
        serve_metrics_response(g->metrics, 408);
    }
    shutdown(e->fd, SHUT_RDWR); /* libmicrohttpd's thread sees the end and closes */
    e->cut = true;
    if (g->verbose)
        fprintf(stderr, "qvl serve: http: a connection %s within %d s (--receive-timeout): "
                "closed\n", e->phase == G_RECEIVING ? "did not send its whole request"
                                                    : "sent no request line",
                g->receive_timeout);
}

static void *watchdog_main(void *arg) {
    serve_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        const double now = now_s();
        double next = now + 3600; /* nothing to watch: sleep until woken */
        for (guard_entry *e = g->head; e; e = e->next) {
            if (e->cut || e->phase == G_ANSWERING) continue;
            const double deadline = e->since + g->receive_timeout;
            if (deadline <= now) cut(g, e);
            else if (deadline < next) next = deadline;
        }
        struct timespec until;
        until.tv_sec = (time_t)next;
        until.tv_nsec = (long)((next - (double)until.tv_sec) * 1e9);
        pthread_cond_timedwait(&g->wake, &g->mu, &until);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

serve_guard *serve_guard_create(int receive_timeout, serve_metrics *metrics, bool verbose) {
    serve_guard *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->receive_timeout = receive_timeout;
    g->metrics = metrics;
    g->verbose = verbose;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&g->mu, NULL);
    if (pthread_create(&g->watchdog, NULL, watchdog_main, g) != 0) {
        pthread_cond_destroy(&g->wake);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    return g;
}

void serve_guard_free(serve_guard *g) {
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->watchdog, NULL);
    /* Every connection was closed (MHD_stop_daemon), so the list is empty; free what is left
     * all the same should a notification have been missed. */
    while (g->head) {
        guard_entry *e = g->head;
        g->head = e->next;
        free(e);
    }
    pthread_cond_destroy(&g->wake);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void serve_guard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                               enum MHD_ConnectionNotificationCode code) {
    serve_guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        guard_entry *e = ci ? calloc(1, sizeof *e) : NULL;
        *socket_context = e;
        if (!e) return; /* unguarded: --timeout still closes it when idle */
        e->fd = ci->connect_fd;
        e->phase = G_WAITING;
        e->since = now_s();
        pthread_mutex_lock(&g->mu);
        e->next = g->head;
        if (g->head) g->head->prev = e;
        g->head = e;
        pthread_cond_signal(&g->wake);
        pthread_mutex_unlock(&g->mu);
        return;
    }
    guard_entry *e = *socket_context;
    if (!e) return;
    pthread_mutex_lock(&g->mu);
    if (e->prev) e->prev->next = e->next;
    else g->head = e->next;
    if (e->next) e->next->prev = e->prev;
    pthread_mutex_unlock(&g->mu);
    free(e);
    *socket_context = NULL;
}

static guard_entry *entry_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void *serve_guard_on_request_line(void *cls, const char *uri, struct MHD_Connection *c) {
    serve_guard *g = cls;
    (void)uri;
    tl_connection = c;
    tl_answered = false;
    guard_entry *e = entry_of(c);
    if (e) {
        pthread_mutex_lock(&g->mu);
        if (e->phase == G_WAITING) e->phase = G_RECEIVING;
        pthread_mutex_unlock(&g->mu);
    }
    return NULL;
}

bool serve_guard_request_received(serve_guard *g, struct MHD_Connection *c) {
    guard_entry *e = entry_of(c);
    if (!g || !e) return true;
    pthread_mutex_lock(&g->mu);
    e->phase = G_ANSWERING;
    const bool cut_already = e->cut;
    pthread_mutex_unlock(&g->mu);
    return !cut_already;
}

void serve_guard_request_completed(serve_guard *g, struct MHD_Connection *c) {
    guard_entry *e = entry_of(c);
    if (!g || !e) return;
    pthread_mutex_lock(&g->mu);
    e->phase = G_WAITING;
    e->since = now_s();
    pthread_cond_signal(&g->wake);
    pthread_mutex_unlock(&g->mu);
}

void serve_guard_on_mhd_log(serve_guard *g) {
    struct MHD_Connection *c = tl_connection;
    if (!c || tl_answered) return;
    /* With a Transfer-Encoding libmicrohttpd ignores Content-Length (the handler refuses the
     * pair); otherwise it parses the first Content-Length header. */
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!cl || serve_guard_plain_decimal(cl, NULL)) return;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return;
    tl_answered = true;
    bool digits = cl[0] != '\0';
    for (const char *p = cl; *p; p++) digits = digits && *p >= '0' && *p <= '9';
    if (digits)
        write_raw_error(ci->connect_fd, 413, "Content Too Large",
                        "Content-Length is larger than 2^64 - 1 (and than --max-body)",
                        "body_too_large");
    else
        write_raw_error(ci->connect_fd, 400, "Bad Request",
                        "Content-Length must be a plain decimal number of bytes",
                        "invalid_content_length");
    serve_metrics_response(g->metrics, digits ? 413 : 400);
    /* Nothing may follow: libmicrohttpd's own (doubled) answer fails to send and it closes. */
    shutdown(ci->connect_fd, SHUT_WR);
    serve_guard_request_received(g, c);
}
