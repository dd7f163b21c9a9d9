/* Inspecting graphs: the public accessors plus the helpers the other graph files share
 * (labels, storage roots, execution order). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

bool qvl_gi_valid_tid(const qvl_graph *g, qvl_tid t) {
    return g && t >= 0 && (size_t)t < g->n;
}

bool qvl_gi_is_node(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) && g->t[t].kind == QVL_TENSOR_NODE && g->t[t].live;
}

const char *qvl_gi_label(const qvl_graph *g, qvl_tid t, char *buf, size_t size) {
    if (qvl_gi_valid_tid(g, t) && g->t[t].name)
        snprintf(buf, size, "%s", g->t[t].name);
    else
        snprintf(buf, size, "#%d", (int)t);
    return buf;
}

uint32_t qvl_gi_n_src(const qvl_graph *g, qvl_tid t) {
    if (!qvl_gi_valid_tid(g, t) || g->t[t].kind != QVL_TENSOR_NODE) return 0;
    return qvl_op_max_inputs(g->t[t].op);
}

bool qvl_gi_is_alias(const qvl_graph *g, qvl_tid t) {
    if (!qvl_gi_valid_tid(g, t) || g->t[t].kind != QVL_TENSOR_NODE) return false;
    return g->t[t].op == QVL_OP_VIEW || qvl_gi_is_store_op(g->t[t].op);
}

qvl_tid qvl_gi_storage_root(const qvl_graph *g, qvl_tid t, int64_t *elem_off) {
    int64_t off = 0;
    /* Bounded walk: a corrupted graph with a cycle of views must not hang. */
    for (size_t steps = 0; qvl_gi_is_alias(g, t) && steps <= g->n; steps++) {
        const qvl_gtensor *r = &g->t[t];
        if (r->op == QVL_OP_VIEW) off += r->params.view.offset;
        t = r->src[0];
    }
    if (elem_off) *elem_off = off;
    return t;
}

bool qvl_gi_bytes(const qvl_tensor_desc *d, size_t *out) {
    size_t bytes;
    if (!qvl_dtype_row_bytes(d->dtype, qvl_desc_nelem(d), &bytes)) return false;
    *out = bytes;
    return true;
}

void qvl_gi_src_descs(const qvl_graph *g, qvl_tid t, const qvl_tensor_desc **out) {
    for (int i = 0; i < QVL_MAX_SRC; i++) out[i] = NULL;
    uint32_t n = qvl_gi_n_src(g, t);
    for (uint32_t i = 0; i < n && i < QVL_MAX_SRC; i++) {
        qvl_tid s = g->t[t].src[i];
        if (qvl_gi_valid_tid(g, s)) out[i] = &g->t[s].desc;
    }
}

void qvl_gi_shapes_str(const qvl_graph *g, qvl_tid t, char *buf, size_t size) {
    size_t used = 0;
    buf[0] = '\0';
    const qvl_tensor_desc *d[QVL_MAX_SRC];
    qvl_gi_src_descs(g, t, d);
    uint32_t n = qvl_gi_n_src(g, t);
    char one[128];
    for (uint32_t i = 0; i < n && used < size; i++) {
        int w = snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                         d[i] ? qvl_desc_str(d[i], one, sizeof one) : "-");
        if (w < 0) return;
        used += (size_t)w;
    }
    if (used < size && qvl_gi_valid_tid(g, t))
        snprintf(buf + used, size - used, " -> %s", qvl_desc_str(&g->t[t].desc, one, sizeof one));
}

qvl_status qvl_gi_topo_order(const qvl_graph *g, qvl_tid **order_out, size_t *n_out,
                             qvl_error *err) {
    *order_out = NULL;
    *n_out = 0;
    size_t n = g->n;
    uint8_t *state = calloc(n ? n : 1, 1); /* 0 new, 1 on the DFS stack, 2 emitted */
    qvl_tid *order = malloc((n ? n : 1) * sizeof *order);
    struct frame { qvl_tid t; uint32_t slot; } *stack = malloc((n ? n : 1) * sizeof *stack);
    if (!state || !order || !stack) {
        free(state);
        free(order);
        free(stack);
        return qvl_fail(err, QVL_E_NOMEM, "graph: out of memory ordering nodes");
    }
    size_t n_order = 0;
    for (size_t root = 0; root < n; root++) {
        if (state[root] || !qvl_gi_is_node(g, (qvl_tid)root)) continue;
        size_t sp = 0;
        stack[sp++] = (struct frame){(qvl_tid)root, 0};
        state[root] = 1;
        while (sp) {
            struct frame *f = &stack[sp - 1];
            const qvl_gtensor *r = &g->t[f->t];
            uint32_t n_src = qvl_op_max_inputs(r->op);
            qvl_tid next = -1;
            while (f->slot < n_src && f->slot < QVL_MAX_SRC) {
                qvl_tid s = r->src[f->slot++];
                if (!qvl_gi_is_node(g, s) || state[s] == 2) continue;
                if (state[s] == 1) {
                    char lbl[128];
                    free(state);
                    free(order);
                    free(stack);
                    return qvl_fail(err, QVL_E_INVALID, "graph: cycle through node %s (%s)",
                                    qvl_gi_label(g, s, lbl, sizeof lbl),
                                    qvl_op_name(g->t[s].op));
                }
                next = s;
                break;
            }
            if (next >= 0) {
                state[next] = 1;
                stack[sp++] = (struct frame){next, 0};
            } else {
                state[f->t] = 2;
                order[n_order++] = f->t;
                sp--;
            }
        }
    }
    free(state);
    free(stack);
    *order_out = order;
    *n_out = n_order;
    return QVL_OK;
}

/* ---- public accessors ---- */

size_t qvl_graph_n_tensors(const qvl_graph *g) {
    return g ? g->n : 0;
}

size_t qvl_graph_n_nodes(const qvl_graph *g) {
    size_t c = 0;
    for (size_t i = 0; g && i < g->n; i++) c += qvl_gi_is_node(g, (qvl_tid)i);
    return c;
}

size_t qvl_graph_count_op(const qvl_graph *g, qvl_op op) {
    size_t c = 0;
    for (size_t i = 0; g && i < g->n; i++)
        c += qvl_gi_is_node(g, (qvl_tid)i) && g->t[i].op == op;
    return c;
}

/* Does node r fix the sequence position in its parameters? */
static bool fixes_position(const qvl_gtensor *r) {
    switch (r->op) {
    case QVL_OP_STORE_ROWS:
    case QVL_OP_MASK_CAUSAL:
        return true;
    case QVL_OP_ATTENTION:
        return r->params.attention.mask == QVL_MASK_CAUSAL;
    default:
        return false;
    }
}

bool qvl_graph_position_free(const qvl_graph *g, qvl_tid *first) {
    if (first) *first = -1;
    for (size_t i = 0; g && i < g->n; i++)
        if (qvl_gi_is_node(g, (qvl_tid)i) && fixes_position(&g->t[i])) {
            if (first) *first = (qvl_tid)i;
            return false;
        }
    return g != NULL;
}

qvl_tensor_kind qvl_graph_kind(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) ? g->t[t].kind : QVL_TENSOR_NODE;
}

const qvl_tensor_desc *qvl_graph_desc(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) ? &g->t[t].desc : NULL;
}

const char *qvl_graph_tensor_name(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) ? g->t[t].name : NULL;
}

qvl_op qvl_graph_op(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) && g->t[t].kind == QVL_TENSOR_NODE ? g->t[t].op
                                                                      : QVL_OP_COUNT;
}

const qvl_tid *qvl_graph_srcs(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) && g->t[t].kind == QVL_TENSOR_NODE ? g->t[t].src : NULL;
}

const qvl_params *qvl_graph_params(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) && g->t[t].kind == QVL_TENSOR_NODE ? &g->t[t].params : NULL;
}

bool qvl_graph_is_live(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) && g->t[t].live;
}

int32_t qvl_graph_group(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_valid_tid(g, t) ? g->t[t].group : -1;
}

qvl_tid qvl_graph_find(const qvl_graph *g, const char *name) {
    if (!g || !name) return -1;
    return qvl_gi_names_find(g, name);
}

size_t qvl_graph_n_outputs(const qvl_graph *g) {
    return g ? g->n_out : 0;
}

qvl_tid qvl_graph_output(const qvl_graph *g, size_t i, const char **name) {
    if (!g || i >= g->n_out) {
        if (name) *name = NULL;
        return -1;
    }
    if (name) *name = g->out[i].name;
    return g->out[i].t;
}

size_t qvl_graph_offset(const qvl_graph *g, qvl_tid t) {
    if (!qvl_gi_valid_tid(g, t) || !g->planned) return QVL_GI_NO_OFFSET;
    int64_t elem = 0;
    qvl_tid root = qvl_gi_storage_root(g, t, &elem);
    if (!qvl_gi_valid_tid(g, root) || g->t[root].offset == QVL_GI_NO_OFFSET)
        return QVL_GI_NO_OFFSET;
    return g->t[root].offset + qvl_dtype_offset_bytes(g->t[root].desc.dtype, elem);
}

void qvl_gi_probe_node(const qvl_graph *g, qvl_tid t, qvl_tensor in[QVL_MAX_SRC], qvl_tensor *dst,
                       qvl_node *node) {
    const qvl_gtensor *r = &g->t[t];
    *dst = (qvl_tensor){r->desc, NULL};
    memset(node, 0, sizeof *node);
    node->op = r->op;
    node->params = r->params;
    node->n_src = qvl_op_max_inputs(r->op);
    node->name = r->name;
    for (uint32_t i = 0; i < node->n_src && i < QVL_MAX_SRC; i++) {
        if (r->src[i] < 0) continue;
        in[i] = (qvl_tensor){g->t[r->src[i]].desc, NULL};
        node->src[i] = &in[i];
    }
    node->dst = dst;
}
