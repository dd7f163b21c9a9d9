/* CORS headers and preflights (serve_cors.h). */
#include "serve_cors.h"

#include <string.h>

bool serve_cors_allowed(const char *origins, const char *origin) {
    if (!origins || !origin || !origin[0]) return false;
    const size_t n = strlen(origin);
    for (const char *p = origins; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *end = p;
        while (*end && *end != ',') end++;
        const char *last = end;
        while (last > p && last[-1] == ' ') last--;
        const size_t len = (size_t)(last - p);
        if ((len == 1 && *p == '*') || (len == n && strncmp(p, origin, n) == 0)) return true;
        p = end;
    }
    return false;
}

void serve_cors_headers(struct MHD_Connection *c, const char *origins, struct MHD_Response *r) {
    if (!origins) return;
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    /* The answer depends on Origin whenever CORS is on: caches must key on it. */
    MHD_add_response_header(r, "Vary", "Origin");
    if (!serve_cors_allowed(origins, origin)) return;
    /* "*" stays "*" (no credentials: browsers then send no cookies, which the API never
     * uses); a listed origin is echoed, the only form that names one origin. */
    MHD_add_response_header(r, "Access-Control-Allow-Origin",
                            strcmp(origins, "*") == 0 ? "*" : origin);
}

enum MHD_Result serve_cors_preflight(struct MHD_Connection *c, const char *origins,
                                     const char *methods) {
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    serve_cors_headers(c, origins, r);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result rc = MHD_queue_response(c, 204, r);
    MHD_destroy_response(r);
    return rc;
}
