/* API keys: --api-key and the lines of --api-key-file. A request's key decides whether it is
 * served and which prefix-cache partition it belongs to (qvl/prefix_cache.h). */
#ifndef QVL_SERVE_AUTH_H
#define QVL_SERVE_AUTH_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

#include "serve_config.h"

/* Longest key accepted in --api-key-file (bytes; a line longer than this is refused). */
#define SERVE_MAX_KEY_BYTES 512
/* Keys accepted from --api-key-file. */
#define SERVE_MAX_KEYS 4096

/* cfg->api_key (if any) then the file's keys (if any) into cfg->api_keys / n_api_keys: one key
 * per line, surrounding blanks trimmed, empty lines and lines starting with '#' skipped.
 * false: msg says why (unreadable file, a file with no key, a key too long or with a blank or
 * control character inside). */
bool serve_auth_load(serve_config *cfg, char *msg, size_t msg_len);
void serve_auth_free(serve_config *cfg);

#define SERVE_KEY_NONE (-1)   /* the server has no keys: every request is served */
#define SERVE_KEY_DENIED (-2) /* keys are required and the request has no valid one */
/* The index of the request's key among cfg->api_keys, or one of the values above. Every key is
 * compared in full (the time taken says nothing about which key, or how much of one, matched). */
int serve_auth_key_index(struct MHD_Connection *c, const serve_config *cfg);

#endif
