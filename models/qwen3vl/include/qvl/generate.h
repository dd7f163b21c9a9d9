/* The decoding loop: prefill a prompt, then sample and feed back one token at a time until a
 * stop token, the token budget or the end of the context. */
#ifndef QVL_GENERATE_H
#define QVL_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/gen_config.h"
#include "qvl/grammar_sampler.h"
#include "qvl/qwen3vl_model.h"
#include "qvl/sampling.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_stop_reason {
    QVL_STOP_EOS = 0,      /* a stop token was sampled (it is not fed to the model) */
    QVL_STOP_MAX_NEW = 1,  /* max_new tokens generated */
    QVL_STOP_CONTEXT = 2,  /* the KV cache is full */
    QVL_STOP_CANCELLED = 3, /* cancel returned true */
    QVL_STOP_GRAMMAR = 4,   /* the grammar's output is complete: nothing but an end can follow */
} qvl_stop_reason;

typedef struct qvl_generation {
    int64_t max_new;              /* tokens to generate at most (> 0) */
    const qvl_gen_config *stop;   /* stop tokens (its eos ids) */
    qvl_sampler *sampler;
    /* Optional: a grammar constraint. Tokens it does not allow are masked before sampling, the
     * chosen token advances it, and generation stops (QVL_STOP_GRAMMAR) once its output is
     * complete with nothing but an end able to follow. */
    qvl_grammar_sampler *grammar;
    /* Feed the last generated token even when generation stops there, so the cache holds the
     * whole reply (a chat continues from it); costs one more step. */
    bool feed_last;
    /* Called with each generated token (not with the stop token). */
    void (*on_token)(int32_t id, void *user);
    /* Optional: asked before each token is sampled (with user); true ends generation there.
     * Every token already passed to on_token is then in the cache (a chat continues from it). */
    bool (*cancel)(void *user);
    void *user;
    /* Optional: receives the logits of every prompt position, [n_prompt, vocab]. */
    float *prompt_logits;
    /* Optional: (t, h, w) positions of the prompt tokens, 3 rows of n_prompt. */
    const int32_t *prompt_pos;
    /* Optional: features of the images whose pad tokens are in the prompt (then prompt_pos
     * must hold their positions: qvl_model_positions). */
    const qvl_image_features *images;
} qvl_generation;

typedef struct qvl_generation_result {
    int64_t n_generated;
    qvl_stop_reason stop;
    double prefill_seconds, decode_seconds;
} qvl_generation_result;

/* Append the prompt to the model's sequence and generate after it. */
qvl_status qvl_generate(qvl_model *m, const int32_t *prompt, int64_t n_prompt,
                        const qvl_generation *g, qvl_generation_result *res, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
