/* The receive deadline of qvl serve's connections (--receive-timeout) and the answers that
 * libmicrohttpd cannot give itself.
 *
 * libmicrohttpd's own timeout (--timeout) counts idle time only, so a client sending a byte
 * every few seconds holds a connection forever (slowloris). The guard tracks every connection
 * through three phases:
 *   WAITING    opened, or its previous answer sent: no request line yet;
 *   RECEIVING  the request line arrived, the headers or the body have not all arrived;
 *   ANSWERING  the whole request is in: the handler runs (bounded by --request-timeout).
 * A request must arrive whole within --receive-timeout seconds of the connection's opening or
 * of the previous answer on it. A watchdog thread cuts connections past that: one in WAITING
 * is closed silently, one in RECEIVING first gets a 408 with an OpenAI error body.
 *
 * The 408 (and the clean 400/413 for a Content-Length libmicrohttpd cannot parse, below) is
 * written on the socket directly: libmicrohttpd 0.9.75 only queues answers before or after the
 * body, from the connection's own thread. In those phases libmicrohttpd itself writes nothing,
 * so the two writers do not interleave. */
#ifndef QVL_SERVE_GUARD_H
#define QVL_SERVE_GUARD_H

#include <microhttpd.h>
#include <stdbool.h>

#include "serve_metrics.h"

typedef struct serve_guard serve_guard;

/* receive_timeout: seconds, >= 1. NULL when out of memory or no thread could start. */
serve_guard *serve_guard_create(int receive_timeout, serve_metrics *metrics, bool verbose);
/* Stops the watchdog; call after MHD_stop_daemon (every connection closed). NULL is fine. */
void serve_guard_free(serve_guard *g);

/* libmicrohttpd callbacks: MHD_OPTION_NOTIFY_CONNECTION and MHD_OPTION_URI_LOG_CALLBACK (cls:
 * the guard). The latter returns NULL: the handler's per-request state starts empty. */
void serve_guard_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                               enum MHD_ConnectionNotificationCode code);
void *serve_guard_on_request_line(void *cls, const char *uri, struct MHD_Connection *c);

/* The handler has the whole request (or answered before its body): the deadline stops.
 * false: the watchdog already cut this connection; the handler should give up (MHD_NO). */
bool serve_guard_request_received(serve_guard *g, struct MHD_Connection *c);
/* The answer is sent (MHD_OPTION_NOTIFY_COMPLETED): the next request's deadline starts. */
void serve_guard_request_completed(serve_guard *g, struct MHD_Connection *c);

/* Called from the libmicrohttpd logger. libmicrohttpd 0.9.75 answers a Content-Length it cannot
 * parse (not a plain decimal number, or above 2^64 - 1) with its response headers written twice
 * (it queues an error while parsing the headers, then its state machine starts the reply again),
 * and never calls the handler. The log message comes first, on the connection's own thread: if
 * that thread's current request has such a Content-Length, this writes one clean 400 (413 for an
 * overflow) and shuts the socket, so libmicrohttpd's own attempt fails and it closes. */
void serve_guard_on_mhd_log(serve_guard *g);

/* True when s is a plain decimal number (digits only, at least one) that fits in 64 bits. */
bool serve_guard_plain_decimal(const char *s, unsigned long long *value);

#endif
