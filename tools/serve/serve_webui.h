/* GET /: the chat page (tools/serve/webui/index.html, compiled into the binary by
 * tools/serve/webui/embed.cmake). The page holds no data, so it is served without an API key;
 * everything it fetches goes through the keyed endpoints. */
#ifndef QVL_SERVE_WEBUI_H
#define QVL_SERVE_WEBUI_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "serve_http.h"

/* Queue the page with its headers (Content-Security-Policy, no-cache) and count the answer. */
enum MHD_Result serve_webui_reply(struct MHD_Connection *c, serve_server *s);

/* The Content-Security-Policy for a page: nothing may load from anywhere, the page may talk to
 * its own origin only, and only the page's own first <script> and <style> blocks run (each
 * allowed by its SHA-256, so no injected markup could run script). false: out too small. */
bool serve_webui_csp(const char *page, size_t len, char *out, size_t out_len);

#endif
