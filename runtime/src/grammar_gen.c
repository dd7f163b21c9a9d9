/* Random strings of a grammar's language (qvl_grammar_generate), for tests and fuzzing.
 *
 * A derivation is unrolled with an explicit stack of positions (no C recursion, however
 * deep the grammar; a reference that ends its alternative replaces its frame). While the output is shorter than soft_max and the stack shallower than
 * MAX_RANDOM_DEPTH, each rule picks one of its alternatives at random; past either bound it
 * picks an alternative of least finite length (min_len, from grammar_check.c), which ends the
 * derivation: such an alternative cannot lead back to its own rule without consuming
 * characters (no left recursion), so the remaining length shrinks. Characters of a class are
 * drawn uniformly from a random one of its ranges; surrogates are skipped. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

#define MAX_RANDOM_DEPTH 48

typedef struct gen {
    uint64_t rng;
    char *out;
    size_t n, cap;
    bool oom;
} gen;

static uint64_t next_u64(gen *G) { /* splitmix64 */
    uint64_t z = (G->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t below(gen *G, uint64_t n) {
    return (uint32_t)(next_u64(G) % n);
}

static void put_cp(gen *G, uint32_t cp) {
    if (G->n + 5 > G->cap) {
        size_t c = G->cap ? 2 * G->cap : 256;
        char *o = realloc(G->out, c);
        if (!o) {
            G->oom = true;
            return;
        }
        G->out = o;
        G->cap = c;
    }
    unsigned char *p = (unsigned char *)G->out + G->n;
    if (cp < 0x80) {
        p[0] = (unsigned char)cp;
        G->n += 1;
    } else if (cp < 0x800) {
        p[0] = (unsigned char)(0xC0 | (cp >> 6));
        p[1] = (unsigned char)(0x80 | (cp & 0x3F));
        G->n += 2;
    } else if (cp < 0x10000) {
        p[0] = (unsigned char)(0xE0 | (cp >> 12));
        p[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        p[2] = (unsigned char)(0x80 | (cp & 0x3F));
        G->n += 3;
    } else {
        p[0] = (unsigned char)(0xF0 | (cp >> 18));
        p[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        p[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        p[3] = (unsigned char)(0x80 | (cp & 0x3F));
        G->n += 4;
    }
}

/* A code point in [lo, hi] that is not a surrogate (the caller's ranges always hold one). */
static uint32_t pick_in(gen *G, uint32_t lo, uint32_t hi) {
    for (int tries = 0; tries < 8; tries++) {
        uint32_t cp = lo + below(G, (uint64_t)hi - lo + 1);
        if (cp < 0xD800 || cp > 0xDFFF) return cp;
    }
    return lo < 0xD800 ? lo : hi;
}

static uint32_t pick_char(const qvl_grammar *g, gen *G, const g_elem *e) {
    if (e->type == GE_CP) return (uint32_t)e->v;
    if (e->type == GE_ANY) {
        /* mostly printable ASCII, sometimes anything: both kinds of bytes get exercised */
        return below(G, 4) ? 0x20 + below(G, 0x5F) : pick_in(G, 0, 0x10FFFF);
    }
    const g_class *c = &g->classes[e->v];
    const uint32_t *r = &g->ranges[2 * (c->first + below(G, c->count))];
    if (r[0] >= 0xD800 && r[1] <= 0xDFFF) { /* a range of surrogates only: take another */
        for (uint32_t i = 0; i < c->count; i++) {
            const uint32_t *q = &g->ranges[2 * (c->first + i)];
            if (!(q[0] >= 0xD800 && q[1] <= 0xDFFF)) return pick_in(G, q[0], q[1]);
        }
    }
    return pick_in(G, r[0], r[1]);
}

static int64_t alt_cost(const qvl_grammar *g, int32_t start) {
    int64_t sum = 0;
    for (const g_elem *e = &g->elems[start]; e->type != GE_END; e++) {
        int64_t c = e->type == GE_RULE ? g->min_len[e->v] : 1;
        if (c == INT64_MAX || sum > INT64_MAX - c) return INT64_MAX;
        sum += c;
    }
    return sum;
}

static int32_t choose(const qvl_grammar *g, gen *G, int32_t rule, bool shortest) {
    uint32_t a0 = g->alt_off[rule], n = g->alt_off[rule + 1] - a0;
    if (!shortest) {
        for (int tries = 0; tries < 16; tries++) {
            uint32_t a = a0 + below(G, n);
            if (alt_cost(g, g->alt_start[a]) != INT64_MAX) return g->alt_start[a];
        }
    }
    int32_t best = -1;
    int64_t best_cost = INT64_MAX;
    for (uint32_t a = a0; a < a0 + n; a++) {
        int64_t c = alt_cost(g, g->alt_start[a]);
        if (best < 0 || c < best_cost) {
            best = g->alt_start[a];
            best_cost = c;
        }
    }
    return best;
}

qvl_status qvl_grammar_generate(const qvl_grammar *g, uint64_t seed, size_t soft_max,
                                char **out, size_t *len, qvl_error *err) {
    *out = NULL;
    *len = 0;
    gen G = {.rng = seed};
    size_t cap = 64, n = 0;
    int32_t *stack = malloc(cap * sizeof *stack);
    if (!stack) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    stack[n++] = choose(g, &G, g->root, false);
    while (n > 0 && !G.oom) {
        int32_t pos = stack[n - 1];
        const g_elem *e = &g->elems[pos];
        if (e->type == GE_END) {
            n--;
            continue;
        }
        stack[n - 1] = pos + 1;
        if (e->type != GE_RULE) {
            put_cp(&G, pick_char(g, &G, e));
            continue;
        }
        bool shortest = n >= MAX_RANDOM_DEPTH || G.n >= soft_max;
        if (g->elems[pos + 1].type == GE_END) { /* the reference ends its alternative */
            stack[n - 1] = choose(g, &G, e->v, shortest);
            continue;
        }
        if (n == cap) {
            int32_t *s = realloc(stack, 2 * cap * sizeof *s);
            if (!s) {
                G.oom = true;
                break;
            }
            stack = s;
            cap *= 2;
        }
        stack[n++] = choose(g, &G, e->v, shortest);
    }
    free(stack);
    if (G.oom) {
        free(G.out);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    }
    put_cp(&G, 0); /* a terminating NUL, not counted */
    if (G.oom) {
        free(G.out);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    }
    *out = G.out;
    *len = G.n - 1;
    return QVL_OK;
}
