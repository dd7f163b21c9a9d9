/* The token trie and the walk that finds which tokens a matcher can take.
 *
 * The trie is stored in preorder: node i holds its byte, its depth (1 for a token's first
 * byte) and skip[i], the index just past its subtree, plus the run of token ids whose bytes
 * end there. The walk is then a linear scan: the state at depth d is the state at depth d - 1
 * advanced by node i's byte; a rejected byte jumps to skip[i], pruning every token below.
 * States of the current path live in one array indexed by depth, and the matcher's arenas are
 * rewound to the parent's marks before each node, so the walk allocates nothing per node once
 * the arenas have grown. */
#include <stdlib.h>
#include <string.h>

#include "grammar_internal.h"

struct qvl_grammar_vocab {
    size_t n_nodes;
    uint8_t *byte;
    int32_t *depth, *skip, *tok_first, *tok_count;
    int32_t *ids; /* token ids sorted by their bytes */
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
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v);
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
    return QVL_OK;
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

qvl_status qvl_grammar_matcher_allowed(qvl_grammar_matcher *m, const qvl_grammar_vocab *v,
                                       uint8_t *allowed, size_t n_allowed, size_t *count,
                                       qvl_error *err) {
    qvl_error local;
    if (!err) err = &local;
    *count = 0;
    if (n_allowed) memset(allowed, 0, n_allowed);
    if (m->cur.n == 0) return QVL_OK; /* only the end can come */
    g_state *st = malloc(((size_t)v->max_depth + 1) * sizeof *st);
    size_t *mark = malloc(2 * ((size_t)v->max_depth + 1) * sizeof *mark);
    if (!st || !mark) {
        free(st);
        free(mark);
        return qvl_fail(err, QVL_E_NOMEM, "grammar: out of memory");
    }
    g_arena *a = &m->a;
    st[0] = m->cur;
    mark[0] = a->n_frames;
    mark[1] = a->n_tops;
    size_t n = 0;
    qvl_status status = QVL_OK;
    for (size_t i = 0; i < v->n_nodes;) {
        int32_t d = v->depth[i];
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
        for (int32_t k = 0; k < v->tok_count[i]; k++) {
            int32_t id = v->ids[v->tok_first[i] + k];
            if ((size_t)id < n_allowed && !allowed[id]) {
                allowed[id] = 1;
                n++;
            }
        }
        i++;
    }
    a->n_frames = mark[0];
    a->n_tops = mark[1];
    free(st);
    free(mark);
    *count = n;
    return status;
}
