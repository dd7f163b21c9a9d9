/* A grammar constraint for one sequence, applied beside the sampler (qvl/sampling.h):
 *
 *   qvl_grammar_sampler_apply(gs, logits, n)   before qvl_sampler_sample: every token the
 *                                              grammar does not allow gets -inf;
 *   qvl_grammar_sampler_accept(gs, id)         with the token chosen;
 *   qvl_grammar_sampler_done(gs)               true once the output is complete and nothing
 *                                              but an end token could follow: stop there.
 *
 * A text token is allowed when all its bytes continue the output; an end token (the stop ids
 * given at creation) only when the output so far is a complete derivation. Added tokens other
 * than the stop ids are never allowed. The grammar and vocabulary are shared and read-only; the
 * constraint holds the matcher state and scratch space, so use one per sequence. */
#ifndef QVL_GRAMMAR_SAMPLER_H
#define QVL_GRAMMAR_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/grammar.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qvl_grammar_sampler qvl_grammar_sampler;

/* n_vocab: the length of a logits row. g and v must outlive the constraint. */
qvl_status qvl_grammar_sampler_create(const qvl_grammar *g, const qvl_grammar_vocab *v,
                                      const int32_t *stop_ids, size_t n_stop, int32_t n_vocab,
                                      qvl_grammar_sampler **out, qvl_error *err);
void qvl_grammar_sampler_free(qvl_grammar_sampler *gs);

/* Sets logits[i] = -inf for every token not allowed now. When no token at all is allowed (the
 * grammar needs bytes no token spells), this is an error saying so. */
qvl_status qvl_grammar_sampler_apply(qvl_grammar_sampler *gs, float *logits, size_t n_logits,
                                     qvl_error *err);
/* Computes the set of tokens allowed now, which apply() then only writes into the logits: a
 * caller may run this on another thread while the model computes the logits it will mask
 * (nothing else may touch gs meanwhile). Optional: apply() computes the set itself when no
 * prepare() since the last change of state did. */
qvl_status qvl_grammar_sampler_prepare(qvl_grammar_sampler *gs, qvl_error *err);
/* Advances by token id; a token the grammar does not allow is an error (apply() prevents it). */
qvl_status qvl_grammar_sampler_accept(qvl_grammar_sampler *gs, int32_t id, qvl_error *err);
bool qvl_grammar_sampler_done(const qvl_grammar_sampler *gs);
/* Advances by bytes the output already holds (text that came before the constraint took
 * over); bytes the grammar does not allow are an error naming the offset. */
qvl_status qvl_grammar_sampler_feed(qvl_grammar_sampler *gs, const void *bytes, size_t n,
                                    qvl_error *err);
/* Back to the start of the grammar (a new generation). */
qvl_status qvl_grammar_sampler_reset(qvl_grammar_sampler *gs, qvl_error *err);

/* Seconds spent computing and applying masks since creation, and how many sets of allowed
 * tokens were computed (one per constrained token; for benchmarks). */
double qvl_grammar_sampler_seconds(const qvl_grammar_sampler *gs, int64_t *calls);
/* Of those sets, how many came from the cache of sets by state (no trie walk). */
int64_t qvl_grammar_sampler_cache_hits(const qvl_grammar_sampler *gs);
/* Of the seconds above, those spent inside apply() (sets it had to compute itself, and writing the
 * masks): what the caller's sampling waited for. */
double qvl_grammar_sampler_apply_seconds(const qvl_grammar_sampler *gs);

#ifdef __cplusplus
}
#endif
#endif
