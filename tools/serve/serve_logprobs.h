/* OpenAI's logprobs object from a job's per-token entries (qvl/engine_job.h):
 *   {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
 *   "bytes"}, ...]}, ...], "refusal": null}
 * "token" is the token's bytes as text (an unfinished or ill-formed UTF-8 piece with U+FFFD in
 * place of the bytes that are not a whole character); "bytes" the exact bytes. */
#ifndef QVL_SERVE_LOGPROBS_H
#define QVL_SERVE_LOGPROBS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "qvl/engine.h"
#include "qvl/engine_job.h"
#include "serve_oai.h"

/* Entries lp[0, n); NULL when out of memory. */
cJSON *serve_logprobs_json(qvl_engine *e, const qvl_token_logprob *lp, size_t n);

/* The legacy Completions shape of the same entries: {"tokens": [text], "token_logprobs":
 * [number], "top_logprobs": [{text: number}], "text_offset": [byte offset in the answer]};
 * offset: where lp[0]'s text starts (the end of the entry before it, or 0). */
cJSON *serve_logprobs_legacy_json(qvl_engine *e, const qvl_token_logprob *lp, size_t n,
                                  size_t offset);

/* The API's shape of lp[0, n): chat's serve_logprobs_json, or the legacy one (offset: where
 * lp[0]'s text starts). */
cJSON *serve_logprobs_of(qvl_engine *e, serve_api api, const qvl_token_logprob *lp, size_t n,
                         size_t offset);

/* A token's bytes as text (U+FFFD for bytes that are not whole characters); malloc'd, NULL
 * when out of memory. */
char *serve_token_text(qvl_engine *e, int32_t id);
/* [b0, b1, ...]: the bytes as numbers; NULL when out of memory. */
cJSON *serve_bytes_json(const char *bytes, size_t n);
/* bytes[0, n) is well-formed UTF-8 with no NUL. */
bool serve_utf8_whole(const char *bytes, size_t n);

#endif
