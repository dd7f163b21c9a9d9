/* POST /v1/chat/completions and /v1/completions: the request body (OpenAI's Chat Completions
 * or legacy Completions shape) parsed and checked into what the engine needs. Every problem is
 * a 400 naming the parameter. */
#ifndef QVL_SERVE_REQUEST_H
#define QVL_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_job.h"
#include "qvl/sampling.h"
#include "serve_image.h"
#include "serve_oai.h"
#include "serve_tools.h"
#include "serve_video.h"

/* Bounds on what one request may ask for. */
#define SERVE_MAX_JSON_DEPTH 32   /* nesting of the body; the API needs 5 */
#define SERVE_MAX_STOPS 16
#define SERVE_MAX_STOP_BYTES 256
#define SERVE_MAX_MESSAGES 1024
#define SERVE_MAX_CHOICES 16      /* n */
#define SERVE_MAX_LOGIT_BIAS 1024 /* logit_bias entries (OpenAI allows 300) */
#define SERVE_MAX_TOOLS 128

typedef struct serve_request {
    /* What the engine generates from (qvl/engine_job.h): the conversation rendered by the
     * model's chat template with the generation prompt, one placeholder per picture or video,
     * the pictures and videos in prompt order, sampling, max_tokens, stop strings. NULL once the engine
     * took it (qvl_engine_prepare). */
    qvl_engine_request *gen;
    bool stream, include_usage;
    int n;                 /* choices: n independent jobs from the same request (>= 1) */
    char *tools_text;      /* the tools as the prompt lists them (NULL: none) */
    bool read_calls;       /* the answer is read for tool calls (serve_tools.h) */
    char *cache_salt;      /* NULL: none. Prefix reuse happens only between requests with the
                            * same salt (and API key): qvl/prefix_cache.h */
} serve_request;

typedef struct serve_parse_ctx {
    serve_api api;                       /* chat (messages) or text (prompt) completions */
    const qvl_sampling_params *defaults; /* from generation_config.json */
    const qvl_picture_rules *pictures;   /* NULL: the model has no vision encoder */
    const qvl_video_rules *videos;       /* NULL: the model takes no videos */
    const char *image_dir;               /* real path of --image-dir, or NULL */
    int max_images;                      /* pictures and videos */
    int64_t max_video_frames;            /* frames one video may give */
    double max_video_seconds;            /* frames / fps one video may last */
    size_t max_file_bytes;               /* largest local picture file */
    int64_t ctx;                         /* a slot's context: the pictures must leave room */
    serve_image_guard *guard;            /* the request's picture budget, deadline and client
                                          * check; NULL: none */
    int32_t vocab;                       /* token ids logit_bias may name: [0, vocab); 0: any
                                          * (the engine checks again) */
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

/* Shared by the parsers (serve_request.c, serve_structured.c, serve_tools.c). */
struct cJSON;
/* Fills bad (message printf-style, made one printable line); returns false. */
bool serve_bad_set(serve_bad *bad, int status, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* obj[key], or NULL when absent or null. */
const struct cJSON *serve_field(const struct cJSON *obj, const char *key);
/* A number in [lo, hi] (*seen: present); an integer; a boolean. 400 naming key otherwise. */
bool serve_get_number(const struct cJSON *obj, const char *key, double lo, double hi, bool *seen,
                      double *out, serve_bad *bad);
bool serve_get_int(const struct cJSON *obj, const char *key, double lo, double hi, bool *seen,
                   int64_t *out, serve_bad *bad);
bool serve_get_bool(const struct cJSON *obj, const char *key, bool *out, serve_bad *bad);
/* n, response_format (and llama-server's grammar, json_schema), logit_bias, logprobs and
 * top_logprobs (serve_structured.c). */
bool serve_parse_structured(const struct cJSON *root, const serve_parse_ctx *ctx,
                            serve_request *r, serve_bad *bad);
/* Fields that would change the answer in a way qvl does not support: a 400 naming the first
 * one given with a value other than its neutral one (serve_fields.c). */
bool serve_refuse_unsupported(const struct cJSON *root, serve_api api, int n, serve_bad *bad);
/* A text part the client wrote holds no vision token (those only the server writes). */
bool serve_check_text(const char *text, const char *param, serve_bad *bad);

#endif
