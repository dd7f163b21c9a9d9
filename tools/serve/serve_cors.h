/* CORS (--cors ORIGINS): off unless asked for, since a browser page from any site could
 * otherwise read the answers of a server that trusts its network (no --api-key). */
#ifndef QVL_SERVE_CORS_H
#define QVL_SERVE_CORS_H

#include <microhttpd.h>
#include <stdbool.h>

/* The request's Origin is one of `origins` (comma-separated, blanks around names ignored; "*"
 * matches any). False for no Origin, or NULL origins (CORS off). */
bool serve_cors_allowed(const char *origins, const char *origin);

/* Adds Access-Control-Allow-Origin (and Vary: Origin) to r when c's Origin is allowed. */
void serve_cors_headers(struct MHD_Connection *c, const char *origins, struct MHD_Response *r);

/* Answers a preflight (OPTIONS): 204 with the methods and headers a client may use, and the
 * origin when allowed (a browser refuses the real request otherwise). */
enum MHD_Result serve_cors_preflight(struct MHD_Connection *c, const char *origins,
                                     const char *methods);

#endif
