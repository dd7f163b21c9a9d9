/* A slot: one sequence the server decodes (its own KV cache and position on the model's one
 * copy of the weights), and the job it is answering. Driven by the engine thread only: every
 * model call of a slot first makes the slot's sequence the model's current one.
 *
 * Prefix reuse (qvl/prefix_cache.h): a slot remembers whose prompt its cache holds (the partition:
 * API key and cache_salt), per KV cache entry a key of what the entry depends on (the token
 * id, or for a picture's pad token the picture's digest and the pad's index), and its
 * pictures' digests. A new request of the same partition keeps the longest common run and
 * prefills only the rest; pictures inside the kept run are not encoded again. */
#ifndef QVL_ENGINE_SLOT_H
#define QVL_ENGINE_SLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/gen_config.h"
#include "qvl/grammar_sampler.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/text_stream.h"
#include "qvl/tokenizer.h"
#include "qvl/engine.h"
#include "qvl/engine_job.h"
#include "qvl/prefix_cache.h"

/* What every slot shares (read-only while serving). */
typedef struct engine_slot_env {
    const qvl_tokenizer *tok;
    const qvl_gen_config *gen; /* stop tokens */
    const qvl_engine_observer *observer;
    int32_t vocab;             /* logits row length */
    int32_t greedy_vocab;      /* > 0: the model chooses greedy tokens over this many ids
                                * (qvl_model_set_greedy_vocab) */
    const qvl_grammar_vocab *trie; /* every text token's bytes, for grammar jobs */
    /* Called (engine thread, engine lock not held) as a slot's job ends, before anything is
     * reported or its client woken: from then on the engine admits a job into that slot, so a
     * client that sends its next request the moment it has its answer finds room. */
    void (*slot_freeing)(void *arg);
    void *slot_freeing_arg;
} engine_slot_env;

typedef struct engine_slot {
    int index;
    qvl_model *m;         /* shared by every slot */
    qvl_seq *seq;         /* this slot's KV cache and position */
    bool own_seq;         /* seq is the model's own (freed with the model) */
    uint64_t *keys;       /* [ctx]: keys of the tokens in the KV cache */
    int64_t n_keys;
    qvl_partition partition;  /* whose prompt the cache holds (valid while n_keys > 0) */
    qvl_prefix_image *images; /* the cached prompt's pictures */
    size_t n_images;
    uint64_t last_used;   /* engine tick of the last job, to pick the least recently used */

    qvl_job *job;       /* NULL: idle */
    qvl_sampler *sampler;
    qvl_grammar_sampler *grammar; /* the job's grammar matcher (NULL: none) */
    bool grammar_live;    /* false while a trigger has not appeared yet */
    size_t trigger_from;  /* answer bytes before which the trigger cannot start */
    float *logits, *work; /* [vocab]: the prefill's next-token logits; a processed copy */
    float *lp;            /* [vocab]: log-probabilities, for jobs that ask for logprobs */
    const float *row;     /* the logits the next token is drawn from: `logits` after the
                           * prefill, else the slot's row of the engine's batch output, which
                           * stays unchanged until the next step, by when it has been read;
                           * NULL: the step chose it on the device, `chosen` */
    int32_t chosen;
    int32_t *generated;   /* [ctx]: ids generated for the job */
    int64_t n_generated, max_new;
    double decode_start;  /* monotonic seconds when the prefill ended (0: not yet) */
    size_t searched;      /* answer bytes already searched for stop strings */
    qvl_text_stream stream;
    bool oom;

    /* The prompt runs in chunks (slot_prefill.c), interleaved with the other slots' decode
     * steps: tokens [keep, n_ids) from prefill_at on. */
    bool prefilling;
    int64_t keep;             /* prompt tokens reused from the cache */
    int64_t prefill_at;       /* next prompt token to run */
    int32_t *pos;             /* positions of prompt tokens [keep, n_ids): 3 rows */
    int32_t *pos_part;        /* one chunk's positions */
    qvl_image_features feats; /* the encoder's rows for the pictures after the kept prefix */
    int64_t feat_row;         /* rows of feats the chunks so far took */
    double prefill_seconds;

    /* Waiting for another slot's prefill to pass the prefix the job shares with it
     * (slot_share.c): the job is claimed (s->job) but not started. */
    bool waiting;
    const struct engine_slot *wait_for; /* the slot prefilling the shared prompt */
    uint64_t wait_claim;      /* its last_used when the wait began: another claim ends it */
    int64_t wait_want;        /* prompt tokens of the job that slot's cache will hold */
} engine_slot;

/* The observer's calls, each skipped when the front end gave none. */
static inline void observe_completion(const engine_slot_env *env, int64_t prompt, int64_t cached,
                                      int64_t generated, bool cancelled) {
    const qvl_engine_observer *o = env->observer;
    if (o->completion) o->completion(o->arg, prompt, cached, generated, cancelled);
}
static inline void observe_mask(const engine_slot_env *env, int64_t masks, double seconds,
                                double waited) {
    if (env->observer->mask) env->observer->mask(env->observer->arg, masks, seconds, waited);
}
static inline void observe_timeout(const engine_slot_env *env) {
    if (env->observer->timeout) env->observer->timeout(env->observer->arg);
}
static inline void observe_prefill(const engine_slot_env *env, int64_t n, double seconds) {
    if (env->observer->prefill) env->observer->prefill(env->observer->arg, n, seconds);
}
static inline void observe_encode(const engine_slot_env *env, size_t index, size_t count,
                                  int64_t tokens, bool is_video, double seconds) {
    if (env->observer->encode)
        env->observer->encode(env->observer->arg, index, count, tokens, is_video, seconds);
}
static inline void observe_prefill_step(const engine_slot_env *env, int64_t done, int64_t total,
                                        int64_t next) {
    if (env->observer->prefill_step)
        env->observer->prefill_step(env->observer->arg, done, total, next);
}
static inline void observe_decode(const engine_slot_env *env, int64_t n, double seconds) {
    if (env->observer->decode) env->observer->decode(env->observer->arg, n, seconds);
}
static inline void observe_queue(const engine_slot_env *env, int64_t waiting, int64_t busy) {
    if (env->observer->queue) env->observer->queue(env->observer->arg, waiting, busy);
}

/* own: the slot takes the model's own sequence (an engine of one slot needs no other). */
qvl_status engine_slot_open(engine_slot *s, int index, qvl_model *m, bool own, qvl_error *err);
void engine_slot_close(engine_slot *s);

/* Prompt tokens of j this slot's cache already holds (what engine_slot_start would reuse). */
int64_t engine_slot_reusable(const engine_slot *s, const qvl_job *j);

/* Take j (the slot keeps a reference): keep the cached prefix it may reuse (its own cache's,
 * or when donor, another slot, holds a longer one, a copy of donor's), compute the positions
 * of the rest and encode its pictures; the prompt itself runs in engine_slot_prefill's chunks. On failure the job is finished with an error and released; the
 * slot is idle again. Either way the job's picture pixels are freed (and their memory budget
 * given back): generation does not need them. */
void engine_slot_start(engine_slot *s, qvl_job *j, const engine_slot_env *env,
                       const engine_slot *donor);

/* Prefixes shared between slots (slot_share.c). start: j into slot s, from the longest prefix
 * any slot holds; or, when a slot is prefilling a prompt that will hold more of j, s waits
 * (false). resume: starts the waiting slots whose source has the shared part now (or
 * stopped prefilling it); returns how many started. */
bool engine_share_start(engine_slot *slots, int n, engine_slot *s, qvl_job *j,
                        const engine_slot_env *env);
int engine_share_resume(engine_slot *slots, int n, const engine_slot_env *env);

/* Prompt tokens the slot's next chunk runs, chunk tokens at most (0: the whole rest). */
int64_t engine_slot_chunk_length(const engine_slot *s, int64_t chunk);
/* Run the next chunk of the prompt (engine_slot_chunk_length tokens). After the last one the
 * slot holds the first token's logits and the job is started: engine_slot_next goes on from
 * there. A cancelled or expired job, or a failed evaluation, ends the job (slot idle). */
void engine_slot_prefill(engine_slot *s, const engine_slot_env *env, int64_t chunk);
/* Can the slot's next chunk run beside other slots' chunks (engine_slots_prefill): text only
 * (no picture rows in it) and no prompt logits wanted. */
bool engine_slot_chunk_batchable(const engine_slot *s, int64_t chunk);
/* The next chunks of n slots whose chunks are batchable, in one batched prefill
 * (qvl_model_prefill_batch): each slot then stands as engine_slot_prefill leaves it. Each
 * slot's prefill time takes the shared run's time in proportion to its rows. */
void engine_slots_prefill(engine_slot *const *group, int n, const engine_slot_env *env,
                          int64_t chunk);
/* Free what a prefill in progress holds (the job's end calls it). */
void engine_slot_prefill_drop(engine_slot *s);
/* The answer's text stream sink (slot.c): appends complete UTF-8 to the job. */
void engine_slot_emit_text(const char *text, size_t len, void *user);

/* A decode step for the slot's job, in two halves so that the engine can run every busy
 * slot's token through the model in one batched step (qvl_model_decode_batch):
 * engine_slot_next samples the next token from the slot's logits and publishes its text; it
 * returns true with *next when the token must go through the model (the job goes on), false
 * when the job ended (stop, length, deadline, cancelled, error: finished and released, the
 * slot idle) or the slot has none. Then engine_slot_fed gives the slot that token's logits
 * (vocab floats, not copied: they must stay unchanged until the slot's next engine_slot_next),
 * or engine_slot_feed_failed ends the job with the model's error. engine_slot_fed_chosen
 * instead gives it the next token itself, chosen on the device (qvl_model_decode_batch_greedy)
 * for a job that engine_slot_plain_greedy says takes it as its sampler would: greedy, no
 * penalty, no logit_bias, no grammar, no logprobs, the same choosable ids. */
bool engine_slot_next(engine_slot *s, const engine_slot_env *env, int32_t *next);
void engine_slot_fed(engine_slot *s, int32_t id, const float *logits);
void engine_slot_fed_chosen(engine_slot *s, int32_t id, int32_t next);
bool engine_slot_plain_greedy(const engine_slot *s, const engine_slot_env *env);
void engine_slot_feed_failed(engine_slot *s, const engine_slot_env *env, const char *error);

/* Per-job logits processing (slot_constrain.c). begin: the job's grammar matcher, once its
 * prefill is done. process: *row becomes the row the sampler draws from -- logit_bias,
 * then the grammar mask (the slot's `work` copy when any applies). chosen: the
 * grammar follows token id (*done: the grammar allows nothing but the end now), and with
 * logprobs *lp gets the token's entry (its `end` still to set). end: frees the matcher. */
qvl_status engine_slot_constrain_begin(engine_slot *s, const engine_slot_env *env, qvl_error *err);
qvl_status engine_slot_process(engine_slot *s, const engine_slot_env *env, const float **row,
                               qvl_error *err);
qvl_status engine_slot_chosen(engine_slot *s, const engine_slot_env *env, const float *row,
                              int32_t id, bool *done, qvl_token_logprob *lp, qvl_error *err);
void engine_slot_constrain_end(engine_slot *s, const engine_slot_env *env);
/* The next token's set of allowed tokens, computed ahead (on a helper thread while the model
 * runs the slot's decode step; the slot is not touched otherwise meanwhile). */
void engine_slot_premask(engine_slot *s);
/* After new answer text: a dormant grammar whose trigger now appears switches on, fed the
 * text after the trigger. */
qvl_status engine_slot_trigger(engine_slot *s, qvl_error *err);

/* Finish the slot's job (if any) this way and release it. */
void engine_slot_end(engine_slot *s, const engine_slot_env *env, qvl_finish how, const char *error);

#endif
