/* The Host header check (serve_host.h says why). */
#define _POSIX_C_SOURCE 200809L

#include "serve_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

bool serve_host_is_loopback_address(const char *addr) {
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, addr, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, addr, &a6) != 1) return false;
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
}

/* The name part of a Host value, [begin, end): the port (":digits") and one trailing dot of a
 * fully qualified name are left out. false when the value is not name[:port] or [v6][:port]. */
static bool split_host(const char *host, const char **begin, size_t *len) {
    const char *port;
    if (host[0] == '[') {
        const char *close = strchr(host, ']');
        if (!close) return false;
        *begin = host;
        *len = (size_t)(close - host) + 1;
        port = close + 1;
    } else {
        const char *colon = strchr(host, ':');
        *begin = host;
        *len = colon ? (size_t)(colon - host) : strlen(host);
        port = host + *len;
        if (*len > 1 && host[*len - 1] == '.') (*len)--;
    }
    if (*port == '\0') return *len > 0;
    if (*port != ':' || port[1] == '\0') return false;
    for (const char *p = port + 1; *p; p++)
        if (*p < '0' || *p > '9') return false;
    return *len > 0;
}

static bool name_is(const char *name, size_t len, const char *want) {
    return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

static bool loopback_name(const char *name, size_t len) {
    static const char suffix[] = ".localhost";
    const size_t n_suffix = sizeof suffix - 1;
    if (name_is(name, len, "localhost") || name_is(name, len, "[::1]")) return true;
    if (len > n_suffix && strncasecmp(name + len - n_suffix, suffix, n_suffix) == 0) return true;
    char buf[INET_ADDRSTRLEN];
    struct in_addr a4;
    if (len >= sizeof buf) return false;
    memcpy(buf, name, len);
    buf[len] = '\0';
    return inet_pton(AF_INET, buf, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

/* name is one of allow's comma-separated entries (spaces around them ignored), or allow has
 * the entry "*". */
static bool allow_listed(const char *name, size_t len, const char *allow) {
    const char *p = allow;
    while (p && *p) {
        while (*p == ' ' || *p == ',') p++;
        const char *end = p;
        while (*end && *end != ',') end++;
        size_t n = (size_t)(end - p);
        while (n > 0 && p[n - 1] == ' ') n--;
        if ((n == 1 && p[0] == '*') || (n == len && n > 0 && strncasecmp(p, name, n) == 0))
            return true;
        p = end;
    }
    return false;
}

bool serve_host_allowed(const char *host, bool listen_loopback, const char *allow) {
    if (!listen_loopback) return true;
    if (allow && allow_listed("", 0, allow)) return true; /* "*" */
    if (!host) return true;
    const char *name;
    size_t len;
    if (!split_host(host, &name, &len)) return false;
    return loopback_name(name, len) || (allow && allow_listed(name, len, allow));
}
