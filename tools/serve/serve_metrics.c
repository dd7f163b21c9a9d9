/* Counters behind one mutex: updates are a few per token, far from contended. */
#define _POSIX_C_SOURCE 200809L

#include "serve_metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The statuses the server answers with; anything else is counted as "other". */
static const int codes[] = {200, 400, 401, 403, 404, 405, 408, 413, 415, 429, 500, 503};
#define N_CODES (sizeof codes / sizeof codes[0])

/* Upper bounds of the decode-step batch size histogram (rows per step). */
static const int row_buckets[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
#define N_ROW_BUCKETS (sizeof row_buckets / sizeof row_buckets[0])

typedef struct counts {
    int n_slots;
    int64_t responses[N_CODES + 1];
    int64_t completions, cancelled, timed_out;
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    int64_t prefill_tokens, decode_tokens;
    int64_t prefills, decode_steps, last_rows;
    int64_t rows_le[N_ROW_BUCKETS]; /* decode steps of at most row_buckets[i] rows */
    double prefill_seconds, decode_seconds;
    int64_t masks;
    double mask_seconds, mask_waited;
    int64_t waiting, busy;
} counts;

struct serve_metrics {
    pthread_mutex_t mu;
    counts c;
    serve_budget *image_budget; /* read when rendering; NULL: none */
};

serve_metrics *serve_metrics_create(int n_slots) {
    serve_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    if (pthread_mutex_init(&m->mu, NULL) != 0) {
        free(m);
        return NULL;
    }
    m->c.n_slots = n_slots;
    return m;
}

void serve_metrics_free(serve_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void serve_metrics_response(serve_metrics *m, int status) {
    size_t i = 0;
    while (i < N_CODES && codes[i] != status) i++;
    pthread_mutex_lock(&m->mu);
    m->c.responses[i]++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_completion(serve_metrics *m, int64_t prompt, int64_t cached, int64_t generated,
                              int cancelled) {
    pthread_mutex_lock(&m->mu);
    m->c.completions++;
    m->c.cancelled += cancelled != 0;
    m->c.prompt_tokens += prompt;
    m->c.cached_tokens += cached;
    m->c.completion_tokens += generated;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_timeout(serve_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->c.timed_out++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_prefill(serve_metrics *m, int64_t n, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->c.prefill_tokens += n;
    m->c.prefill_seconds += seconds;
    m->c.prefills++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_mask(serve_metrics *m, int64_t masks, double seconds, double waited) {
    pthread_mutex_lock(&m->mu);
    m->c.masks += masks;
    m->c.mask_seconds += seconds;
    m->c.mask_waited += waited;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_decode(serve_metrics *m, int64_t n, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->c.decode_tokens += n;
    m->c.decode_seconds += seconds;
    m->c.decode_steps++;
    m->c.last_rows = n;
    for (size_t i = 0; i < N_ROW_BUCKETS; i++) m->c.rows_le[i] += n <= row_buckets[i];
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_set_image_budget(serve_metrics *m, serve_budget *b) {
    pthread_mutex_lock(&m->mu);
    m->image_budget = b;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_set_queue(serve_metrics *m, int64_t waiting, int64_t busy_slots) {
    pthread_mutex_lock(&m->mu);
    m->c.waiting = waiting;
    m->c.busy = busy_slots;
    pthread_mutex_unlock(&m->mu);
}

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *grown = realloc(b->p, cap);
        if (!grown) {
            b->oom = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
}

static void counter(sbuf *b, const char *name, const char *help, const char *type, double v) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *serve_metrics_render(serve_metrics *m) {
    counts s;
    pthread_mutex_lock(&m->mu);
    s = m->c;
    pthread_mutex_unlock(&m->mu);
    sbuf b = {.p = malloc(4096), .cap = 4096};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    put(&b, "# HELP qvl_http_responses_total HTTP responses by status code.\n"
            "# TYPE qvl_http_responses_total counter\n");
    for (size_t i = 0; i <= N_CODES; i++) {
        char code[16];
        if (i < N_CODES) snprintf(code, sizeof code, "%d", codes[i]);
        else snprintf(code, sizeof code, "other");
        put(&b, "qvl_http_responses_total{code=\"%s\"} %lld\n", code, (long long)s.responses[i]);
    }
    counter(&b, "qvl_requests_total", "Chat completions run by the engine (finished or cancelled).",
            "counter", (double)s.completions);
    counter(&b, "qvl_requests_cancelled_total", "Chat completions cancelled because the client left.",
            "counter", (double)s.cancelled);
    counter(&b, "qvl_requests_timed_out_total",
            "Chat completions stopped by --request-timeout (answer cut, or never started).",
            "counter", (double)s.timed_out);
    counter(&b, "qvl_prompt_tokens_total", "Prompt tokens of the requests (tokens in).", "counter",
            (double)s.prompt_tokens);
    counter(&b, "qvl_prompt_tokens_cached_total",
            "Prompt tokens reused from a slot's KV cache instead of prefilled.", "counter",
            (double)s.cached_tokens);
    counter(&b, "qvl_completion_tokens_total", "Generated tokens (tokens out).", "counter",
            (double)s.completion_tokens);
    counter(&b, "qvl_prefill_tokens_total", "Prompt tokens run through the model.", "counter",
            (double)s.prefill_tokens);
    counter(&b, "qvl_prefill_seconds_total", "Time spent in prefill.", "counter", s.prefill_seconds);
    counter(&b, "qvl_decode_tokens_total", "Tokens produced by decode steps.", "counter",
            (double)s.decode_tokens);
    counter(&b, "qvl_decode_seconds_total", "Time spent in decode steps.", "counter", s.decode_seconds);
    counter(&b, "qvl_prefill_tokens_per_second", "Prefill speed: prefill tokens / prefill seconds.",
            "gauge", s.prefill_seconds > 0 ? (double)s.prefill_tokens / s.prefill_seconds : 0.0);
    counter(&b, "qvl_decode_tokens_per_second", "Decode speed: decode tokens / decode seconds.",
            "gauge", s.decode_seconds > 0 ? (double)s.decode_tokens / s.decode_seconds : 0.0);
    counter(&b, "qvl_prefills_total", "Prefills run (one per request that reached a slot).",
            "counter", (double)s.prefills);
    counter(&b, "qvl_decode_steps_total", "Batched decode steps run (one token per busy slot).",
            "counter", (double)s.decode_steps);
    counter(&b, "qvl_decode_batch_size", "Sequences in the last decode step.", "gauge",
            (double)s.last_rows);
    put(&b, "# HELP qvl_decode_batch_rows Sequences per decode step.\n"
            "# TYPE qvl_decode_batch_rows histogram\n");
    for (size_t i = 0; i < N_ROW_BUCKETS; i++)
        put(&b, "qvl_decode_batch_rows_bucket{le=\"%d\"} %lld\n", row_buckets[i],
            (long long)s.rows_le[i]);
    put(&b, "qvl_decode_batch_rows_bucket{le=\"+Inf\"} %lld\nqvl_decode_batch_rows_sum %lld\n"
            "qvl_decode_batch_rows_count %lld\n", (long long)s.decode_steps,
        (long long)s.decode_tokens, (long long)s.decode_steps);
    counter(&b, "qvl_grammar_masks_total",
            "Grammar masks computed (structured output: one per constrained token).", "counter",
            (double)s.masks);
    counter(&b, "qvl_grammar_mask_seconds_total", "Time spent computing grammar masks.",
            "counter", s.mask_seconds);
    counter(&b, "qvl_grammar_mask_wait_seconds_total",
            "Of that, time the engine thread waited (not overlapped with a decode step).",
            "counter", s.mask_waited);
    counter(&b, "qvl_queue_length", "Requests waiting for a slot.", "gauge", (double)s.waiting);
    counter(&b, "qvl_slots_busy", "Slots generating.", "gauge", (double)s.busy);
    counter(&b, "qvl_slots_total", "Slots (--parallel).", "gauge", (double)s.n_slots);
    int64_t image_bytes = 0;
    int image_waiting = 0;
    pthread_mutex_lock(&m->mu);
    if (m->image_budget) serve_budget_usage(m->image_budget, &image_bytes, &image_waiting);
    pthread_mutex_unlock(&m->mu);
    counter(&b, "qvl_image_memory_bytes",
            "Picture memory reserved (decoding, or pixels waiting for their prefill).", "gauge",
            (double)image_bytes);
    counter(&b, "qvl_image_memory_waiting",
            "Pictures waiting for room in --max-image-memory before decoding.", "gauge",
            (double)image_waiting);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* The engine's reports (qvl/engine.h) into the counters. */
static void on_completion(void *arg, int64_t prompt, int64_t cached, int64_t generated,
                          bool cancelled) {
    serve_metrics_completion(arg, prompt, cached, generated, cancelled);
}
static void on_timeout(void *arg) { serve_metrics_timeout(arg); }
static void on_prefill(void *arg, int64_t n, double seconds) {
    serve_metrics_prefill(arg, n, seconds);
}
static void on_decode(void *arg, int64_t n, double seconds) { serve_metrics_decode(arg, n, seconds); }
static void on_mask(void *arg, int64_t masks, double seconds, double waited) {
    serve_metrics_mask(arg, masks, seconds, waited);
}
static void on_queue(void *arg, int64_t waiting, int64_t busy) {
    serve_metrics_set_queue(arg, waiting, busy);
}

void serve_metrics_observer(serve_metrics *m, qvl_engine_observer *out) {
    *out = (qvl_engine_observer){.arg = m, .completion = on_completion, .timeout = on_timeout,
                                 .prefill = on_prefill, .decode = on_decode, .queue = on_queue,
                                 .mask = on_mask};
}
