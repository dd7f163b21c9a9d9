/* The token trie and the walk that finds which tokens a matcher can take.
 *
 * The trie is stored in preorder: node i holds its byte, its depth (1 for a token's first
 * byte) and skip[i], the index just past its subtree, plus the run of token ids whose bytes
 * end there. The walk is then a linear scan: the state at depth d is the state at depth d - 1
 * advanced by node i's byte; a rejected byte jumps to skip[i], pruning every token below.
 * States of the current path live in one array indexed by depth, and the matcher's arenas are
 * rewound to the parent's marks before each node, so the walk allocates nothing per node once
 * the arenas have grown.
 *
 * Whole subtrees inside strings: call a state "uniform" when it is at a character boundary and
 * each of its stacks' character tests takes every plain byte (printable ASCII but '"' and '\\',
 * the bytes a JSON string takes as themselves) or none of them, one at least taking them all.
 * qvl_g_advance builds the next state from the tests that match, in order, whatever the byte,
 * so every plain byte leads a uniform state S to one and the same state S'. The walk follows
 * that chain once per call (S_0 the matcher's state, S_t+1 = S_t advanced by 'a'): one advance
 * per step, and it stops at the first state that is not uniform (after u steps), at one that is
 * S_t again (a loop, `"\"" char* "\""`: u unbounded), or once u reaches the vocabulary's
 * longest token. A token of k plain characters is then taken from S_j exactly when j + k <= u,
 * so a subtree entered from S_j whose bytes are all plain and whose longest token holds at most
 * u - j characters (chars[i], counted from node i) is allowed whole, as a run of token ids
 * without advancing the matcher (its tokens are ids[tok_lo[i], tok_lo[skip[i]]): preorder keeps
 * them contiguous). That covers free strings (a loop) and strings bounded by maxLength
 * (jchar{m,n}: every counted character a state of its own, r characters left giving u = r).
 * Non-ASCII text: when, besides, each test that takes the plain bytes takes every non-ASCII
 * code point and each other test none (a negated class such as [^"\\\x00-\x1F] does), a
 * non-ASCII character's lead byte keeps the same tests and its last byte matches the same ones
 * as a plain byte, so it leads to S' too, and a token cut inside a character is taken exactly
 * when its bytes so far are well-formed. So a subtree of plain ASCII and well-formed UTF-8 (read
 * from the start of a character, its last character possibly cut and counted as one) is taken
 * whole within the chain's prefix of such states. A plain subtree with longer tokens, entered
 * when the chain ends in a state that takes no text (a bounded string's last state takes only
 * the closing quote), is scanned instead: each token's character count (id_chars, from the
 * root) says whether it fits. Only tokens with a quote, a backslash, a control byte or broken
 * UTF-8, and plain ones too long for a chain that ends in a state still taking some text, are
 * matched byte by byte. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

struct qvl_grammar_vocab {
    size_t n_nodes;
    uint8_t *byte;
    int32_t *depth, *skip, *tok_first, *tok_count;
    int32_t *ids; /* token ids sorted by their bytes */
    uint16_t *id_chars; /* per ids index: the token's characters (counted as chars) */
    int32_t *tok_lo; /* per node (and n_nodes): ids index of the first token at or after it */
    uint8_t *plain;  /* per node: PLAIN_ASCII, PLAIN_UTF8 (its subtree's text from there) */
    uint16_t *chars; /* per node: the most characters of a token below it, counted from it */
    int32_t max_chars; /* the most characters of any token */
    int32_t max_depth;
    /* each text token's bytes by id: blob[off[id], off[id] + len[id]); len 0: not a text token */
    uint8_t *blob;
    uint32_t *off, *len;
    int32_t n_ids;
};

typedef struct piece {
    const uint8_t *p;
    size_t len;
    int32_t id;
} piece;

static int cmp_piece(const void *x, const void *y) {
    const piece *a = x, *b = y;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, n);
    if (c) return c;
    if (a->len != b->len) return a->len < b->len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

void qvl_grammar_vocab_free(qvl_grammar_vocab *v) {
    if (!v) return;
    free(v->byte);
    free(v->depth);
    free(v->skip);
    free(v->tok_first);
    free(v->tok_count);
    free(v->ids);
    free(v->id_chars);
    free(v->tok_lo);
    free(v->plain);
    free(v->chars);
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v);
}

enum {
    PLAIN_ASCII = 1, /* plain bytes only */
    PLAIN_UTF8 = 2,  /* plain bytes and well-formed non-ASCII characters, the last maybe cut */
};

static bool plain_byte(uint8_t b) { return b >= 0x20 && b < 0x80 && b != '"' && b != '\\'; }

/* Whether the text of node i's subtree, read from the start of a character, is PLAIN_UTF8.
 * Each node is scanned over its subtree (to its first offending byte), so the build costs the
 * sum of the trie's depths, a few million steps. */
static bool subtree_utf8(const qvl_grammar_vocab *v, size_t i, g_state *chars) {
    const int32_t base = v->depth[i] - 1;
    chars[0] = (g_state){0};
    for (size_t j = i; j < (size_t)v->skip[i]; j++) {
        const int32_t d = v->depth[j] - base;
        const uint8_t b = v->byte[j];
        uint32_t lo, hi;
        if ((b < 0x80 && !plain_byte(b)) || !qvl_g_utf8_step(&chars[d - 1], b, &chars[d], &lo, &hi))
            return false;
    }
    return true;
}

/* chars from the preorder arrays: code points as maxLength counts them, a byte that does not
 * continue a character (0x80-0xBF do) starting one, so a cut last character counts too. Nodes
 * come in reverse preorder: when node i (depth d) comes, the nodes of depth d + 1 since the last
 * one of depth d or less are its children, whose maximum below[d + 1] holds. */
static qvl_status count_chars(qvl_grammar_vocab *v, qvl_error *err) {
    v->chars = malloc((v->n_nodes + 1) * sizeof *v->chars);
    uint16_t *below = calloc((size_t)v->max_depth + 2, sizeof *below);
    if (!v->chars || !below) {
        free(below);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for the token trie");
    }
    v->max_chars = 0;
    for (size_t i = v->n_nodes; i-- > 0;) {
        const int32_t d = v->depth[i];
        const uint16_t c = (uint16_t)(((v->byte[i] & 0xC0) != 0x80) + below[d + 1]);
        below[d + 1] = 0;
        v->chars[i] = c;
        if (c > below[d]) below[d] = c;
        if (c > v->max_chars) v->max_chars = c;
    }
    free(below);
    return QVL_OK;
}

/* tok_lo, plain and chars from the preorder arrays. */
static qvl_status index_subtrees(qvl_grammar_vocab *v, qvl_error *err) {
    v->tok_lo = malloc((v->n_nodes + 1) * sizeof *v->tok_lo);
    v->plain = malloc(v->n_nodes + 1);
    g_state *chars = malloc(((size_t)v->max_depth + 1) * sizeof *chars);
    if (!v->tok_lo || !v->plain || !chars) {
        free(chars);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for the token trie");
    }
    v->tok_lo[0] = 0;
    for (size_t i = 0; i < v->n_nodes; i++) v->tok_lo[i + 1] = v->tok_lo[i] + v->tok_count[i];
    size_t bad = v->n_nodes; /* the first node at or after i with a byte that is not plain */
    for (size_t i = v->n_nodes; i-- > 0;) {
        if (!plain_byte(v->byte[i])) bad = i;
        v->plain[i] = bad >= (size_t)v->skip[i] ? PLAIN_ASCII | PLAIN_UTF8 : 0;
        if (!v->plain[i] && subtree_utf8(v, i, chars)) v->plain[i] = PLAIN_UTF8;
    }
    free(chars);
    return count_chars(v, err);
}

size_t qvl_grammar_vocab_n_nodes(const qvl_grammar_vocab *v) {
    return v ? v->n_nodes : 0;
}

bool qvl_grammar_vocab_piece(const qvl_grammar_vocab *v, int32_t id, const uint8_t **bytes,
                             size_t *len) {
    if (!v || id < 0 || id >= v->n_ids || v->len[id] == 0) return false;
    *bytes = v->blob + v->off[id];
    *len = v->len[id];
    return true;
}

/* pieces (sorted here) -> v. */
static qvl_status build(piece *ps, size_t n, qvl_grammar_vocab *v, qvl_error *err) {
    qsort(ps, n, sizeof *ps, cmp_piece);
    size_t total = 0, longest = 0;
    for (size_t i = 0; i < n; i++) {
        total += ps[i].len;
        if (ps[i].len > longest) longest = ps[i].len;
    }
    if (longest > 65535) return qvl_fail(err, QVL_E_LIMIT, "grammar: a token of over 65535 bytes");
    v->byte = malloc(total + 1);
    v->depth = malloc((total + 1) * sizeof *v->depth);
    v->skip = malloc((total + 1) * sizeof *v->skip);
    v->tok_first = malloc((total + 1) * sizeof *v->tok_first);
    v->tok_count = malloc((total + 1) * sizeof *v->tok_count);
    v->ids = malloc((n + 1) * sizeof *v->ids);
    v->id_chars = malloc((n + 1) * sizeof *v->id_chars);
    int32_t *path = malloc((longest + 2) * sizeof *path);
    if (!v->byte || !v->depth || !v->skip || !v->tok_first || !v->tok_count || !v->ids ||
        !v->id_chars || !path) {
        free(path);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for the token trie");
    }
    size_t nodes = 0, open = 0; /* open: depth of the path of unfinished nodes */
    for (size_t i = 0; i < n; i++) {
        size_t lcp = 0;
        if (i > 0) {
            size_t m = ps[i - 1].len < ps[i].len ? ps[i - 1].len : ps[i].len;
            while (lcp < m && ps[i - 1].p[lcp] == ps[i].p[lcp]) lcp++;
        }
        for (; open > lcp; open--) v->skip[path[open]] = (int32_t)nodes;
        for (size_t d = lcp + 1; d <= ps[i].len; d++) {
            v->byte[nodes] = ps[i].p[d - 1];
            v->depth[nodes] = (int32_t)d;
            v->tok_first[nodes] = -1;
            v->tok_count[nodes] = 0;
            path[d] = (int32_t)nodes++;
        }
        open = ps[i].len;
        int32_t at = path[open];
        if (v->tok_first[at] < 0) v->tok_first[at] = (int32_t)i;
        v->tok_count[at]++;
        v->ids[i] = ps[i].id;
        v->id_chars[i] = 0;
        for (size_t k = 0; k < ps[i].len; k++) v->id_chars[i] += (ps[i].p[k] & 0xC0) != 0x80;
    }
    for (; open > 0; open--) v->skip[path[open]] = (int32_t)nodes;
    free(path);
    v->n_nodes = nodes;
    v->max_depth = (int32_t)longest;
    int32_t n_ids = 0;
    for (size_t i = 0; i < n; i++)
        if (ps[i].id + 1 > n_ids) n_ids = ps[i].id + 1;
    v->blob = malloc(total + 1);
    v->off = calloc((size_t)n_ids + 1, sizeof *v->off);
    v->len = calloc((size_t)n_ids + 1, sizeof *v->len);
    if (!v->blob || !v->off || !v->len || total > UINT32_MAX)
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory for the token trie");
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(v->blob + at, ps[i].p, ps[i].len);
        v->off[ps[i].id] = (uint32_t)at;
        v->len[ps[i].id] = (uint32_t)ps[i].len;
        at += ps[i].len;
    }
    v->n_ids = n_ids;
    return index_subtrees(v, err);
}

static qvl_status finish(piece *ps, size_t n, qvl_grammar_vocab **out, qvl_error *err) {
    qvl_grammar_vocab *v = calloc(1, sizeof *v);
    qvl_status st = v ? build(ps, n, v, err) : qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    free(ps);
    if (st != QVL_OK) {
        qvl_grammar_vocab_free(v);
        return st;
    }
    *out = v;
    return QVL_OK;
}

qvl_status qvl_grammar_vocab_from_pieces(const char *const *pieces, const size_t *lens,
                                         int32_t n, qvl_grammar_vocab **out, qvl_error *err) {
    *out = NULL;
    if (n < 0 || (n > 0 && (!pieces || !lens)))
        return qvl_fail(err, QVL_E_INVALID, "qvl_grammar_vocab_from_pieces: bad arguments");
    piece *ps = malloc(((size_t)n + 1) * sizeof *ps);
    if (!ps) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    size_t k = 0;
    for (int32_t i = 0; i < n; i++)
        if (pieces[i] && lens[i] > 0) ps[k++] = (piece){(const uint8_t *)pieces[i], lens[i], i};
    return finish(ps, k, out, err);
}

static qvl_status from_tokenizer(const qvl_tokenizer *tok, bool plain_added,
                                 qvl_grammar_vocab **out, qvl_error *err) {
    *out = NULL;
    if (!tok) return qvl_fail(err, QVL_E_INVALID, "qvl_grammar_vocab_from_tokenizer: NULL tokenizer");
    int32_t n = qvl_tokenizer_vocab_size(tok);
    piece *ps = malloc(((size_t)n + 1) * sizeof *ps);
    if (!ps) return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    size_t k = 0;
    for (int32_t id = 0; id < n; id++) {
        const char *b;
        size_t len;
        const bool added = qvl_tokenizer_is_added(tok, id);
        if ((added && (!plain_added || qvl_tokenizer_is_special(tok, id))) ||
            qvl_tokenizer_token_to_piece(tok, id, &b, &len, NULL) != QVL_OK || len == 0)
            continue;
        ps[k++] = (piece){(const uint8_t *)b, len, id};
    }
    return finish(ps, k, out, err);
}

qvl_status qvl_grammar_vocab_from_tokenizer(const qvl_tokenizer *tok, qvl_grammar_vocab **out,
                                            qvl_error *err) {
    return from_tokenizer(tok, false, out, err);
}

qvl_status qvl_grammar_vocab_from_tokenizer_plain(const qvl_tokenizer *tok,
                                                  qvl_grammar_vocab **out, qvl_error *err) {
    return from_tokenizer(tok, true, out, err);
}

/* How state s's tests take plain bytes: UNIFORM_ASCII when each takes all of them or none and
 * one takes them all; UNIFORM_UTF8 as well when each of those takes every non-ASCII code point
 * and each other test none; 0 otherwise (also inside a character). */
enum { UNIFORM_ASCII = 1, UNIFORM_UTF8 = 2 };

static const uint32_t plain_ranges[3][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7F}};

static int uniform(const qvl_grammar *g, const g_arena *a, const g_state *s) {
    if (s->need) return 0;
    int r = UNIFORM_ASCII | UNIFORM_UTF8, takers = 0;
    for (int32_t k = 0; k < s->n; k++) {
        const g_elem *e = &g->elems[a->frames[a->tops[s->off + (size_t)k]].pos];
        int covered = 0, touched = 0;
        for (int q = 0; q < 3; q++) {
            covered += qvl_g_elem_covers(g, e, plain_ranges[q][0], plain_ranges[q][1]);
            touched += qvl_g_elem_overlaps(g, e, plain_ranges[q][0], plain_ranges[q][1]);
        }
        if (covered == 3) {
            takers++;
            if (!qvl_g_elem_covers(g, e, 0x80, 0xD7FF) || !qvl_g_elem_covers(g, e, 0xE000, 0x10FFFF))
                r &= ~UNIFORM_UTF8;
        } else if (touched) {
            return 0;
        } else if (qvl_g_elem_overlaps(g, e, 0x80, 0x10FFFF)) {
            r &= ~UNIFORM_UTF8;
        }
    }
    return takers ? r : 0;
}

/* Which of plain ASCII (CLOSED_ASCII) and non-ASCII code points (CLOSED_UTF8) no test of s
 * takes, at a character boundary. */
enum { CLOSED_ASCII = 1, CLOSED_UTF8 = 2 };

static int closed(const qvl_grammar *g, const g_arena *a, const g_state *s) {
    if (s->need) return 0;
    int r = CLOSED_ASCII | CLOSED_UTF8;
    for (int32_t k = 0; k < s->n; k++) {
        const g_elem *e = &g->elems[a->frames[a->tops[s->off + (size_t)k]].pos];
        for (int q = 0; q < 3; q++)
            if (qvl_g_elem_overlaps(g, e, plain_ranges[q][0], plain_ranges[q][1])) r &= ~CLOSED_ASCII;
        if (qvl_g_elem_overlaps(g, e, 0x80, 0x10FFFF)) r &= ~CLOSED_UTF8;
    }
    return r;
}

/* The chain of uniform states from a matcher's state (see the top of the file). */
typedef struct chain {
    int32_t u_ascii, u_utf8; /* how many of its first states are uniform (for UTF-8 too), capped
                                at the vocabulary's longest token (also when the chain loops) */
    int closed;              /* closed() of the state it ends in, S_u_ascii */
} chain;

static int plain_chain(qvl_grammar_matcher *m, const qvl_grammar_vocab *v, chain *c,
                       qvl_error *err) {
    g_arena *a = &m->a;
    const size_t frames = a->n_frames, tops = a->n_tops;
    g_state s = m->cur;
    int32_t t = 0;
    *c = (chain){.u_utf8 = -1};
    int r = 1;
    for (; t < v->max_chars; t++) {
        const int how = uniform(m->g, a, &s);
        if (!(how & UNIFORM_UTF8) && c->u_utf8 < 0) c->u_utf8 = t;
        if (!how) {
            c->closed = closed(m->g, a, &s);
            break;
        }
        g_state next;
        if ((r = qvl_g_advance(m->g, a, &s, 'a', &next, err)) <= 0) break;
        if (qvl_g_same_state(a, &s, &next)) { /* a loop: every later state is this one */
            t = v->max_chars;
            break;
        }
        s = next;
    }
    a->n_frames = frames;
    a->n_tops = tops;
    if (r < 0) return -1;
    c->u_ascii = t;
    if (c->u_utf8 < 0) c->u_utf8 = t;
    /* a chain that ends in a state taking no non-ASCII code point but still some plain byte
     * does not refuse every longer non-ASCII token */
    if (c->u_utf8 < c->u_ascii) c->closed &= ~CLOSED_UTF8;
    return 0;
}

/* The tokens of ids[from, to) (of at most u characters). Each id occurs once in ids and the
 * walk reaches each ids index at most once, so every token counted is new. */
static size_t allow_run(const qvl_grammar_vocab *v, int32_t from, int32_t to, uint8_t *allowed,
                        size_t n_allowed) {
    size_t n = 0;
    for (int32_t k = from; k < to; k++) {
        const int32_t id = v->ids[k];
        if ((size_t)id < n_allowed) {
            allowed[id] = 1;
            n++;
        }
    }
    return n;
}

static size_t allow_short(const qvl_grammar_vocab *v, int32_t from, int32_t to, int32_t u,
                          uint8_t *allowed, size_t n_allowed) {
    size_t n = 0;
    for (int32_t k = from; k < to; k++) {
        const int32_t id = v->ids[k];
        if (v->id_chars[k] <= u && (size_t)id < n_allowed) {
            allowed[id] = 1;
            n++;
        }
    }
    return n;
}

size_t qvl_grammar_matcher_bulk_tokens(const qvl_grammar_matcher *m) { return m->bulk; }

qvl_status qvl_grammar_matcher_allowed(qvl_grammar_matcher *m, const qvl_grammar_vocab *v,
                                       uint8_t *allowed, size_t n_allowed, size_t *count,
                                       qvl_error *err) {
    qvl_error local;
    if (!err) err = &local;
    *count = 0;
    m->bulk = 0;
    if (n_allowed) memset(allowed, 0, n_allowed);
    if (m->cur.n == 0) return QVL_OK; /* only the end can come */
    chain c;
    if (plain_chain(m, v, &c, err) < 0) return err->status;
    g_state *st = malloc(((size_t)v->max_depth + 1) * sizeof *st);
    size_t *mark = malloc(2 * ((size_t)v->max_depth + 1) * sizeof *mark);
    /* home[d]: the state at depth d is the chain's S_home[d]; -1: off the chain */
    int32_t *home = malloc(((size_t)v->max_depth + 1) * sizeof *home);
    if (!st || !mark || !home) {
        free(st);
        free(mark);
        free(home);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    }
    g_arena *a = &m->a;
    st[0] = m->cur;
    mark[0] = a->n_frames;
    mark[1] = a->n_tops;
    home[0] = 0;
    size_t n = 0;
    qvl_status status = QVL_OK;
    for (size_t i = 0; i < v->n_nodes;) {
        const int32_t d = v->depth[i], j = home[d - 1];
        /* a plain subtree from S_j: whole when its tokens fit in what the chain has left; when
         * some do not and the chain ends closed to them, its tokens up to u characters (all
         * from the root, j of them plain ASCII before node i) */
        const int kind = j < 0 ? 0 : (v->plain[i] & PLAIN_ASCII) ? PLAIN_ASCII : v->plain[i];
        const int32_t u = kind == PLAIN_ASCII ? c.u_ascii : c.u_utf8;
        if (kind && v->chars[i] <= u - j) {
            const size_t got = allow_run(v, v->tok_lo[i], v->tok_lo[v->skip[i]], allowed, n_allowed);
            n += got;
            m->bulk += got;
            i = (size_t)v->skip[i];
            continue;
        }
        const int shut = kind == PLAIN_ASCII ? CLOSED_ASCII : CLOSED_ASCII | CLOSED_UTF8;
        if (kind && (c.closed & shut) == shut) {
            const size_t got = allow_short(v, v->tok_lo[i], v->tok_lo[v->skip[i]], u, allowed,
                                           n_allowed);
            n += got;
            m->bulk += got;
            i = (size_t)v->skip[i];
            continue;
        }
        a->n_frames = mark[2 * (d - 1)];
        a->n_tops = mark[2 * (d - 1) + 1];
        int r = qvl_g_advance(m->g, a, &st[d - 1], v->byte[i], &st[d], err);
        if (r < 0) {
            status = err->status;
            break;
        }
        if (r == 0) {
            i = (size_t)v->skip[i];
            continue;
        }
        mark[2 * d] = a->n_frames;
        mark[2 * d + 1] = a->n_tops;
        home[d] = j >= 0 && j < c.u_ascii && plain_byte(v->byte[i]) ? j + 1 : -1;
        n += allow_run(v, v->tok_first[i], v->tok_first[i] + v->tok_count[i], allowed, n_allowed);
        i++;
    }
    a->n_frames = mark[0];
    a->n_tops = mark[1];
    free(st);
    free(mark);
    free(home);
    *count = n;
    return status;
}
