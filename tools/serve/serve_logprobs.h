/* OpenAI's logprobs object from a job's per-token entries (qvl/engine_job.h):
 *   {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
 *   "bytes"}, ...]}, ...], "refusal": null}
 * "token" is the token's bytes as text (an unfinished or ill-formed UTF-8 piece with U+FFFD in
 * place of the bytes that are not a whole character); "bytes" the exact bytes. */
#ifndef QVL_SERVE_LOGPROBS_H
#define QVL_SERVE_LOGPROBS_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "qvl/engine.h"
#include "qvl/engine_job.h"

/* Entries lp[0, n); NULL when out of memory. */
cJSON *serve_logprobs_json(qvl_engine *e, const qvl_token_logprob *lp, size_t n);

#endif
