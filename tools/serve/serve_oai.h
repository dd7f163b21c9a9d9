/* The JSON bodies of OpenAI's API that the server writes: errors, chat completions, stream
 * chunks, the model list. Every function returns a malloc'd NUL-terminated string, or NULL
 * when out of memory. */
#ifndef QVL_SERVE_OAI_H
#define QVL_SERVE_OAI_H

#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "qvl/engine.h"

/* Which API a request came through: its request and answer shapes. */
typedef enum serve_api {
    SERVE_API_CHAT, /* POST /v1/chat/completions: messages in, "chat.completion" out */
    SERVE_API_TEXT, /* POST /v1/completions: a raw prompt in, "text_completion" out */
} serve_api;

/* The fields shared by a completion and its chunks. */
typedef struct serve_oai_meta {
    serve_api api;
    const char *id;    /* "chatcmpl-..." or "cmpl-..." */
    long long created; /* Unix seconds */
    const char *model;
} serve_oai_meta;

typedef struct serve_oai_usage {
    int64_t prompt, completion, cached;
} serve_oai_usage;

/* {"error": {"message", "type", "param", "code"}}; param and code may be NULL or "" (null).
 * type follows from the status (invalid_request_error, authentication_error, ...). */
char *serve_oai_error(int status, const char *message, const char *param, const char *code);

/* One choice of an answer. content NULL: null (a message that only calls tools). logprobs
 * and tool_calls are taken (NULL: "logprobs": null, no "tool_calls"), also on failure. */
typedef struct serve_oai_choice {
    const char *content;
    const char *finish;  /* NULL: null (a chunk while running) */
    cJSON *logprobs;
    cJSON *tool_calls;
    bool role;           /* chunks: the first of the choice carries "role": "assistant" */
} serve_oai_choice;

/* A whole answer: object "chat.completion" with choices [0, n) (index = position) and usage;
 * for SERVE_API_TEXT object "text_completion", each choice {text, index, logprobs,
 * finish_reason}. */
char *serve_oai_completion(const serve_oai_meta *m, serve_oai_choice *choices, int n,
                           const serve_oai_usage *u);

/* One "chat.completion.chunk" of choice `index`: its delta (role, content, tool_calls),
 * logprobs and finish_reason (SERVE_API_TEXT: a "text_completion" with the choice's text).
 * usage_null: write "usage": null (when the client asked for usage at the end). */
char *serve_oai_chunk(const serve_oai_meta *m, int index, serve_oai_choice *c, bool usage_null);
/* The last chunk under stream_options.include_usage: no choices, the usage. */
char *serve_oai_usage_chunk(const serve_oai_meta *m, const serve_oai_usage *u);

/* GET /slots, in llama-server's shape: an array of {id, n_ctx, is_processing,
 * n_prompt_tokens, n_cached_tokens (what the slot's KV cache holds for reuse),
 * next_token: {n_decoded}}. */
char *serve_oai_slots(const qvl_engine_slot_info *slots, int n, int64_t n_ctx);

/* GET /v1/models. */
char *serve_oai_models(const char *model, long long created);
/* GET /v1/models/{id}: the one model object. */
char *serve_oai_model(const char *model, long long created);

#endif
