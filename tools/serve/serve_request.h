/* POST /v1/chat/completions: the request body (OpenAI's Chat Completions shape) parsed and
 * checked into what the engine needs. Every problem is a 400 naming the parameter. */
#ifndef QVL_SERVE_REQUEST_H
#define QVL_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/image_preprocess.h"
#include "qvl/sampling.h"
#include "serve_image.h"

/* Bounds on what one request may ask for. */
#define SERVE_MAX_JSON_DEPTH 32   /* nesting of the body; the API needs 5 */
#define SERVE_MAX_STOPS 16
#define SERVE_MAX_STOP_BYTES 256
#define SERVE_MAX_MESSAGES 1024

typedef struct serve_request {
    char *prompt;          /* the conversation rendered by the chat template, generation prompt
                            * included; one image placeholder per picture */
    serve_image *images;   /* in prompt order */
    size_t n_images;
    bool stream, include_usage;
    int64_t max_tokens;    /* -1: until a stop or the end of the context */
    qvl_sampling_params sampling;
    float frequency_penalty; /* OpenAI: logit -= penalty x times generated; 0: off */
    char **stops;
    size_t n_stops;
    char *cache_salt;      /* NULL: none. Prefix reuse happens only between requests with the
                            * same salt (and API key): serve_prefix.h */
} serve_request;

typedef struct serve_parse_ctx {
    const qvl_sampling_params *defaults; /* from generation_config.json */
    const qvl_preprocess_config *pc;     /* NULL: the model has no vision encoder */
    const char *image_dir;               /* real path of --image-dir, or NULL */
    int max_images;
    size_t max_file_bytes;               /* largest local picture file */
    int64_t ctx;                         /* a slot's context: the pictures must leave room */
    serve_image_guard *guard;            /* the request's picture budget, deadline and client
                                          * check; NULL: none */
} serve_parse_ctx;

/* Why a request was refused: the fields of OpenAI's error object. */
typedef struct serve_bad {
    int status;          /* 400; 413 for a body whose JSON would take too much memory; 500
                          * when the server ran out of memory */
    char message[512];
    char param[96];      /* "" when no single parameter is at fault */
    const char *code;    /* NULL or a short machine-readable code */
} serve_bad;

/* body[0, len) -> *out (free with serve_request_free). false: *out is NULL and bad says why.
 * The JSON is parsed with bounded memory and strict checks first (serve_json.h). */
bool serve_request_parse(const char *body, size_t len, const serve_parse_ctx *ctx,
                         serve_request **out, serve_bad *bad);
void serve_request_free(serve_request *r);

#endif
