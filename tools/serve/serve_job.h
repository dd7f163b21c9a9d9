/* One chat completion on its way through the server: the connection thread that received it
 * fills the input and submits it; the engine thread writes the answer; the connection thread
 * reads the answer as it grows (streaming) or once it is finished.
 *
 * Ownership: reference counted (the connection and the engine each hold one); the last
 * serve_job_release frees it with its request. The output fields are written by the engine
 * only, under mu; readers take mu. `cancel` is set by the connection (client gone) and read by
 * the engine before every token. */
#ifndef QVL_SERVE_JOB_H
#define QVL_SERVE_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve_prefix.h"
#include "serve_request.h"

typedef enum serve_finish {
    SERVE_RUNNING = 0,
    SERVE_FINISH_STOP,      /* a stop token or stop string */
    SERVE_FINISH_LENGTH,    /* max_tokens, or the slot's context is full */
    SERVE_FINISH_CANCELLED, /* the client went away */
    SERVE_FINISH_ERROR,     /* the engine failed (message in error) */
    SERVE_FINISH_TIMEOUT,   /* the deadline passed before a slot took it: nothing generated */
} serve_finish;

typedef struct serve_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;

    /* Input, read-only once submitted. */
    serve_request *req;
    int32_t *ids;        /* the prompt's tokens, each picture's pads expanded */
    int64_t n_ids;
    uint64_t *keys;      /* per token: what the KV cache entry depends on (serve_prefix.h) */
    serve_prefix_image *images; /* per picture: where its pads are, and its digest */
    serve_partition partition;  /* whose cached prefixes it may reuse (API key, cache_salt) */
    double deadline;     /* serve_job_now() seconds after which no token is generated; 0: none */

    /* Output (engine writes under mu). */
    char *text;          /* answer so far (complete UTF-8 characters) */
    size_t len, cap;
    size_t visible;      /* text[0, visible) is final: no stop string can start in it */
    bool started;        /* prefill done, tokens follow */
    serve_finish finish;
    int64_t completion_tokens;
    int64_t cached_tokens; /* prompt tokens that were already in the slot's cache */
    char error[512];

    int text_waiters;    /* connections waiting for SERVE_WAIT_TEXT (under mu): new text
                          * wakes only them, not a non-streamed answer's thread per token */

    atomic_bool cancel;
} serve_job;

/* Takes ownership of req, ids, keys and images (all malloc'd). NULL when out of memory (then
 * nothing is taken). One reference. */
serve_job *serve_job_create(serve_request *req, int32_t *ids, uint64_t *keys,
                            serve_prefix_image *images, int64_t n_ids);
void serve_job_retain(serve_job *j);
/* Why a job ends SERVE_FINISH_TIMEOUT (its error text). */
#define SERVE_TIMEOUT_MESSAGE "no slot was free before the request's deadline (--request-timeout); retry later"
/* Seconds on the monotonic clock (the deadline's clock). */
double serve_job_now(void);
/* The deadline has passed (never when it is 0). */
bool serve_job_expired(const serve_job *j);
void serve_job_release(serve_job *j);

/* Engine side. append copies text after the answer (not final until set_visible says so);
 * false when out of memory. */
bool serve_job_append(serve_job *j, const char *text, size_t n);
void serve_job_set_visible(serve_job *j, size_t visible);
void serve_job_set_started(serve_job *j, int64_t cached_tokens);
/* Cut the answer at `len` (a stop string begins there) and finish. */
void serve_job_truncate(serve_job *j, size_t len);
void serve_job_finish(serve_job *j, serve_finish how, const char *error);

/* What a connection waits for (besides the job finishing, which always ends a wait). A
 * non-streamed answer waits for SERVE_WAIT_FINISH only: waking per token would have its
 * thread spin on the published text while the engine, which needs the cores, generates. */
typedef enum serve_wait_for {
    SERVE_WAIT_START,  /* the prefill is done (a stream's headers can go) */
    SERVE_WAIT_TEXT,   /* more than `seen` bytes are visible */
    SERVE_WAIT_FINISH, /* nothing else */
} serve_wait_for;

/* Connection side: wait until what `what` names happens, the job finishes, or timeout_ms
 * passes. Takes and releases mu. */
void serve_job_wait(serve_job *j, serve_wait_for what, size_t seen, int timeout_ms);

#endif
