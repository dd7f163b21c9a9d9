/* Finding added tokens in text, leftmost first and then longest, the way `tokenizers` cuts them
 * out before anything else runs. The tokens are put in a trie backwards, with Aho-Corasick
 * failure links; reading a text from its end, the automaton's state after byte i is the longest
 * suffix of the reversed text read so far that is a path of the trie, so the longest token
 * starting at i is the longest one along that state's failure chain (kept in `best`). One pass
 * gives every start position: linear in the text, where trying each position forwards would cost
 * the text's length times the longest token's. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

#define NO_EDGE UINT32_MAX

static bool matcher_new_node(tok_matcher *m, uint32_t *index) {
    if (m->n_nodes == m->cap_nodes) {
        size_t cap = m->cap_nodes ? m->cap_nodes * 2 : 64;
        if (cap >= UINT32_MAX) return false;
        tok_trie_node *p = realloc(m->nodes, cap * sizeof *p);
        if (!p) return false;
        m->nodes = p;
        m->cap_nodes = cap;
    }
    tok_trie_node *n = &m->nodes[m->n_nodes];
    n->first_edge = NO_EDGE;
    n->fail = 0;
    n->token = n->best = -1;
    *index = (uint32_t)m->n_nodes++;
    return true;
}

static uint32_t matcher_child(const tok_matcher *m, uint32_t node, uint8_t byte) {
    for (uint32_t e = m->nodes[node].first_edge; e != NO_EDGE; e = m->edges[e].next)
        if (m->edges[e].byte == byte) return m->edges[e].child;
    return NO_EDGE;
}

static bool matcher_add_edge(tok_matcher *m, uint32_t parent, uint8_t byte, uint32_t child) {
    if (m->n_edges == m->cap_edges) {
        size_t cap = m->cap_edges ? m->cap_edges * 2 : 64;
        if (cap >= UINT32_MAX) return false;
        tok_trie_edge *p = realloc(m->edges, cap * sizeof *p);
        if (!p) return false;
        m->edges = p;
        m->cap_edges = cap;
    }
    tok_trie_edge *e = &m->edges[m->n_edges];
    e->byte = byte;
    e->child = child;
    e->next = m->nodes[parent].first_edge;
    m->nodes[parent].first_edge = (uint32_t)m->n_edges++;
    return true;
}

/* The automaton's next state from `state` on `byte`. */
static uint32_t matcher_step(const tok_matcher *m, uint32_t state, uint8_t byte) {
    for (;;) {
        const uint32_t c = matcher_child(m, state, byte);
        if (c != NO_EDGE) return c;
        if (state == 0) return 0;
        state = m->nodes[state].fail;
    }
}

/* Failure links and `best`, breadth first (a node's fail is shallower, so already done). */
static bool matcher_link(tok_matcher *m) {
    uint32_t *queue = malloc(m->n_nodes * sizeof *queue);
    if (!queue) return false;
    size_t head = 0, tail = 0;
    queue[tail++] = 0;
    while (head < tail) {
        const uint32_t u = queue[head++];
        for (uint32_t e = m->nodes[u].first_edge; e != NO_EDGE; e = m->edges[e].next) {
            const uint32_t v = m->edges[e].child;
            uint32_t f = 0;
            if (u != 0) {
                f = matcher_step(m, m->nodes[u].fail, m->edges[e].byte);
                if (f == v) f = 0;
            }
            m->nodes[v].fail = f;
            m->nodes[v].best = m->nodes[v].token >= 0 ? m->nodes[v].token : m->nodes[f].best;
            queue[tail++] = v;
        }
    }
    free(queue);
    return true;
}

qvl_status qvl_tok_matcher_build(tok_matcher *m, const tok_added *added, size_t n_added,
                             bool normalized, qvl_error *err) {
    memset(m, 0, sizeof *m);
    m->empty = true;
    uint32_t root;
    if (!matcher_new_node(m, &root)) goto oom;
    for (size_t i = 0; i < n_added; i++) {
        const tok_added *a = &added[i];
        if (a->normalized != normalized) continue;
        uint32_t node = root;
        for (size_t k = a->len; k-- > 0;) {
            uint8_t byte = (uint8_t)a->content[k];
            uint32_t child = matcher_child(m, node, byte);
            if (child == NO_EDGE) {
                if (!matcher_new_node(m, &child) || !matcher_add_edge(m, node, byte, child))
                    goto oom;
            }
            node = child;
        }
        /* the same content twice: the later entry wins */
        m->nodes[node].token = (int32_t)i;
        m->empty = false;
    }
    if (!matcher_link(m)) goto oom;
    return QVL_OK;
oom:
    qvl_tok_matcher_free(m);
    return qvl_fail(err, QVL_E_NOMEM, "added tokens: out of memory building the matcher");
}

void qvl_tok_matcher_free(tok_matcher *m) {
    free(m->nodes);
    free(m->edges);
    memset(m, 0, sizeof *m);
    m->empty = true;
}

static bool starts_push(tok_starts *s, size_t pos, int32_t token) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        size_t *p = realloc(s->pos, cap * sizeof *p);
        if (!p) return false;
        s->pos = p;
        int32_t *t = realloc(s->token, cap * sizeof *t);
        if (!t) return false;
        s->token = t;
        s->cap = cap;
    }
    s->pos[s->n] = pos;
    s->token[s->n++] = token;
    return true;
}

qvl_status qvl_tok_matcher_scan(const tok_matcher *m, const char *text, size_t len,
                                tok_starts *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    if (m->empty || !m->nodes) return QVL_OK;
    const unsigned char *p = (const unsigned char *)text;
    uint32_t state = 0;
    for (size_t i = len; i-- > 0;) {
        state = matcher_step(m, state, p[i]);
        const int32_t best = m->nodes[state].best;
        if (best >= 0 && !starts_push(out, i, best)) {
            qvl_tok_starts_free(out);
            return qvl_fail(err, QVL_E_NOMEM, "tokenizer: out of memory finding added tokens");
        }
    }
    for (size_t a = 0, b = out->n; a + 1 < b; a++, b--) { /* found backwards: make ascending */
        const size_t tp = out->pos[a];
        out->pos[a] = out->pos[b - 1];
        out->pos[b - 1] = tp;
        const int32_t tt = out->token[a];
        out->token[a] = out->token[b - 1];
        out->token[b - 1] = tt;
    }
    return QVL_OK;
}

bool qvl_tok_starts_next(tok_starts *s, const tok_added *added, const char *text, size_t len,
                         size_t from, size_t floor, tok_match *out) {
    while (s->next < s->n && s->pos[s->next] < from) s->next++;
    if (s->next == s->n) return false;
    const unsigned char *p = (const unsigned char *)text;
    const tok_added *a = &added[s->token[s->next]];
    size_t start = s->pos[s->next], end = start + a->len, ws;
    if (a->lstrip) {
        while (start > floor && (ws = qvl_tok_whitespace_len_before(p + floor, start - floor)))
            start -= ws;
    }
    if (a->rstrip) {
        while (end < len && (ws = qvl_tok_whitespace_len_at(p + end, len - end))) end += ws;
    }
    out->start = start;
    out->end = end;
    out->id = a->id;
    return true;
}

void qvl_tok_starts_free(tok_starts *s) {
    free(s->pos);
    free(s->token);
    memset(s, 0, sizeof *s);
}
