/* Added tokens: parsing the added_tokens array and finding them in text, leftmost first and
 * then longest, the way `tokenizers` cuts them out before anything else runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "qvl/checked.h"
#include "tokenizer_internal.h"

#define NO_EDGE UINT32_MAX

static bool matcher_new_node(tok_matcher *m, uint32_t *index) {
    if (m->n_nodes == m->cap_nodes) {
        size_t cap = m->cap_nodes ? m->cap_nodes * 2 : 64;
        tok_trie_node *p = realloc(m->nodes, cap * sizeof *p);
        if (!p) return false;
        m->nodes = p;
        m->cap_nodes = cap;
    }
    m->nodes[m->n_nodes].first_edge = NO_EDGE;
    m->nodes[m->n_nodes].token = -1;
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
        for (size_t k = 0; k < a->len; k++) {
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
        m->first_byte[(uint8_t)a->content[0] >> 3] |= (uint8_t)(1u << ((uint8_t)a->content[0] & 7));
        m->empty = false;
    }
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

bool qvl_tok_matcher_find(const tok_matcher *m, const tok_added *added, const char *text,
                      size_t len, size_t from, size_t floor, tok_match *out) {
    if (m->empty || !m->nodes) return false;
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = from; i < len; i++) {
        if (!(m->first_byte[p[i] >> 3] & (1u << (p[i] & 7)))) continue;
        uint32_t node = 0;
        int32_t best = -1;
        size_t best_end = 0;
        for (size_t j = i; j < len; j++) {
            node = matcher_child(m, node, p[j]);
            if (node == NO_EDGE) break;
            if (m->nodes[node].token >= 0) {
                best = m->nodes[node].token;
                best_end = j + 1;
            }
        }
        if (best < 0) continue;
        const tok_added *a = &added[best];
        size_t start = i, end = best_end, ws;
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
    return false;
}

qvl_status qvl_tok_parse_added_tokens(qvl_tokenizer *tok, const cJSON *node, const char *name,
                                  qvl_error *err) {
    char buf[64], what[64];
    if (!node || cJSON_IsNull(node)) return QVL_OK;
    if (!cJSON_IsArray(node))
        return qvl_fail(err, QVL_E_PARSE, "%s: added_tokens: expected an array, found %s", name,
                        qvl_tok_json_describe(node, buf, sizeof buf));
    size_t n = (size_t)cJSON_GetArraySize(node);
    if (n == 0) return QVL_OK;
    tok->added = calloc(n, sizeof *tok->added);
    if (!tok->added) return qvl_fail(err, QVL_E_NOMEM, "%s: added_tokens: out of memory", name);
    size_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, node) {
        snprintf(what, sizeof what, "added_tokens[%zu]", i);
        if (!cJSON_IsObject(item))
            return qvl_fail(err, QVL_E_PARSE, "%s: %s: expected an object, found %s", name, what,
                            qvl_tok_json_describe(item, buf, sizeof buf));
        tok_added *a = &tok->added[i];
        char id_what[96];
        snprintf(id_what, sizeof id_what, "%s.id", what);
        qvl_status st = qvl_tok_json_id(cJSON_GetObjectItemCaseSensitive(item, "id"), name, id_what,
                                    &a->id, err);
        if (st != QVL_OK) return st;
        const char *content;
        st = qvl_tok_json_opt_string(item, "content", &content, name, what, err);
        if (st != QVL_OK) return st;
        if (!content || !content[0])
            return qvl_fail(err, QVL_E_PARSE, "%s: %s.content: missing or empty", name, what);
        bool single_word;
        if ((st = qvl_tok_json_bool(item, "special", false, &a->special, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "lstrip", false, &a->lstrip, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "rstrip", false, &a->rstrip, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "normalized", true, &a->normalized, name, what, err)) ||
            (st = qvl_tok_json_bool(item, "single_word", false, &single_word, name, what, err)))
            return st;
        if (single_word)
            return qvl_fail(err, QVL_E_UNSUPPORTED,
                            "%s: %s (\"%.40s\"): single_word=true is not supported", name, what,
                            content);
        a->len = strlen(content);
        a->content = malloc(a->len + 1);
        if (!a->content) return qvl_fail(err, QVL_E_NOMEM, "%s: %s: out of memory", name, what);
        memcpy(a->content, content, a->len + 1);
        tok->n_added = ++i;
    }
    qvl_status st = qvl_tok_matcher_build(&tok->raw_matcher, tok->added, tok->n_added, false, err);
    if (st == QVL_OK)
        st = qvl_tok_matcher_build(&tok->norm_matcher, tok->added, tok->n_added, true, err);
    return st;
}
