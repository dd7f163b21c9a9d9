/* The Host header check of qvl serve: protection against DNS rebinding. A web page on another
 * site can make a browser send requests to 127.0.0.1 under a name it controls (its DNS answer
 * changes to 127.0.0.1); the browser then sends that name as Host. A server that listens on a
 * loopback address therefore answers only Host names that mean this machine, plus the names
 * given with --allow-host. A server listening on any other address accepts every Host: it is
 * reachable from the network anyway (that is what --host asked for). */
#ifndef QVL_SERVE_HOST_H
#define QVL_SERVE_HOST_H

#include <stdbool.h>

/* True when addr (an IPv4 or IPv6 literal, as --host takes) is a loopback address:
 * 127.0.0.0/8, ::1, or ::ffff:127.x.x.x. */
bool serve_host_is_loopback_address(const char *addr);

/* True when a request with this Host header (NULL: none) may be answered. listen_loopback:
 * serve_host_is_loopback_address(--host). allow: --allow-host's comma-separated names (NULL:
 * none; "*" anywhere in it accepts every Host). Accepted on a loopback listener: localhost,
 * NAME.localhost, 127.x.x.x, [::1], each with or without :PORT, case-insensitive, and a
 * request with no Host at all (HTTP/1.0: browsers always send one). */
bool serve_host_allowed(const char *host, bool listen_loopback, const char *allow);

#endif
