/* image_url -> preprocessed picture. */
#define _XOPEN_SOURCE 700

#include "serve_image.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/file.h"
#include "qvl/image.h"

/* One picture is decoded at a time: a decoded picture may take up to qvl_image_max_pixels()
 * x 3 bytes, so many connections decoding hostile pictures at once could claim many times
 * that. Decoding is short next to the vision encoder, so the lock costs little. */
static pthread_mutex_t decode_lock = PTHREAD_MUTEX_INITIALIZER;

void serve_image_free(serve_image *im) {
    if (!im) return;
    free(im->pixels);
    im->pixels = NULL;
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

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* Decoded picture -> encoder input; frees img. */
static int preprocess(qvl_image *img, const qvl_preprocess_config *pc, const char *what,
                      serve_image *out, char *msg, size_t msg_len) {
    qvl_error err = {0};
    float *px = NULL;
    qvl_status st = qvl_image_preprocess(img, pc, &px, &out->grid, &err);
    qvl_image_free(img);
    if (st != QVL_OK)
        return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "%s: %s", what, err.msg);
    out->pixels = px;
    out->n_rows = qvl_image_grid_patches(&out->grid);
    out->n_tokens = qvl_image_grid_tokens(&out->grid, pc->merge_size);
    const size_t width = (size_t)(3 * pc->temporal_patch_size * pc->patch_size * pc->patch_size);
    uint64_t h = fnv1a(0xcbf29ce484222325ULL, &out->grid, sizeof out->grid);
    out->hash = fnv1a(h, px, (size_t)out->n_rows * width * sizeof *px);
    return 0;
}

/* Encoded picture bytes -> *out. The size is read from the headers first, so a picture that
 * would not fit the token budget is refused before it is decoded. */
static int from_bytes(const unsigned char *bytes, size_t n, const char *what,
                      const serve_image_limits *lim, serve_image *out, char *msg, size_t msg_len) {
    qvl_error err = {0};
    int32_t w = 0, h = 0;
    qvl_image_grid grid;
    if (qvl_image_probe(bytes, n, what, &w, &h, &err) != QVL_OK ||
        qvl_image_plan_grid(w, h, lim->pc, &grid, &err) != QVL_OK)
        return failf(msg, msg_len, 400, "%s", err.msg);
    const int64_t tokens = qvl_image_grid_tokens(&grid, lim->pc->merge_size);
    if (tokens > lim->token_budget)
        return failf(msg, msg_len, 400, "%s: a %dx%d picture takes %lld tokens, more than the %lld "
                     "left in a slot's context (--ctx)", what, (int)w, (int)h, (long long)tokens,
                     (long long)lim->token_budget);
    qvl_image img;
    pthread_mutex_lock(&decode_lock);
    qvl_status st = qvl_image_decode(bytes, n, what, &img, &err);
    int rc = st == QVL_OK ? preprocess(&img, lim->pc, what, out, msg, msg_len)
                          : failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "%s", err.msg);
    pthread_mutex_unlock(&decode_lock);
    return rc;
}

static int from_data_url(const char *url, const serve_image_limits *lim, serve_image *out,
                         char *msg, size_t msg_len) {
    const char *comma = strchr(url, ',');
    const char *meta = url + 5; /* after "data:" */
    if (!comma)
        return failf(msg, msg_len, 400, "image_url: a data: URL needs a ',' before its data");
    size_t meta_len = (size_t)(comma - meta);
    static const char b64[] = ";base64";
    if (meta_len < sizeof b64 - 1 || strncmp(comma - (sizeof b64 - 1), b64, sizeof b64 - 1) != 0)
        return failf(msg, msg_len, 400,
                     "image_url: only base64 data: URLs are accepted (data:image/png;base64,...)");
    if (strncmp(meta, "image/", 6) != 0)
        return failf(msg, msg_len, 400, "image_url: the data: URL's media type must be image/...");
    const char *data = comma + 1;
    size_t n = strlen(data);
    unsigned char *bytes = malloc(n / 4 * 3 + 3);
    if (!bytes) return failf(msg, msg_len, 500, "out of memory for an image");
    int64_t got = serve_base64_decode(data, n, bytes);
    if (got < 0) {
        free(bytes);
        return failf(msg, msg_len, 400, "image_url: the data: URL is not valid base64");
    }
    if (got == 0) {
        free(bytes);
        return failf(msg, msg_len, 400, "image_url: the data: URL holds no data");
    }
    int rc = from_bytes(bytes, (size_t)got, "image_url", lim, out, msg, msg_len);
    free(bytes);
    return rc;
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

static int from_file(const char *path, const serve_image_limits *lim, serve_image *out, char *msg,
                     size_t msg_len) {
    const char *image_dir = lim->image_dir;
    if (!image_dir)
        return failf(msg, msg_len, 400, "image_url: local files are refused (the server was not "
                     "started with --image-dir)");
    char joined[PATH_MAX], real[PATH_MAX];
    int w = path[0] == '/' ? snprintf(joined, sizeof joined, "%s", path)
                           : snprintf(joined, sizeof joined, "%s/%s", image_dir, path);
    if (w < 0 || (size_t)w >= sizeof joined)
        return failf(msg, msg_len, 400, "image_url: the file path is too long");
    /* The resolved path (symbolic links followed) must lie inside the directory. A path that
     * does not resolve and one that resolves outside get the same answer, so that a client
     * cannot learn which files exist elsewhere on the machine. */
    size_t dl = strlen(image_dir);
    if (!realpath(joined, real) || strncmp(real, image_dir, dl) != 0 ||
        (real[dl] != '/' && !(dl == 1 && image_dir[0] == '/')))
        return failf(msg, msg_len, 400, "image_url: no such file under --image-dir (the path, "
                     "symbolic links followed, must name a file inside it)");
    qvl_error err = {0};
    char *bytes = NULL;
    size_t n = 0;
    qvl_status st = qvl_read_file(real, lim->max_file_bytes, QVL_E_IO, &bytes, &n, &err);
    if (st != QVL_OK)
        return failf(msg, msg_len, st == QVL_E_NOMEM ? 500 : 400, "image_url: %s", err.msg);
    int rc = from_bytes((const unsigned char *)bytes, n, path, lim, out, msg, msg_len);
    free(bytes);
    return rc;
}

int serve_image_from_url(const char *url, const serve_image_limits *lim, serve_image *out,
                         char *msg, size_t msg_len) {
    memset(out, 0, sizeof *out);
    if (strncmp(url, "data:", 5) == 0) return from_data_url(url, lim, out, msg, msg_len);
    if (strncmp(url, "file://", 7) == 0) {
        const char *p = url + 7;
        if (strncmp(p, "localhost/", 10) == 0) p += 9;
        if (p[0] != '/')
            return failf(msg, msg_len, 400, "image_url: a file: URL needs an absolute path "
                         "(file:///dir/picture.png)");
        char path[PATH_MAX];
        if (!percent_decode(p, path, sizeof path))
            return failf(msg, msg_len, 400, "image_url: malformed %%-escape in the file: URL");
        return from_file(path, lim, out, msg, msg_len);
    }
    if (strstr(url, "://") || strncmp(url, "http:", 5) == 0 || strncmp(url, "https:", 6) == 0)
        return failf(msg, msg_len, 400, "image_url: only data: URLs and files under --image-dir "
                     "are accepted; the server fetches nothing from the network");
    if (url[0] == '\0') return failf(msg, msg_len, 400, "image_url: the URL is empty");
    return from_file(url, lim, out, msg, msg_len);
}
