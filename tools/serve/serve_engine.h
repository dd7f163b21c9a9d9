/* The engine: loads the model into --parallel slots, queues jobs, and runs every model call on
 * one thread.
 *
 * Scheduling: the engine thread admits waiting jobs into idle slots (prefill), then gives each
 * busy slot one decode step, round robin, and repeats. One thread rather than one per slot
 * because each slot's backend already spreads a step over all cores: concurrent slots would
 * only fight over them, and one thread keeps every backend call on a single thread. The
 * round-robin step is the place a batched decode (all slots' next tokens in one graph) will
 * take. */
#ifndef QVL_SERVE_ENGINE_H
#define QVL_SERVE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>

#include "qvl/status.h"
#include "serve_budget.h"
#include "serve_config.h"
#include "serve_job.h"
#include "serve_metrics.h"
#include "serve_request.h"

typedef enum serve_state {
    SERVE_LOADING = 0,
    SERVE_READY,
    SERVE_FAILED,   /* loading failed (serve_engine_error says why) */
    SERVE_STOPPING,
} serve_state;

typedef struct serve_engine serve_engine;

/* Start the engine thread, which loads the model (state LOADING, then READY or FAILED). */
serve_engine *serve_engine_start(const serve_config *cfg, serve_metrics *metrics, qvl_error *err);
serve_state serve_engine_state(serve_engine *e);
const char *serve_engine_error(serve_engine *e); /* valid once FAILED */

/* The picture memory budget every request's pictures count against (serve_budget.h). */
serve_budget *serve_engine_image_budget(serve_engine *e);

/* Once READY: what request parsing needs (valid until serve_engine_free); guard is NULL. */
void serve_engine_parse_ctx(serve_engine *e, serve_parse_ctx *out);

/* Tokenize a parsed request into a job (takes req, also on failure). false: bad says why
 * (400 when the prompt does not fit a slot's context). The job's partition is that of no API
 * key and the request's cache_salt; the caller makes it again when the request had a key. */
bool serve_engine_prepare(serve_engine *e, serve_request *req, serve_job **out, serve_bad *bad);

/* Queue a job (the engine takes its own reference). Returns 0, 429 when the queue is full or
 * 503 when the engine is not serving. */
int serve_engine_submit(serve_engine *e, serve_job *j);

/* Finish every job with an error, stop and join the thread. */
void serve_engine_stop(serve_engine *e);
void serve_engine_free(serve_engine *e);

#endif
