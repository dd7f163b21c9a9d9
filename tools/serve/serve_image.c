/* image_url -> preprocessed picture. */
#define _XOPEN_SOURCE 700

#include "serve_image.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qvl/file.h"
#include "qvl/image.h"

/* Pictures decode on their connections' threads, several at once: what bounds their memory is
 * the budget (serve_budget.h), not a lock. */

/* The client is looked at (a non-blocking peek at its socket) at most this often. */
#define CLIENT_CHECK_SECONDS 0.05
/* A wait for budget asks whether to give up this often (ms). */
#define BUDGET_POLL_MS 100

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The picture budget's give-back, as qvl_picture_free calls it. */
static void budget_give_back(void *arg, int64_t bytes) { serve_budget_release(arg, bytes); }

bool serve_image_should_stop(serve_image_guard *g) {
    if (!g) return false;
    if (g->why != SERVE_IMAGE_GO_ON) return true;
    if (g->budget && serve_budget_closed(g->budget)) {
        g->why = SERVE_IMAGE_STOPPING;
        return true;
    }
    const double now = monotonic_seconds();
    if (g->deadline > 0 && now >= g->deadline) {
        g->why = SERVE_IMAGE_DEADLINE;
        return true;
    }
    if (g->client_gone && now >= g->next_client_check) {
        g->next_client_check = now + CLIENT_CHECK_SECONDS;
        if (g->client_gone(g->client_arg)) {
            g->why = SERVE_IMAGE_CLIENT_GONE;
            return true;
        }
    }
    return false;
}

static bool guard_stop(void *arg) { return serve_image_should_stop(arg); }

qvl_image_stop serve_image_stop_of(serve_image_guard *g) {
    return (qvl_image_stop){.should_stop = g ? guard_stop : NULL, .arg = g};
}

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

int64_t serve_base64_decode(const char *in, size_t n, unsigned char *out) {
    uint32_t acc = 0;
    int bits = 0, pad = 0;
    int64_t len = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
        if (c == '=') {
            pad++;
            if (pad > 2) return -1;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pad > 0) return -1; /* outside the alphabet, or data after padding */
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[len++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    /* 6 leftover bits cannot make a byte: the input was cut after one character of a group. */
    if (bits >= 6) return -1;
    return len;
}

static int failf(char *msg, size_t msg_len, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msg_len, fmt, ap);
    va_end(ap);
    return status;
}

/* Decoded picture -> encoder input; frees img. */
static int preprocess(qvl_image *img, const qvl_picture_rules *rules, const char *what,
                      serve_image *out, char *msg, size_t msg_len) {
    qvl_error err = {0};
    qvl_status st = qvl_picture_make(rules, img, out, &err);
    if (st != QVL_OK)
        return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "%s: %s", what, err.msg);
    return 0;
}

int serve_image_stopped(const serve_image_guard *g, const char *what, char *msg, size_t msg_len) {
    switch (g ? g->why : SERVE_IMAGE_GO_ON) {
    case SERVE_IMAGE_DEADLINE:
        return failf(msg, msg_len, 503, "%s: the request's deadline passed (--request-timeout) "
                     "before its pictures were decoded; retry later", what);
    case SERVE_IMAGE_CLIENT_GONE:
        return failf(msg, msg_len, 503, "%s: the client went away", what);
    default:
        return failf(msg, msg_len, 503, "%s: the server is shutting down", what);
    }
}

int serve_image_reserve(serve_image_guard *g, int64_t bytes, const char *what, serve_image *out,
                        char *msg, size_t msg_len) {
    if (!g || !g->budget) return 0;
    switch (serve_budget_reserve(g->budget, bytes, guard_stop, g, BUDGET_POLL_MS)) {
    case SERVE_BUDGET_OK:
        out->give_back = budget_give_back;
        out->give_back_arg = g->budget;
        out->reserved = bytes;
        return 0;
    case SERVE_BUDGET_TOO_LARGE:
        return failf(msg, msg_len, 400, "%s: decoding this picture takes %lld MiB, more than the "
                     "server's whole picture memory (--max-image-memory %lld MiB)", what,
                     (long long)((bytes + (1 << 20) - 1) >> 20),
                     (long long)(g->budget->cap >> 20));
    case SERVE_BUDGET_CLOSED:
        g->why = SERVE_IMAGE_STOPPING;
        break;
    case SERVE_BUDGET_GAVE_UP:
        break;
    }
    return serve_image_stopped(g, what, msg, msg_len);
}

/* Encoded picture bytes -> *out. The size is read from the headers first, so a picture that
 * would not fit the token budget is refused before it is decoded. */
static int from_bytes(const unsigned char *bytes, size_t n, const char *what,
                      const serve_image_limits *lim, serve_image *out, char *msg, size_t msg_len) {
    qvl_error err = {0};
    int32_t w = 0, h = 0;
    qvl_picture_plan plan;
    if (qvl_image_probe(bytes, n, what, &w, &h, &err) != QVL_OK ||
        qvl_picture_plan_for(lim->rules, w, h, SERVE_DECODE_BYTES_PER_PIXEL, &plan, &err) != QVL_OK)
        return failf(msg, msg_len, 400, "%s", err.msg);
    const int64_t tokens = plan.n_tokens;
    if (tokens > lim->token_budget)
        return failf(msg, msg_len, 400, "%s: a %dx%d picture takes %lld tokens, more than the %lld "
                     "left in a slot's context (--ctx)", what, (int)w, (int)h, (long long)tokens,
                     (long long)lim->token_budget);
    const int64_t need = plan.decode_bytes;
    int rc = serve_image_reserve(lim->guard, need, what, out, msg, msg_len);
    if (rc != 0) return rc;
    serve_image_guard *g = lim->guard;
    const qvl_image_stop stop = serve_image_stop_of(g);
    qvl_image img;
    qvl_status st = qvl_image_decode_stoppable(bytes, n, what, g ? &stop : NULL, &img, &err);
    if (st == QVL_OK) rc = preprocess(&img, lim->rules, what, out, msg, msg_len);
    else if (g && g->why != SERVE_IMAGE_GO_ON) rc = serve_image_stopped(g, what, msg, msg_len);
    else rc = failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "%s", err.msg);
    if (rc != 0) {
        qvl_picture_free(out); /* gives the reservation back */
        return rc;
    }
    /* Decoded and preprocessed: only the f32 pixels stay until the prefill. */
    const int64_t held = plan.held_bytes;
    if (out->give_back && out->reserved > held) {
        serve_budget_release(out->give_back_arg, out->reserved - held);
        out->reserved = held;
    }
    return 0;
}

/* A base64 data: URL's bytes (malloc'd). */
static int data_url_bytes(const char *url, const char *what, const char *media,
                          unsigned char **out, size_t *out_n, char *msg, size_t msg_len) {
    const char *comma = strchr(url, ',');
    const char *meta = url + 5; /* after "data:" */
    if (!comma)
        return failf(msg, msg_len, 400, "%s: a data: URL needs a ',' before its data", what);
    size_t meta_len = (size_t)(comma - meta);
    static const char b64[] = ";base64";
    if (meta_len < sizeof b64 - 1 || strncmp(comma - (sizeof b64 - 1), b64, sizeof b64 - 1) != 0)
        return failf(msg, msg_len, 400,
                     "%s: only base64 data: URLs are accepted (data:%spng;base64,...)", what, media);
    if (strncmp(meta, media, strlen(media)) != 0)
        return failf(msg, msg_len, 400, "%s: the data: URL's media type must be %s...", what, media);
    const char *data = comma + 1;
    size_t n = strlen(data);
    unsigned char *bytes = malloc(n / 4 * 3 + 3);
    if (!bytes) return failf(msg, msg_len, 500, "out of memory for %s", what);
    int64_t got = serve_base64_decode(data, n, bytes);
    if (got <= 0) {
        free(bytes);
        return failf(msg, msg_len, 400, got < 0 ? "%s: the data: URL is not valid base64"
                                                : "%s: the data: URL holds no data", what);
    }
    *out = bytes;
    *out_n = (size_t)got;
    return 0;
}

/* "%2F" -> '/' in a file: URL path; false on a malformed escape or an escaped NUL. */
static bool percent_decode(const char *in, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; in[i]; i++) {
        if (o + 1 >= cap) return false;
        if (in[i] != '%') {
            out[o++] = in[i];
            continue;
        }
        unsigned v = 0;
        for (int k = 1; k <= 2; k++) {
            char c = in[i + k];
            int d = c >= '0' && c <= '9' ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (d < 0) return false;
            v = v * 16 + (unsigned)d;
        }
        if (v == 0) return false;
        out[o++] = (char)v;
        i += 2;
    }
    out[o] = '\0';
    return true;
}

/* A file under image_dir (path relative to it, or absolute inside it). */
static int file_bytes(const char *path, const char *what, const char *image_dir,
                      size_t max_file_bytes, unsigned char **out, size_t *out_n, char *msg,
                      size_t msg_len) {
    if (!image_dir)
        return failf(msg, msg_len, 400, "%s: local files are refused (the server was not "
                     "started with --image-dir)", what);
    char joined[PATH_MAX], real[PATH_MAX];
    int w = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                           : snprintf(joined, sizeof joined, "%s/%s", image_dir, path);
    if (w < 0 || (size_t)w >= sizeof joined)
        return failf(msg, msg_len, 400, "%s: the file path is too long", what);
    /* The resolved path (symbolic links followed) must lie inside the directory. A path that
     * does not resolve and one that resolves outside get the same answer, so that a client
     * cannot learn which files exist elsewhere on the machine. */
    size_t dl = strlen(image_dir);
    if (!realpath(joined, real) || strncmp(real, image_dir, dl) != 0 ||
        (real[dl] != '/' && !(dl == 1 && image_dir[0] == '/')))
        return failf(msg, msg_len, 400, "%s: no such file under --image-dir (the path, "
                     "symbolic links followed, must name a file inside it)", what);
    qvl_error err = {0};
    char *bytes = NULL;
    size_t n = 0;
    qvl_status st = qvl_read_file(real, max_file_bytes, QVL_E_IO, &bytes, &n, &err);
    if (st != QVL_OK)
        return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "%s: %s", what, err.msg);
    *out = (unsigned char *)bytes;
    *out_n = n;
    return 0;
}

int serve_url_read(const char *url, const char *what, const char *media, const char *image_dir,
                   size_t max_file_bytes, unsigned char **bytes, size_t *n, char *name,
                   size_t name_len, char *msg, size_t msg_len) {
    *bytes = NULL;
    *n = 0;
    snprintf(name, name_len, "%s", what);
    if (strncmp(url, "data:", 5) == 0)
        return data_url_bytes(url, what, media, bytes, n, msg, msg_len);
    char path[PATH_MAX];
    const char *p = url;
    if (strncmp(url, "file://", 7) == 0) {
        p = url + 7;
        if (strncmp(p, "localhost/", 10) == 0) p += 9;
        if (p[0] != '/')
            return failf(msg, msg_len, 400, "%s: a file: URL needs an absolute path "
                         "(file:///dir/name)", what);
        if (!percent_decode(p, path, sizeof path))
            return failf(msg, msg_len, 400, "%s: malformed %%-escape in the file: URL", what);
        p = path;
    } else if (strstr(url, "://") || strncmp(url, "http:", 5) == 0 ||
               strncmp(url, "https:", 6) == 0) {
        return failf(msg, msg_len, 400, "%s: only data: URLs and files under --image-dir "
                     "are accepted; the server fetches nothing from the network", what);
    } else if (url[0] == '\0') {
        return failf(msg, msg_len, 400, "%s: the URL is empty", what);
    }
    int rc = file_bytes(p, what, image_dir, max_file_bytes, bytes, n, msg, msg_len);
    if (rc == 0) snprintf(name, name_len, "%s", p);
    return rc;
}

int serve_image_from_url(const char *url, const serve_image_limits *lim, serve_image *out,
                         char *msg, size_t msg_len) {
    memset(out, 0, sizeof *out);
    unsigned char *bytes = NULL;
    size_t n = 0;
    char name[PATH_MAX];
    int rc = serve_url_read(url, "image_url", "image/", lim->image_dir, lim->max_file_bytes,
                            &bytes, &n, name, sizeof name, msg, msg_len);
    if (rc == 0) rc = from_bytes(bytes, n, name, lim, out, msg, msg_len);
    free(bytes);
    return rc;
}
