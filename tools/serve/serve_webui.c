/* The chat page at GET / and its headers. */
#define _GNU_SOURCE /* memmem */

#include "serve_webui.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "qvl/sha256.h"

/* tools/serve/webui/index.html, generated at build time (embed.cmake); a NUL follows the
 * page's bytes, not counted in the length. */
extern const unsigned char serve_webui_page[];
extern const size_t serve_webui_page_len;

/* Standard base64 with padding, as CSP's hash sources are written; out holds 4 * ceil(n / 3) + 1. */
static void base64(const uint8_t *in, size_t n, char *out) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                           (i + 2 < n ? in[i + 2] : 0);
        out[o++] = abc[v >> 18 & 63];
        out[o++] = abc[v >> 12 & 63];
        out[o++] = i + 1 < n ? abc[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? abc[v & 63] : '=';
    }
    out[o] = '\0';
}

/* "'sha256-...'" of the text between the first <TAG> and the </TAG> after it (the browser
 * hashes exactly those bytes), or "'none'" when the page has no such block. */
static void block_source(const char *page, size_t len, const char *tag, char *out, size_t n) {
    char open[16], close[16];
    snprintf(open, sizeof open, "<%s>", tag);
    snprintf(close, sizeof close, "</%s>", tag);
    const char *a = memmem(page, len, open, strlen(open));
    const char *b = a ? memmem(a, len - (size_t)(a - page), close, strlen(close)) : NULL;
    if (!b) {
        snprintf(out, n, "'none'");
        return;
    }
    a += strlen(open);
    uint8_t digest[QVL_SHA256_BYTES];
    qvl_sha256(a, (size_t)(b - a), digest);
    char b64[4 * ((QVL_SHA256_BYTES + 2) / 3) + 1];
    base64(digest, sizeof digest, b64);
    snprintf(out, n, "'sha256-%s'", b64);
}

bool serve_webui_csp(const char *page, size_t len, char *out, size_t out_len) {
    char script[64], style[64];
    block_source(page, len, "script", script, sizeof script);
    block_source(page, len, "style", style, sizeof style);
    /* default-src 'none' covers fonts, frames, media, workers and prefetches; pictures shown
     * are the user's own, read into data: URLs; form-action and base-uri close the ways to
     * send data elsewhere that default-src does not cover; frame-ancestors stops other sites
     * from framing the page (clickjacking the key field). */
    const int w = snprintf(out, out_len,
                           "default-src 'none'; script-src %s; style-src %s; img-src data:; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'",
                           script, style);
    return w > 0 && (size_t)w < out_len;
}

enum MHD_Result serve_webui_reply(struct MHD_Connection *c, serve_server *s) {
    const char *page = (const char *)serve_webui_page;
    char csp[512];
    if (!serve_webui_csp(page, serve_webui_page_len, csp, sizeof csp))
        return serve_reply_error(c, s, 500, "the page's Content-Security-Policy does not fit",
                                 NULL, NULL);
    /* The page is static for the life of the process: no copy. */
    struct MHD_Response *r = MHD_create_response_from_buffer(
        serve_webui_page_len, (void *)serve_webui_page, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
    MHD_add_response_header(r, "Content-Security-Policy", csp);
    /* no-cache: a browser checks again each time, so a new server's page replaces the old. */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    serve_metrics_response(s->metrics, 200);
    return ok;
}
