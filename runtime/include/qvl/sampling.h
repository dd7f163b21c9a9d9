/* Choosing the next token from a row of logits.
 *
 * The processors run in the order Hugging Face transformers applies them, with the
 * penalties first as vLLM does:
 *   1. mask: ids >= n_valid are never chosen (untrained padding rows of the embedding);
 *   2. repetition penalty (HF semantics) over every distinct token seen so far, prompt and
 *      generated: logit > 0 ? logit / penalty : logit * penalty;
 *   3. presence and frequency penalties (vLLM / OpenAI semantics) over the tokens *generated*
 *      so far (prompt tokens are not penalised): logit -= presence_penalty once per distinct
 *      token, and frequency_penalty x the number of times it was generated;
 *   The penalties see the history's last penalty_window tokens only (llama.cpp's
 *   --repeat-last-n; 0: all of it): a token counts for step 2 when it is among them, and for
 *   step 3 as many times as it was generated among them. Step 3 follows step 2, as llama.cpp
 *   and vLLM order them.
 *   -- temperature <= 0 stops here: greedy argmax, ties to the lowest id --
 *   4. temperature: logit / temperature;
 *   5. top-k: keep the tokens whose logit >= the k-th largest (HF keeps ties at the boundary);
 *   6. top-p: keep the most probable tokens while the mass before each is < top_p (HF's rule;
 *      at least one token is always kept);
 *   7. min-p: keep tokens whose probability >= min_p * the largest probability;
 *   8. softmax and one multinomial draw from a xoshiro256** generator seeded (through
 *      splitmix64) from seed: the same seed and the same inputs give the same tokens.
 * Disabled values: top_k <= 0, top_p >= 1, min_p <= 0, repetition_penalty == 1,
 * presence_penalty == 0, frequency_penalty == 0.
 *
 * Cost: one pass over the vocabulary plus a quickselect; the vocabulary is never fully sorted
 * unless top-p alone (no top-k) needs most of it. Greedy without penalties reads the row once
 * (maximum and NaN/+inf check together) and never copies it; penalties add one copy. The sampler owns its scratch space and is not
 * thread-safe; use one per sequence. */
#ifndef QVL_SAMPLING_H
#define QVL_SAMPLING_H

#include <stddef.h>
#include <stdint.h>

#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_sampling_params {
    float temperature;        /* <= 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* in [0, 1]; 1: off; 0: only the most probable token */
    float min_p;              /* in [0, 1]; 0: off */
    float repetition_penalty; /* > 0; 1: off */
    float presence_penalty;   /* any finite value; 0: off */
    float frequency_penalty;  /* any finite value; 0: off */
    /* The penalties' window in tokens, prompt and generated (>= 0). 0, as a zeroed struct has
     * it: the whole history, so the window is opt-in. */
    int32_t penalty_window;
    uint64_t seed;
    int32_t n_valid;          /* ids >= n_valid are never sampled; <= 0: the whole vocabulary */
} qvl_sampling_params;

/* Neutral settings: temperature 1, no filtering, no penalties, seed 0, whole vocabulary.
 * (Model defaults come from generation_config.json: see qvl/gen_config.h.) */
void qvl_sampling_params_default(qvl_sampling_params *p);

typedef struct qvl_sampler qvl_sampler;

/* n_vocab: the length of a logits row (the model's vocab_size). Parameters out of range are
 * errors naming the parameter. */
qvl_status qvl_sampler_create(const qvl_sampling_params *p, int32_t n_vocab, qvl_sampler **out,
                              qvl_error *err);
void qvl_sampler_free(qvl_sampler *s);

/* History for the penalties. Prompt tokens count for the repetition penalty only; generated
 * tokens count for all three. The sampler never records its own choices: call
 * qvl_sampler_accept_generated with each token it returns (that is fed to the model). */
qvl_status qvl_sampler_accept_prompt(qvl_sampler *s, const int32_t *ids, size_t n, qvl_error *err);
qvl_status qvl_sampler_accept_generated(qvl_sampler *s, int32_t id, qvl_error *err);

/* Forget the history (a new, independent generation); the random stream continues. */
void qvl_sampler_clear_history(qvl_sampler *s);
/* Restart the random stream as if created with this seed. */
void qvl_sampler_set_seed(qvl_sampler *s, uint64_t seed);

/* Pick the next token. logits has n_logits == n_vocab entries and is not modified. A NaN or
 * +inf logit, or a row where nothing can be chosen (all -inf), is an error. */
qvl_status qvl_sampler_sample(qvl_sampler *s, const float *logits, size_t n_logits, int32_t *out,
                              qvl_error *err);

/* The distribution sample() draws from after every processor (one-hot for greedy), written
 * to probs[n_vocab] (zeros for filtered tokens). Consumes no randomness. For inspection and
 * tests; sample() does not call it. */
qvl_status qvl_sampler_distribution(qvl_sampler *s, const float *logits, size_t n_logits,
                                    float *probs, qvl_error *err);

/* Log-probabilities of the processed row: steps 1-4 above (mask, the penalties, temperature;
 * a temperature <= 0 counts as 1), then log-softmax, before top-k, top-p and min-p cut
 * anything. logprobs[n_vocab]: -inf for masked ids and -inf logits.
 * Consumes no randomness; logits is not modified. */
qvl_status qvl_sampler_logprobs(qvl_sampler *s, const float *logits, size_t n_logits,
                                float *logprobs, qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
