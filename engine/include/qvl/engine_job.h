/* One request on its way through the engine: a front end (a server connection, the terminal)
 * fills the input and submits it; the engine thread writes the answer; the front end reads
 * the answer as it grows (streaming) or once it is finished.
 *
 * Ownership: reference counted (the connection and the engine each hold one); the last
 * qvl_job_release frees it with its request. The output fields are written by the engine
 * only, under mu; readers take mu. `cancel` is set by the connection (client gone) and read by
 * the engine before every token. */
#ifndef QVL_ENGINE_JOB_H
#define QVL_ENGINE_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/engine_picture.h"
#include "qvl/grammar.h"
#include "qvl/prefix_cache.h"
#include "qvl/sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What to generate: a rendered prompt (qvl/engine_prompt.h) with its pictures and how to
 * sample and stop. Owned by the job once prepared (qvl_engine_prepare); every pointer is
 * malloc'd and freed by qvl_engine_request_free. */
/* One logit_bias entry: `bias` is added to token `id`'s logit exactly (OpenAI's -100 bans a
 * token in practice, +100 all but forces it), before the grammar mask. */
typedef struct qvl_logit_bias {
    int32_t id;
    float bias;
} qvl_logit_bias;

/* Most alternatives a job's logprobs list per token (OpenAI's top_logprobs bound). */
#define QVL_TOP_LOGPROBS_MAX 20

/* A generated token's log-probability and the most probable alternatives, all under the
 * distribution docs/structured-output.md defines (processed logits, before top-k/top-p/min-p). */
typedef struct qvl_token_logprob {
    int32_t id;
    float logprob;
    size_t end;      /* answer bytes up to and including this token's text (for streaming) */
    int n_top;
    int32_t top_id[QVL_TOP_LOGPROBS_MAX];
    float top_logprob[QVL_TOP_LOGPROBS_MAX]; /* descending */
} qvl_token_logprob;

typedef struct qvl_engine_request {
    char *prompt;          /* one placeholder per picture and per video */
    /* Instead of prompt (which is then NULL): the prompt as token ids, taken as they are (ids
     * outside the model's vocabulary are QVL_E_INVALID in qvl_engine_prepare). With pictures
     * or videos the ids hold all their pad tokens already (qvl run --ids --image), in the
     * pictures' order; other counts are QVL_E_INVALID. */
    int32_t *prompt_ids;
    size_t n_prompt_ids;
    qvl_picture *pictures; /* pictures and videos (is_video), in prompt order */
    size_t n_pictures;
    int64_t max_tokens;    /* -1: until a stop or the end of the context */
    qvl_sampling_params sampling;
    /* OpenAI's: logit -= penalty x times generated; 0: off. The engine hands it to the sampler
     * (it replaces sampling.frequency_penalty), which counts within sampling.penalty_window. */
    float frequency_penalty;
    char **stops;          /* stop strings: the answer ends before the first one */
    size_t n_stops;
    /* Structured output: GBNF text (qvl/grammar.h) the answer must match, or NULL. Checked and
     * compiled by qvl_engine_prepare (a bad grammar is QVL_E_INVALID there, not a failed job). */
    char *grammar;
    /* With a grammar: NULL, or text that switches it on. Until the answer holds this text the
     * answer is free; from there on the grammar constrains what follows it (qvl serve's tool
     * calls with tool_choice auto: the grammar of a call, after "<tool_call>"). */
    char *grammar_trigger;
    qvl_logit_bias *bias;  /* ids checked against the vocabulary by qvl_engine_prepare */
    size_t n_bias;
    /* The model's stop tokens do not end the answer (qvl run --ignore-eos, llama.cpp's
     * ignore_eos): one sampled is kept as an ordinary token (fed to the model, counted, in
     * `tokens`; special, so no text), and max_tokens or the context ends the answer. A
     * grammar still allows a stop token only where its output is complete. */
    bool ignore_eos;
    /* Keep the logits of every prompt position in the job's prompt_logits (qvl run
     * --dump-logits). Such a job reuses no cached prefix: every position is computed. */
    bool prompt_logits;
    bool logprobs;         /* record each token's logprob ... */
    int top_logprobs;      /* ... and this many alternatives (0..QVL_TOP_LOGPROBS_MAX) */
} qvl_engine_request;

void qvl_engine_request_free(qvl_engine_request *r);

typedef enum qvl_finish {
    QVL_JOB_RUNNING = 0,
    QVL_FINISH_STOP,      /* a stop token or stop string */
    QVL_FINISH_LENGTH,    /* max_tokens, or the slot's context is full */
    QVL_FINISH_CANCELLED, /* the client went away */
    QVL_FINISH_ERROR,     /* the engine failed (message in error) */
    QVL_FINISH_TIMEOUT,   /* the deadline passed before a slot took it: nothing generated */
} qvl_finish;

typedef struct qvl_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;

    /* Input, read-only once submitted. */
    qvl_engine_request *req;
    int32_t *ids;        /* the prompt's tokens, each picture's pads expanded */
    int64_t n_ids;
    uint64_t *keys;      /* per token: what the KV cache entry depends on (qvl/prefix_cache.h) */
    qvl_prefix_image *images; /* per picture or video: its span in ids, and its digest */
    qvl_partition partition;  /* whose cached prefixes it may reuse (API key, cache_salt) */
    double deadline;     /* qvl_job_now() seconds after which no token is generated; 0: none */
    qvl_grammar *grammar; /* req->grammar compiled (NULL: none); the slot's matcher reads it */

    /* Output (engine writes under mu). */
    char *text;          /* answer so far (complete UTF-8 characters) */
    size_t len, cap;
    size_t visible;      /* text[0, visible) is final: no stop string can start in it */
    bool started;        /* prefill done, tokens follow */
    qvl_finish finish;
    int64_t completion_tokens;
    int64_t cached_tokens; /* prompt tokens that were already in the slot's cache */
    /* The generated token ids (completion_tokens of them, the stop token left out), set when
     * the job finishes: a front end that continues a conversation or prints ids (qvl chat
     * --print-ids) needs the tokens, not their text, which need not tokenize back to them. */
    int32_t *tokens;
    /* Seconds the slot spent on the prefill (pictures encoded included) and from the first
     * token to the end; set when each ends. */
    double prefill_seconds, decode_seconds;
    /* Per generated token when req->logprobs (the stop token left out), appended as each
     * token is published: a stream sends an entry once its text is visible (end <= visible). */
    qvl_token_logprob *logprobs;
    size_t n_logprobs, cap_logprobs;
    /* [n_ids, logits_width] when req->prompt_logits (allocated by qvl_engine_prepare),
     * written by the prefill: final once the job has started. logits_width is the model's
     * output rows, which may pass qvl_engine_vocab (untrained padding rows). */
    float *prompt_logits;
    int64_t logits_width;
    /* Seconds the grammar mask took over the job's tokens (0 without a grammar). */
    double mask_seconds;
    char error[512];

    int text_waiters;    /* connections waiting for QVL_WAIT_TEXT (under mu): new text
                          * wakes only them, not a non-streamed answer's thread per token */

    atomic_bool cancel;
} qvl_job;

/* Takes ownership of req, ids, keys and images (all malloc'd). NULL when out of memory (then
 * nothing is taken). One reference. */
qvl_job *qvl_job_create(qvl_engine_request *req, int32_t *ids, uint64_t *keys,
                            qvl_prefix_image *images, int64_t n_ids);
void qvl_job_retain(qvl_job *j);
/* Why a job ends QVL_FINISH_TIMEOUT (its error text). */
#define QVL_JOB_TIMEOUT_MESSAGE "no slot was free before the request's deadline (--request-timeout); retry later"
/* ... and when the deadline passed between two chunks of its prompt (nothing generated). */
#define QVL_JOB_PREFILL_TIMEOUT_MESSAGE "the request's deadline (--request-timeout) passed while its prompt was being prefilled; nothing was generated; retry later"
/* Seconds on the monotonic clock (the deadline's clock). */
double qvl_job_now(void);
/* The deadline has passed (never when it is 0). */
bool qvl_job_expired(const qvl_job *j);
void qvl_job_release(qvl_job *j);

/* Engine side. append copies text after the answer (not final until set_visible says so);
 * false when out of memory. */
bool qvl_job_append(qvl_job *j, const char *text, size_t n);
void qvl_job_set_visible(qvl_job *j, size_t visible);
/* Appends one token's logprobs entry (copied); false when out of memory. */
bool qvl_job_add_logprob(qvl_job *j, const qvl_token_logprob *lp);
void qvl_job_set_started(qvl_job *j, int64_t cached_tokens, double prefill_seconds);
/* Cut the answer at `len` (a stop string begins there) and finish. */
void qvl_job_truncate(qvl_job *j, size_t len);
void qvl_job_finish(qvl_job *j, qvl_finish how, const char *error);

/* What a connection waits for (besides the job finishing, which always ends a wait). A
 * non-streamed answer waits for QVL_WAIT_FINISH only: waking per token would have its
 * thread spin on the published text while the engine, which needs the cores, generates. */
typedef enum qvl_job_wait_for {
    QVL_WAIT_START,  /* the prefill is done (a stream's headers can go) */
    QVL_WAIT_TEXT,   /* more than `seen` bytes are visible */
    QVL_WAIT_FINISH, /* nothing else */
} qvl_job_wait_for;

/* Connection side: wait until what `what` names happens, the job finishes, or timeout_ms
 * passes. Takes and releases mu. */
void qvl_job_wait(qvl_job *j, qvl_job_wait_for what, size_t seen, int timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
