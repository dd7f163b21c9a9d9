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
 * Whole subtrees inside strings: a state S that every "plain" byte (printable ASCII but '"' and
 * '\\', the bytes a JSON string takes as themselves) leads back to S itself (the stacks of
 * `"\"" char* "\""` after any ordinary character are the stacks before it) accepts every token
 * made of plain bytes alone. The walk checks that once per call (94 advances) and then takes
 * each subtree whose bytes are all plain, entered from S, as a run of token ids without
 * advancing the matcher: per node, a flag says the subtree is all plain, and the subtree's
 * tokens are ids[tok_lo[i], tok_lo[skip[i]]) (preorder keeps them contiguous).
 * When, besides, each of S's character tests takes either every non-ASCII code point or none
 * (a negated class such as [^"\\\x00-\x1F] does), every non-ASCII character does to S what
 * one of them does (checked with U+00E9), and a token that ends inside a character is allowed
 * exactly when its bytes so far are well-formed; so a subtree whose text, read from the start
 * of a character, is plain ASCII and well-formed UTF-8 (its last character possibly cut) is
 * taken whole too (the second flag). Only tokens with a quote, a backslash, a control byte or
 * broken UTF-8 are still matched byte by byte. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

struct qvl_grammar_vocab {
    size_t n_nodes;
    uint8_t *byte;
    int32_t *depth, *skip, *tok_first, *tok_count;
    int32_t *ids; /* token ids sorted by their bytes */
    int32_t *tok_lo; /* per node (and n_nodes): ids index of the first token at or after it */
    uint8_t *plain;  /* per node: PLAIN_ASCII, PLAIN_UTF8 (its subtree's text from there) */
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
    free(v->tok_lo);
    free(v->plain);
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

/* tok_lo and plain from the preorder arrays. */
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
    return QVL_OK;
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
    int32_t *path = malloc((longest + 2) * sizeof *path);
    if (!v->byte || !v->depth || !v->skip || !v->tok_first || !v->tok_count || !v->ids || !path) {
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

/* Which subtrees m's state takes whole: PLAIN_ASCII when every plain byte leads it back to
 * itself, PLAIN_UTF8 when non-ASCII characters do too; 0 for neither; -1 error. */
static int loops_on_plain(qvl_grammar_matcher *m, qvl_error *err) {
    g_arena *a = &m->a;
    const size_t frames = a->n_frames, tops = a->n_tops;
    int r = 1;
    for (int b = 0x20; b < 0x80 && r == 1; b++) {
        if (!plain_byte((uint8_t)b)) continue;
        g_state to;
        r = qvl_g_advance(m->g, a, &m->cur, (uint8_t)b, &to, err);
        if (r == 1 && !qvl_g_same_state(a, &m->cur, &to)) r = 0;
        a->n_frames = frames;
        a->n_tops = tops;
    }
    if (r != 1) return r;
    for (int32_t k = 0; k < m->cur.n; k++) { /* every non-ASCII code point or none */
        const g_elem *e = &m->g->elems[a->frames[a->tops[m->cur.off + (size_t)k]].pos];
        if (qvl_g_elem_overlaps(m->g, e, 0x80, 0x10FFFF) &&
            (!qvl_g_elem_covers(m->g, e, 0x80, 0xD7FF) ||
             !qvl_g_elem_covers(m->g, e, 0xE000, 0x10FFFF)))
            return PLAIN_ASCII;
    }
    g_state mid, to;
    r = qvl_g_advance(m->g, a, &m->cur, 0xC3, &mid, err);
    if (r == 1) r = qvl_g_advance(m->g, a, &mid, 0xA9, &to, err);
    if (r == 1 && !qvl_g_same_state(a, &m->cur, &to)) r = 0;
    a->n_frames = frames;
    a->n_tops = tops;
    return r < 0 ? -1 : r == 1 ? PLAIN_UTF8 : PLAIN_ASCII;
}

static size_t allow_run(const qvl_grammar_vocab *v, int32_t from, int32_t to, uint8_t *allowed,
                        size_t n_allowed) {
    size_t n = 0;
    for (int32_t k = from; k < to; k++) {
        int32_t id = v->ids[k];
        if ((size_t)id < n_allowed && !allowed[id]) {
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
    const int loops = loops_on_plain(m, err);
    if (loops < 0) return err->status;
    g_state *st = malloc(((size_t)v->max_depth + 1) * sizeof *st);
    size_t *mark = malloc(2 * ((size_t)v->max_depth + 1) * sizeof *mark);
    bool *home = malloc(((size_t)v->max_depth + 1) * sizeof *home); /* state at depth d is S */
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
    home[0] = loops > 0;
    size_t n = 0;
    qvl_status status = QVL_OK;
    for (size_t i = 0; i < v->n_nodes;) {
        int32_t d = v->depth[i];
        if (home[d - 1] && (v->plain[i] & loops)) {
            const size_t got = allow_run(v, v->tok_lo[i], v->tok_lo[v->skip[i]], allowed, n_allowed);
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
        home[d] = home[d - 1] && plain_byte(v->byte[i]);
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
