/* The engine: one model loaded into `slots` sequences (each its own KV cache on the model's one
 * copy of the weights), a queue of jobs, and one thread that runs every model call. A front end
 * (qvl serve's connections, qvl chat's terminal) prepares a request into a job, submits it and
 * reads the answer from the job (qvl/engine_job.h); it never touches the model.
 *
 * Scheduling: each round, every decoding slot samples its next token, queued jobs take the
 * slots that are idle now (longest cached prefix first, qvl/prefix_cache.h), new prompts run
 * up to prefill_chunk tokens, and all decoding slots' tokens go through the model as one
 * batched step (the weights read once for all of them).
 * One thread rather than one per slot because each backend already spreads a step over all
 * cores: concurrent slots would only fight over them, and one thread keeps every backend call
 * on a single thread. */
#ifndef QVL_ENGINE_H
#define QVL_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/backend.h" /* qvl_options */
#include "qvl/engine_job.h"
#include "qvl/engine_picture.h"
#include "qvl/engine_video.h"
#include "qvl/sampling.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_engine_phase {
    QVL_ENGINE_LOADING = 0,
    QVL_ENGINE_READY,
    QVL_ENGINE_FAILED,   /* loading failed (qvl_engine_error says why) */
    QVL_ENGINE_STOPPING,
} qvl_engine_phase;

/* What the engine reports as it works (every member optional), called on the engine thread
 * except `queue`, which submit also calls from the submitting thread. */
typedef struct qvl_engine_observer {
    void *arg;
    /* A job finished: prompt tokens (cached: taken from a slot's cache), generated tokens,
     * and whether it was cancelled. Called before the job's waiters are woken. */
    void (*completion)(void *arg, int64_t prompt, int64_t cached, int64_t generated,
                       bool cancelled);
    void (*timeout)(void *arg); /* a job's deadline ended it (cut or never started) */
    void (*prefill)(void *arg, int64_t tokens, double seconds);
    /* One batched decode step of `rows` sequences. */
    void (*decode)(void *arg, int64_t rows, double seconds);
    void (*queue)(void *arg, int64_t waiting, int64_t busy_slots);
    /* A grammar job ended: `masks` sets of allowed tokens were computed (one per token it
     * constrained), taking `seconds` in all, of which `waited` on the engine thread's path
     * (the rest overlapped the model's decode steps). */
    void (*mask)(void *arg, int64_t masks, double seconds, double waited);
    /* One prompt's progress, for a front end that shows it (qvl run, one slot). The vision
     * encoder runs the prompt's pictures and videos one at a time: item `index` of the
     * `count` it encodes (`tokens`: the item's prompt tokens) is about to run (seconds < 0)
     * or ran in `seconds`. */
    void (*encode)(void *arg, size_t index, size_t count, int64_t tokens, bool is_video,
                   double seconds);
    /* Within item `index` of `count`: the share of its encode done (0..1, by the encoder's
     * work; 1 after its last step), between the two `encode` calls of the item. */
    void (*encode_progress)(void *arg, size_t index, size_t count, double fraction);
    /* Before each chunk of a prompt's prefill: `done` of its `total` tokens are in the cache
     * (a reused prefix included) and the chunk adds `next`; once more with next 0 when the
     * whole prompt is in. */
    void (*prefill_step)(void *arg, int64_t done, int64_t total, int64_t next);
    /* Within that chunk (the prefill_step arguments again): the share of it done (0..1, by
     * the model's work; 1 after its last step). */
    void (*prefill_progress)(void *arg, int64_t done, int64_t total, int64_t next,
                             double fraction);
} qvl_engine_observer;

typedef struct qvl_engine_options {
    const char *model;      /* model directory or text GGUF (qvl/model_files.h) */
    const char *mmproj;     /* the vision GGUF of a GGUF model (NULL: none, or in its directory) */
    int slots;              /* sequences decoded at once (>= 1) */
    int queue;              /* jobs that may wait for a slot beyond the idle slots */
    int64_t ctx;            /* KV cache capacity of each slot, in tokens */
    /* Prompt tokens one scheduling round runs, in chunks shared out between new prompts
     * (llama.cpp's --batch-size): a decoding stream waits at most one chunk's time between
     * two tokens while a long prompt arrives. 0: every new prompt whole in its first round. */
    int64_t prefill_chunk;
    /* As qvl run's --backend, --plugins, --weights, --kv-type, -ngl, --cpu-backend,
     * --vision-backend, --no-fuse and --no-mmap (qvl/qwen3vl_model.h says what each does). */
    const char *backend, *plugins, *weights, *kv_type;
    const char *gpu_layers, *cpu_backend, *vision_backend;
    bool no_fuse, no_mmap;
    const qvl_options *backend_options; /* laid over plugins.yaml (-t); NULL: none */
    /* As qvl_model_options' (qvl/qwen3vl_model.h): the largest picture a prompt will bring,
     * for placement's count (0: the largest the context holds; negative: none will come),
     * and the weights' conversion progress at load (NULL: none). */
    int64_t image_max_tokens;
    /* A model directory without tokenizer.json still loads (qvl run --ids --print-ids): its
     * jobs take prompt ids only, their answers have ids and no text, and grammars are
     * refused. false: a missing tokenizer fails the load. */
    bool tokenizer_optional;
    void (*on_convert)(size_t done, size_t total, void *user);
    void *convert_user;
    qvl_engine_observer observer;
} qvl_engine_options;

typedef struct qvl_engine qvl_engine;

/* Start the engine thread, which loads the model (phase LOADING, then READY or FAILED).
 * opts' strings must outlive the engine. NULL with err set when the thread cannot start. */
qvl_engine *qvl_engine_start(const qvl_engine_options *opts, qvl_error *err);
qvl_engine_phase qvl_engine_state(qvl_engine *e);
const char *qvl_engine_error(qvl_engine *e); /* valid once FAILED */
/* Wait until loading ends: READY or FAILED (or STOPPING). */
qvl_engine_phase qvl_engine_wait_loaded(qvl_engine *e);

/* Once READY (valid until qvl_engine_free): */
const qvl_sampling_params *qvl_engine_sampling_defaults(qvl_engine *e); /* generation_config */
/* How pictures are prepared; NULL when the model has no vision encoder. Pictures larger than a
 * slot's context are already ruled out by its pixel bounds. */
const qvl_picture_rules *qvl_engine_picture_rules(qvl_engine *e);
/* How videos are prepared (qvl/engine_video.h); NULL when the model takes none. */
const qvl_video_rules *qvl_engine_video_rules(qvl_engine *e);
int64_t qvl_engine_ctx(qvl_engine *e);
/* Where the model's layers run, in one line (as qvl run prints it with -ngl). */
void qvl_engine_placement(qvl_engine *e, char *out, size_t size);
int qvl_engine_slots(qvl_engine *e);
/* The loaded model, for a one-slot front end that reports on it (qvl run's memory lines and
 * load statistics): read it only while no job runs, since the engine thread owns it. */
struct qvl_model;
const struct qvl_model *qvl_engine_model(qvl_engine *e);
/* Token ids a request may name (logit_bias): [0, qvl_engine_vocab). */
int32_t qvl_engine_vocab(qvl_engine *e);
/* A token's bytes (into the tokenizer; added tokens spelled out), for logprobs. False for an
 * id the tokenizer does not have. */
bool qvl_engine_token_bytes(qvl_engine *e, int32_t id, const char **bytes, size_t *len);

/* Text to token ids as a prompt is tokenized (added tokens such as <|im_start|> written out
 * become their ids); *ids malloc'd, non-NULL even when *n is 0. */
qvl_status qvl_engine_tokenize(qvl_engine *e, const char *text, size_t len, int32_t **ids,
                               size_t *n, qvl_error *err);
/* Token ids to text: their bytes joined, added tokens spelled out, ill-formed UTF-8 as U+FFFD.
 * QVL_E_INVALID naming the first id the tokenizer does not have. */
qvl_status qvl_engine_detokenize(qvl_engine *e, const int32_t *ids, size_t n, char **text,
                                 size_t *len, qvl_error *err);

/* Tokenize a request into a job (takes req, also on failure): each video placeholder becomes
 * its video's text, each picture's and frame group's pad its tokens. Nothing is encoded yet.
 * Errors: QVL_E_LIMIT when the prompt does not fit a slot's context, QVL_E_NOMEM, else
 * QVL_E_INVALID (a picture placeholder spelled in the text, a count that does not match the
 * pictures and videos, an empty prompt, a prompt id outside the vocabulary). The job's
 * partition is no API key and no salt, its deadline none: set them before submitting.
 * A grammar that does not parse, a logit_bias id outside the vocabulary or a top_logprobs count
 * out of range are QVL_E_INVALID, checked before the prompt is tokenized. */
qvl_status qvl_engine_prepare(qvl_engine *e, qvl_engine_request *req, qvl_job **out,
                              qvl_error *err);

/* Queue a job (the engine takes its own reference). QVL_OK; QVL_E_LIMIT when the queue is
 * full; QVL_E_INVALID when the engine is not serving (loading, failed or stopping). */
qvl_status qvl_engine_submit(qvl_engine *e, qvl_job *j);

/* Each slot as /slots shows it. */
typedef struct qvl_engine_slot_info {
    int id;
    bool busy;
    int64_t n_prompt;    /* the running job's prompt tokens (0 when idle) */
    int64_t n_generated; /* tokens generated for it so far */
    int64_t n_cached;    /* tokens the slot's KV cache holds (what a next prompt may reuse) */
} qvl_engine_slot_info;
/* Up to max slots' state into out; returns the number of slots. A snapshot: slots change as
 * the engine runs. */
int qvl_engine_slot_info_get(qvl_engine *e, qvl_engine_slot_info *out, int max);

/* Finish every job with an error, stop and join the thread. */
void qvl_engine_stop(qvl_engine *e);
void qvl_engine_free(qvl_engine *e);

#ifdef __cplusplus
}
#endif
#endif
