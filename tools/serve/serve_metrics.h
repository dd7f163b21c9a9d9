/* Server counters for GET /metrics (Prometheus text format 0.0.4). Updated from the
 * connection threads and the engine thread; every function is thread-safe. */
#ifndef QVL_SERVE_METRICS_H
#define QVL_SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/engine.h"
#include "serve_budget.h"

typedef struct serve_metrics serve_metrics;

serve_metrics *serve_metrics_create(int n_slots);
void serve_metrics_free(serve_metrics *m);

/* One HTTP response with this status (any endpoint). */
void serve_metrics_response(serve_metrics *m, int status);
/* A chat completion finished: prompt tokens (cached: taken from a slot's cache), generated
 * tokens, and whether the client went away first. */
void serve_metrics_completion(serve_metrics *m, int64_t prompt, int64_t cached, int64_t generated,
                              int cancelled);
/* A request stopped by its deadline (--request-timeout), cut or never started. */
void serve_metrics_timeout(serve_metrics *m);
/* Time the model spent: prefill of n tokens, or decode steps yielding n tokens. */
void serve_metrics_prefill(serve_metrics *m, int64_t n, double seconds);
void serve_metrics_decode(serve_metrics *m, int64_t n, double seconds);
/* Grammar masks computed (one per constrained token), their time, and the part of it the
 * engine thread waited for. */
void serve_metrics_mask(serve_metrics *m, int64_t masks, double seconds, double waited);
void serve_metrics_set_queue(serve_metrics *m, int64_t waiting, int64_t busy_slots);
/* The picture memory budget whose use /metrics shows (NULL: none); it must outlive its use
 * here, so its owner sets NULL before destroying it. */
void serve_metrics_set_image_budget(serve_metrics *m, serve_budget *b);

/* An engine observer that counts into m. */
void serve_metrics_observer(serve_metrics *m, qvl_engine_observer *out);

/* The text of GET /metrics (malloc'd, NUL-terminated); NULL when out of memory. */
char *serve_metrics_render(serve_metrics *m);

#endif
