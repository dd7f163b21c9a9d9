/* The grammar constraint of one sequence (qvl/grammar_sampler.h): a matcher, the shared token
 * trie, the stop ids and a per-token scratch mask. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/grammar_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct qvl_grammar_sampler {
    qvl_grammar_matcher *m;
    const qvl_grammar_vocab *v;
    int32_t *stop;
    size_t n_stop;
    int32_t n_vocab;
    uint8_t *allowed;
    bool ready;      /* allowed/count hold the current state's set */
    size_t count;
    double seconds, apply_seconds;
    int64_t calls;
};

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void qvl_grammar_sampler_free(qvl_grammar_sampler *gs) {
    if (!gs) return;
    qvl_grammar_matcher_free(gs->m);
    free(gs->stop);
    free(gs->allowed);
    free(gs);
}

qvl_status qvl_grammar_sampler_create(const qvl_grammar *g, const qvl_grammar_vocab *v,
                                      const int32_t *stop_ids, size_t n_stop, int32_t n_vocab,
                                      qvl_grammar_sampler **out, qvl_error *err) {
    *out = NULL;
    if (!g || !v || n_vocab <= 0 || (n_stop && !stop_ids))
        return qvl_fail(err, QVL_E_INVALID, "qvl_grammar_sampler_create: bad arguments");
    qvl_grammar_sampler *gs = calloc(1, sizeof *gs);
    if (!gs) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    gs->v = v;
    gs->n_vocab = n_vocab;
    gs->n_stop = n_stop;
    gs->stop = malloc((n_stop + 1) * sizeof *gs->stop);
    gs->allowed = malloc((size_t)n_vocab);
    qvl_status st = gs->stop && gs->allowed ? QVL_OK
                                            : qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    if (st == QVL_OK) {
        if (n_stop) memcpy(gs->stop, stop_ids, n_stop * sizeof *stop_ids);
        st = qvl_grammar_matcher_create(g, &gs->m, err);
    }
    if (st != QVL_OK) {
        qvl_grammar_sampler_free(gs);
        return st;
    }
    *out = gs;
    return QVL_OK;
}

qvl_status qvl_grammar_sampler_prepare(qvl_grammar_sampler *gs, qvl_error *err) {
    if (gs->ready) return QVL_OK;
    const double t0 = now_seconds();
    size_t count = 0;
    qvl_status st = qvl_grammar_matcher_allowed(gs->m, gs->v, gs->allowed, (size_t)gs->n_vocab,
                                                &count, err);
    if (st != QVL_OK) return st;
    if (qvl_grammar_matcher_accepting(gs->m)) {
        for (size_t i = 0; i < gs->n_stop; i++) {
            int32_t id = gs->stop[i];
            if (id >= 0 && id < gs->n_vocab && !gs->allowed[id]) {
                gs->allowed[id] = 1;
                count++;
            }
        }
    }
    gs->count = count;
    gs->ready = true;
    gs->seconds += now_seconds() - t0;
    gs->calls++;
    return QVL_OK;
}

qvl_status qvl_grammar_sampler_apply(qvl_grammar_sampler *gs, float *logits, size_t n_logits,
                                     qvl_error *err) {
    if (n_logits != (size_t)gs->n_vocab)
        return qvl_fail(err, QVL_E_SHAPE, "grammar: a row of %zu logits for a vocabulary of %d",
                        n_logits, (int)gs->n_vocab);
    const double t0 = now_seconds();
    qvl_status st = qvl_grammar_sampler_prepare(gs, err);
    if (st != QVL_OK) return st;
    const double t1 = now_seconds();
    for (size_t i = 0; i < n_logits; i++)
        if (!gs->allowed[i]) logits[i] = -INFINITY;
    const double t2 = now_seconds();
    gs->seconds += t2 - t1;
    gs->apply_seconds += t2 - t0;
    if (gs->count == 0)
        return qvl_fail(err, QVL_E_INVALID, "grammar: no token of the vocabulary can continue "
                        "the output here%s", qvl_grammar_matcher_accepting(gs->m)
                        ? " (and there is no stop token to end it)" : "");
    return QVL_OK;
}

qvl_status qvl_grammar_sampler_accept(qvl_grammar_sampler *gs, int32_t id, qvl_error *err) {
    for (size_t i = 0; i < gs->n_stop; i++) {
        if (gs->stop[i] != id) continue;
        if (!qvl_grammar_matcher_accepting(gs->m))
            return qvl_fail(err, QVL_E_INVALID, "grammar: stop token %d before the output is "
                            "complete", (int)id);
        return QVL_OK;
    }
    const uint8_t *b;
    size_t len;
    if (!qvl_grammar_vocab_piece(gs->v, id, &b, &len))
        return qvl_fail(err, QVL_E_INVALID, "grammar: token %d is not text the grammar can "
                        "match", (int)id);
    bool ok;
    gs->ready = false;
    qvl_status st = qvl_grammar_matcher_feed(gs->m, b, len, &ok, err);
    if (st == QVL_OK && !ok)
        st = qvl_fail(err, QVL_E_INVALID, "grammar: token %d does not continue the output",
                      (int)id);
    return st;
}

qvl_status qvl_grammar_sampler_feed(qvl_grammar_sampler *gs, const void *bytes, size_t n,
                                    qvl_error *err) {
    const unsigned char *b = bytes;
    gs->ready = false;
    for (size_t i = 0; i < n; i++) { /* byte by byte, to say where it went wrong */
        bool ok;
        qvl_status st = qvl_grammar_matcher_feed(gs->m, b + i, 1, &ok, err);
        if (st != QVL_OK) return st;
        if (!ok)
            return qvl_fail(err, QVL_E_INVALID, "grammar: byte %zu of the text before the "
                            "constraint (0x%02x) does not continue the output", i, b[i]);
    }
    return QVL_OK;
}

bool qvl_grammar_sampler_done(const qvl_grammar_sampler *gs) {
    return qvl_grammar_matcher_done(gs->m);
}

qvl_status qvl_grammar_sampler_reset(qvl_grammar_sampler *gs, qvl_error *err) {
    gs->ready = false;
    return qvl_grammar_matcher_reset(gs->m, err);
}

double qvl_grammar_sampler_apply_seconds(const qvl_grammar_sampler *gs) {
    return gs->apply_seconds;
}

double qvl_grammar_sampler_seconds(const qvl_grammar_sampler *gs, int64_t *calls) {
    if (calls) *calls = gs->calls;
    return gs->seconds;
}
