/* The matcher: a set of parse stacks advanced one UTF-8 byte at a time.
 *
 * A stack is a chain of frames in an arena (each frame: a position and its parent), shared
 * between stacks: advancing a stack replaces only its top, so a state costs one new frame per
 * surviving stack and copying a state is copying its list of tops. Every stack in a state has a
 * character test on top ("expanded"): a rule reference on top is replaced by one stack per
 * alternative of the rule, and an alternative's end pops to the parent. A reference that ends
 * its alternative pushes nothing for its return (the tail-call rule), so right-recursive
 * repetitions keep stacks flat. Equal stacks are merged (hash first, then frame by frame).
 *
 * Multi-byte characters: after a lead byte the stacks are only filtered (kept when their test
 * can match some code point that starts with the bytes so far); they advance on the last
 * byte. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

bool qvl_g_elem_matches(const qvl_grammar *g, const g_elem *e, uint32_t cp) {
    if (e->type == GE_CP) return cp == (uint32_t)e->v;
    if (e->type == GE_ANY) return true;
    const g_class *c = &g->classes[e->v];
    const uint32_t *r = &g->ranges[2 * c->first];
    for (uint32_t i = 0; i < c->count; i++) {
        if (cp < r[2 * i]) return false; /* sorted */
        if (cp <= r[2 * i + 1]) return true;
    }
    return false;
}

bool qvl_g_elem_overlaps(const qvl_grammar *g, const g_elem *e, uint32_t lo, uint32_t hi) {
    if (e->type == GE_CP) return (uint32_t)e->v >= lo && (uint32_t)e->v <= hi;
    if (e->type == GE_ANY) return true;
    const g_class *c = &g->classes[e->v];
    const uint32_t *r = &g->ranges[2 * c->first];
    for (uint32_t i = 0; i < c->count; i++)
        if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return true;
    return false;
}

bool qvl_g_elem_covers(const qvl_grammar *g, const g_elem *e, uint32_t lo, uint32_t hi) {
    if (e->type == GE_CP) return lo == hi && (uint32_t)e->v == lo;
    if (e->type == GE_ANY) return true;
    const g_class *c = &g->classes[e->v];
    const uint32_t *r = &g->ranges[2 * c->first];
    for (uint32_t i = 0; i < c->count; i++) /* sorted, disjoint, not adjacent: one must hold it */
        if (r[2 * i] <= lo && hi <= r[2 * i + 1]) return true;
    return false;
}

static uint32_t mix(uint32_t h, uint32_t v) {
    h ^= v + 0x9E3779B9u + (h << 6) + (h >> 2);
    return h * 0x85EBCA6Bu;
}

static int new_frame(g_arena *a, int32_t pos, int32_t parent, qvl_error *err) {
    if (a->n_frames == a->cap_frames) {
        size_t c = a->cap_frames ? 2 * a->cap_frames : 1024;
        g_frame *f = c < INT32_MAX ? realloc(a->frames, c * sizeof *f) : NULL;
        if (!f) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for parse stacks"), -1;
        a->frames = f;
        a->cap_frames = c;
    }
    uint32_t ph = parent >= 0 ? a->frames[parent].hash : 0x2545F491u;
    a->frames[a->n_frames] = (g_frame){pos, parent, mix(ph, (uint32_t)pos)};
    return (int)a->n_frames++;
}

static bool same_stack(const g_arena *a, int32_t x, int32_t y) {
    while (x != y) {
        if (x < 0 || y < 0) return false;
        const g_frame *f = &a->frames[x], *h = &a->frames[y];
        if (f->pos != h->pos || f->hash != h->hash) return false;
        x = f->parent;
        y = h->parent;
    }
    return true;
}

bool qvl_g_same_state(const g_arena *a, const g_state *x, const g_state *y) {
    if (x->n != y->n || x->accept != y->accept || x->need != y->need)
        return false;
    /* acc and len still hold the last character once it is complete (need 0) */
    if (x->need && (x->len != y->len || x->acc != y->acc)) return false;
    /* a state's stacks are distinct (add_top), so equal counts and x within y mean equal */
    for (int32_t i = 0; i < x->n; i++) {
        bool found = false;
        for (int32_t j = 0; j < y->n && !found; j++)
            found = same_stack(a, a->tops[x->off + (size_t)i], a->tops[y->off + (size_t)j]);
        if (!found) return false;
    }
    return true;
}

/* Adds the stack with top frame f to state s (whose tops end the arena), unless present. */
static int add_top(g_arena *a, g_state *s, int32_t f, qvl_error *err) {
    for (int32_t i = 0; i < s->n; i++)
        if (same_stack(a, a->tops[s->off + (size_t)i], f)) return 0;
    if (s->n >= QVL_GRAMMAR_MAX_STACKS)
        return qvl_fail(err, QVL_E_LIMIT, "grammar: more than %d parse stacks at once (the "
                        "grammar is too ambiguous)", QVL_GRAMMAR_MAX_STACKS), -1;
    if (a->n_tops == a->cap_tops) {
        size_t c = a->cap_tops ? 2 * a->cap_tops : 1024;
        int32_t *t = realloc(a->tops, c * sizeof *t);
        if (!t) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for parse stacks"), -1;
        a->tops = t;
        a->cap_tops = c;
    }
    a->tops[a->n_tops++] = f;
    s->n++;
    return 0;
}

/* Expands the stack whose top is frame f into s: tests stay, references open their rule's
 * alternatives, ends pop. The depth of the recursion is bounded by the number of rules (no
 * left recursion: qvl_g_check). */
static int expand(const qvl_grammar *g, g_arena *a, g_state *s, int32_t f, qvl_error *err) {
    const int32_t pos = a->frames[f].pos, parent = a->frames[f].parent;
    const g_elem *e = &g->elems[pos];
    if (e->type == GE_END) {
        if (parent < 0) {
            s->accept = true;
            return 0;
        }
        return expand(g, a, s, parent, err);
    }
    if (e->type != GE_RULE) return add_top(a, s, f, err);
    int32_t ret = parent;
    if (g->elems[pos + 1].type != GE_END && (ret = new_frame(a, pos + 1, parent, err)) < 0)
        return -1;
    for (uint32_t i = g->alt_off[e->v]; i < g->alt_off[e->v + 1]; i++) {
        int nf = new_frame(a, g->alt_start[i], ret, err);
        if (nf < 0 || expand(g, a, s, nf, err) < 0) return -1;
    }
    return 0;
}

bool qvl_g_utf8_step(const g_state *from, uint8_t byte, g_state *to, uint32_t *lo,
                     uint32_t *hi) {
    uint32_t acc;
    uint8_t need, len;
    if (from->need == 0) {
        if (byte < 0x80) { acc = byte; need = 0; len = 1; }
        else if (byte >= 0xC2 && byte <= 0xDF) { acc = byte & 0x1Fu; need = 1; len = 2; }
        else if (byte >= 0xE0 && byte <= 0xEF) { acc = byte & 0x0Fu; need = 2; len = 3; }
        else if (byte >= 0xF0 && byte <= 0xF4) { acc = byte & 0x07u; need = 3; len = 4; }
        else return false;
    } else {
        if ((byte & 0xC0) != 0x80) return false;
        acc = (from->acc << 6) | (byte & 0x3Fu);
        need = (uint8_t)(from->need - 1);
        len = from->len;
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    *lo = acc << (6 * need);
    *hi = *lo | ((1u << (6 * need)) - 1);
    if (*lo < min_cp[len]) *lo = min_cp[len];
    if (*hi > 0x10FFFF) *hi = 0x10FFFF;
    if (*lo > *hi || (*lo >= 0xD800 && *hi <= 0xDFFF)) return false; /* overlong, too large, surrogate */
    to->need = need;
    to->len = len;
    to->acc = acc;
    return true;
}

int qvl_g_advance(const qvl_grammar *g, g_arena *a, const g_state *from, uint8_t byte,
                  g_state *to, qvl_error *err) {
    g_state ch;
    uint32_t lo, hi;
    if (!qvl_g_utf8_step(from, byte, &ch, &lo, &hi)) return 0;
    const uint8_t need = ch.need;
    const uint32_t acc = ch.acc;
    *to = (g_state){.off = a->n_tops, .n = 0, .accept = false, .need = need, .len = ch.len,
                    .acc = acc};
    for (int32_t i = 0; i < from->n; i++) {
        int32_t f = a->tops[from->off + (size_t)i];
        const g_elem *e = &g->elems[a->frames[f].pos];
        if (need > 0) {
            if (qvl_g_elem_overlaps(g, e, lo, hi) && add_top(a, to, f, err) < 0) return -1;
        } else if (qvl_g_elem_matches(g, e, acc)) {
            int nf = new_frame(a, a->frames[f].pos + 1, a->frames[f].parent, err);
            if (nf < 0 || expand(g, a, to, nf, err) < 0) return -1;
        }
    }
    return to->n > 0 || to->accept;
}

/* ---- the public matcher ---- */

static qvl_status start(qvl_grammar_matcher *m, qvl_error *err) {
    qvl_error local;
    if (!err) err = &local;
    m->a.n_frames = 0;
    m->a.n_tops = 0;
    m->cur = (g_state){0};
    const qvl_grammar *g = m->g;
    for (uint32_t i = g->alt_off[g->root]; i < g->alt_off[g->root + 1]; i++) {
        int f = new_frame(&m->a, g->alt_start[i], -1, err);
        if (f < 0 || expand(g, &m->a, &m->cur, f, err) < 0) return err->status;
    }
    m->live_frames = m->a.n_frames;
    return QVL_OK;
}

qvl_status qvl_grammar_matcher_create(const qvl_grammar *g, qvl_grammar_matcher **out,
                                      qvl_error *err) {
    *out = NULL;
    if (!g) return qvl_fail(err, QVL_E_INVALID, "qvl_grammar_matcher_create: NULL grammar");
    qvl_grammar_matcher *m = calloc(1, sizeof *m);
    if (!m) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    m->g = g;
    qvl_status st = start(m, err);
    if (st != QVL_OK) {
        qvl_grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return QVL_OK;
}

void qvl_grammar_matcher_free(qvl_grammar_matcher *m) {
    if (!m) return;
    free(m->a.frames);
    free(m->a.tops);
    free(m);
}

qvl_status qvl_grammar_matcher_reset(qvl_grammar_matcher *m, qvl_error *err) {
    return start(m, err);
}

/* Copies the frames the current state reaches into a fresh arena (same contents, new
 * indices), so the arena holds only what is live. */
static qvl_status compact(qvl_grammar_matcher *m, qvl_error *err) {
    g_arena *a = &m->a;
    int32_t *map = malloc(a->n_frames * sizeof *map);
    g_frame *nf = malloc((a->n_frames + 1) * sizeof *nf);
    int32_t *chain = malloc((a->n_frames + 1) * sizeof *chain);
    if (!map || !nf || !chain) {
        free(map);
        free(nf);
        free(chain);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for parse stacks");
    }
    for (size_t i = 0; i < a->n_frames; i++) map[i] = -1;
    size_t n = 0;
    for (int32_t i = 0; i < m->cur.n; i++) {
        size_t depth = 0; /* the unmapped part of the chain, top first */
        for (int32_t f = a->tops[m->cur.off + (size_t)i]; f >= 0 && map[f] < 0; f = a->frames[f].parent)
            chain[depth++] = f;
        while (depth > 0) { /* parents first, so each parent is mapped when its child is */
            int32_t f = chain[--depth];
            g_frame fr = a->frames[f];
            fr.parent = fr.parent >= 0 ? map[fr.parent] : -1;
            nf[n] = fr;
            map[f] = (int32_t)n++;
        }
    }
    for (int32_t i = 0; i < m->cur.n; i++) a->tops[(size_t)i] = map[a->tops[m->cur.off + (size_t)i]];
    free(a->frames);
    free(map);
    free(chain);
    a->frames = nf;
    a->cap_frames = a->n_frames + 1;
    a->n_frames = n;
    a->n_tops = (size_t)m->cur.n;
    m->cur.off = 0;
    m->live_frames = n;
    return QVL_OK;
}

qvl_status qvl_grammar_matcher_feed(qvl_grammar_matcher *m, const void *bytes, size_t n,
                                    bool *accepted, qvl_error *err) {
    qvl_error local;
    if (!err) err = &local;
    *accepted = false;
    const uint8_t *b = bytes;
    g_state s = m->cur;
    size_t frames0 = m->a.n_frames, tops0 = m->a.n_tops;
    for (size_t i = 0; i < n; i++) {
        g_state next;
        int r = qvl_g_advance(m->g, &m->a, &s, b[i], &next, err);
        if (r <= 0) {
            m->a.n_frames = frames0; /* the state before this call is untouched */
            m->a.n_tops = tops0;
            return r < 0 ? err->status : QVL_OK;
        }
        s = next;
    }
    /* the new tops move to the front; frames are compacted once garbage dominates */
    memmove(m->a.tops, m->a.tops + s.off, (size_t)s.n * sizeof *m->a.tops);
    s.off = 0;
    m->a.n_tops = (size_t)s.n;
    m->cur = s;
    *accepted = true;
    if (m->a.n_frames > 4 * m->live_frames + 4096) return compact(m, err);
    return QVL_OK;
}

bool qvl_grammar_matcher_accepting(const qvl_grammar_matcher *m) {
    return m->cur.accept && m->cur.need == 0;
}

bool qvl_grammar_matcher_done(const qvl_grammar_matcher *m) {
    return m->cur.accept && m->cur.n == 0;
}

qvl_status qvl_grammar_matcher_allows_byte(qvl_grammar_matcher *m, uint8_t b, bool *ok,
                                           qvl_error *err) {
    qvl_error local;
    if (!err) err = &local;
    size_t frames0 = m->a.n_frames, tops0 = m->a.n_tops;
    g_state next;
    int r = qvl_g_advance(m->g, &m->a, &m->cur, b, &next, err);
    m->a.n_frames = frames0;
    m->a.n_tops = tops0;
    *ok = r > 0;
    return r < 0 ? err->status : QVL_OK;
}

size_t qvl_grammar_matcher_state_key(const qvl_grammar_matcher *m, int32_t *key, size_t cap) {
    size_t n = 0;
#define PUT(x) do { if (n < cap) key[n] = (int32_t)(x); n++; } while (0)
    const g_state *s = &m->cur;
    const int32_t *tops = &m->a.tops[s->off];
    PUT((s->accept ? 1 : 0) | s->need << 8 | s->len << 16);
    PUT(s->need ? s->acc : 0); /* acc is stale once a character is whole */
    PUT(s->n);
    /* The same set of stacks can be reached in different orders (which alternative matched
     * the last character decides the order of expansion), so the stacks are written in order
     * of (chain hash, index): a selection, as states hold few stacks. Distinct stacks with
     * equal hashes keep their own order, which at worst costs a cache miss. */
    uint64_t last = 0;
    for (int32_t k = 0; k < s->n; k++) {
        uint64_t best = UINT64_MAX;
        for (int32_t i = 0; i < s->n; i++) {
            uint64_t o = (uint64_t)m->a.frames[tops[i]].hash << 32 | (uint32_t)i;
            if ((k == 0 || o > last) && o < best) best = o;
        }
        last = best;
        for (int32_t f = tops[(uint32_t)best]; f >= 0; f = m->a.frames[f].parent)
            PUT(m->a.frames[f].pos); /* top first, then -1 */
        PUT(-1);
    }
#undef PUT
    return n;
}
