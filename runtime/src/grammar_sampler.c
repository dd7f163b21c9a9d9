/* The grammar constraint of one sequence (qvl/grammar_sampler.h): a matcher, the shared token
 * trie, the stop ids, and a small cache of allowed-token sets keyed by matcher state.
 *
 * Why the cache: the set of allowed tokens depends only on the matcher's state, and outputs
 * revisit states all the time. Inside a JSON string every ordinary character leads back to the
 * same state (right recursion keeps the stack flat), and that is also where the trie walk is
 * dearest: nearly the whole vocabulary is allowed, so the walk visits nearly every trie node.
 * A hit costs a key (the state's stacks, a few words) and a hash; a set is a bitset of n_vocab
 * bits (19 KiB for 151,936 tokens), MASK_CACHE of them per sequence. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/grammar_sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum {
    MASK_CACHE = 16,      /* sets kept per sequence, least recently used replaced */
    KEY_MAX = 1 << 16,    /* words; a state with a longer key is not cached */
};

typedef struct mask_set {
    uint64_t *bits;  /* bit i: token i allowed */
    size_t count;    /* bits set */
    int32_t *key;    /* the state it belongs to; key_len 0: holds no reusable set */
    size_t key_len, key_cap;
    uint64_t hash, last_use;
} mask_set;

struct qvl_grammar_sampler {
    qvl_grammar_matcher *m;
    const qvl_grammar_vocab *v;
    int32_t *stop;
    size_t n_stop;
    int32_t n_vocab;
    size_t n_words;     /* 64-bit words of a set */
    uint8_t *walk;      /* the trie walk's answer, one byte per token */
    int32_t *key;       /* the current state's key */
    size_t key_cap;
    mask_set sets[MASK_CACHE];
    mask_set *cur;      /* when ready: the current state's set */
    bool ready;
    uint64_t tick;
    double seconds, apply_seconds;
    int64_t calls, hits;
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
    free(gs->walk);
    free(gs->key);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(gs->sets[i].bits);
        free(gs->sets[i].key);
    }
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
    gs->n_words = ((size_t)n_vocab + 63) / 64;
    gs->walk = malloc((size_t)n_vocab);
    qvl_status st = gs->stop && gs->walk ? QVL_OK
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

static uint64_t key_hash(const int32_t *k, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the words */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)k[i]) * 1099511628211ull;
    return h;
}

/* The current state's key in gs->key; 0 when it is too long to cache (or memory ran out:
 * caching is only an optimisation). */
static size_t current_key(qvl_grammar_sampler *gs) {
    size_t n = qvl_grammar_matcher_state_key(gs->m, gs->key, gs->key_cap);
    if (n <= gs->key_cap) return n;
    if (n > KEY_MAX) return 0;
    int32_t *k = realloc(gs->key, n * sizeof *k);
    if (!k) return 0;
    gs->key = k;
    gs->key_cap = n;
    return qvl_grammar_matcher_state_key(gs->m, gs->key, gs->key_cap);
}

static mask_set *cached(qvl_grammar_sampler *gs, const int32_t *key, size_t n, uint64_t h) {
    for (int i = 0; n && i < MASK_CACHE; i++) {
        mask_set *e = &gs->sets[i];
        if (e->key_len == n && e->hash == h && memcmp(e->key, key, n * sizeof *key) == 0)
            return e;
    }
    return NULL;
}

/* The entry a new set goes into: an empty one, else the least recently used. */
static mask_set *victim(qvl_grammar_sampler *gs) {
    mask_set *v = &gs->sets[0];
    for (int i = 0; i < MASK_CACHE; i++) {
        mask_set *e = &gs->sets[i];
        if (!e->bits) return e;
        if (e->last_use < v->last_use) v = e;
    }
    return v;
}

/* Keeps key with set e (or marks e as holding no reusable set, when it cannot). */
static void remember_key(mask_set *e, const int32_t *key, size_t n, uint64_t h) {
    e->key_len = 0;
    if (n == 0) return;
    if (n > e->key_cap) {
        int32_t *k = realloc(e->key, n * sizeof *k);
        if (!k) return;
        e->key = k;
        e->key_cap = n;
    }
    memcpy(e->key, key, n * sizeof *key);
    e->key_len = n;
    e->hash = h;
}

qvl_status qvl_grammar_sampler_prepare(qvl_grammar_sampler *gs, qvl_error *err) {
    if (gs->ready) return QVL_OK;
    const double t0 = now_seconds();
    const size_t klen = current_key(gs);
    const uint64_t h = klen ? key_hash(gs->key, klen) : 0;
    mask_set *e = cached(gs, gs->key, klen, h);
    if (e) {
        gs->hits++;
    } else {
        e = victim(gs);
        if (!e->bits && !(e->bits = malloc(gs->n_words * sizeof *e->bits)))
            return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
        e->key_len = 0; /* until it holds this state's set */
        size_t count = 0;
        qvl_status st = qvl_grammar_matcher_allowed(gs->m, gs->v, gs->walk,
                                                    (size_t)gs->n_vocab, &count, err);
        if (st != QVL_OK) return st;
        if (qvl_grammar_matcher_accepting(gs->m)) {
            for (size_t i = 0; i < gs->n_stop; i++) {
                int32_t id = gs->stop[i];
                if (id >= 0 && id < gs->n_vocab && !gs->walk[id]) {
                    gs->walk[id] = 1;
                    count++;
                }
            }
        }
        /* word by word without a branch per token: a set with scattered holes (a bounded
         * string refusing its longer tokens) would mispredict on every hole */
        for (size_t w = 0; w < gs->n_words; w++) {
            const size_t base = w * 64, end = base + 64 < (size_t)gs->n_vocab ? base + 64 : (size_t)gs->n_vocab;
            uint64_t word = 0;
            for (size_t i = base; i < end; i++) word |= (uint64_t)(gs->walk[i] != 0) << (i - base);
            e->bits[w] = word;
        }
        e->count = count;
        remember_key(e, gs->key, klen, h);
    }
    e->last_use = ++gs->tick;
    gs->cur = e;
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
    const uint64_t *bits = gs->cur->bits;
    /* Word by word, touching only what changes: the allowed tokens kept around a fill of the
     * word (few allowed: JSON's structure), or the refused ones set one by one (few refused: a
     * bounded string's longer tokens). A select per token compiles to a branch per token,
     * mispredicted wherever holes are scattered, and this runs on the engine thread's path. */
    for (size_t w = 0; w < gs->n_words; w++) {
        const uint64_t b = bits[w];
        if (b == ~0ull) continue; /* all 64 allowed: common inside strings */
        float *l = logits + w * 64;
        const size_t len = w * 64 + 64 < n_logits ? 64 : n_logits - w * 64;
        if (__builtin_popcountll(b) <= 32) {
            float keep[64];
            for (uint64_t z = b; z; z &= z - 1) keep[__builtin_ctzll(z)] = l[__builtin_ctzll(z)];
            for (size_t i = 0; i < len; i++) l[i] = -INFINITY;
            for (uint64_t z = b; z; z &= z - 1) l[__builtin_ctzll(z)] = keep[__builtin_ctzll(z)];
        } else {
            uint64_t z = len < 64 ? ~b & ((1ull << len) - 1) : ~b;
            for (; z; z &= z - 1) l[__builtin_ctzll(z)] = -INFINITY;
        }
    }
    const double t2 = now_seconds();
    gs->seconds += t2 - t1;
    gs->apply_seconds += t2 - t0;
    if (gs->cur->count == 0)
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

int64_t qvl_grammar_sampler_cache_hits(const qvl_grammar_sampler *gs) {
    return gs->hits;
}

double qvl_grammar_sampler_seconds(const qvl_grammar_sampler *gs, int64_t *calls) {
    if (calls) *calls = gs->calls;
    return gs->seconds;
}
