/* Building graphs: tensor records, names, outputs and the generic node constructor. The first
 * error is kept in g->err and every later builder call returns -1 without doing anything. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

qvl_graph *qvl_graph_new(void) {
    return calloc(1, sizeof(qvl_graph));
}

void qvl_graph_free(qvl_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) free(g->t[i].name);
    for (size_t i = 0; i < g->n_out; i++) free(g->out[i].name);
    free(g->t);
    free(g->out);
    free(g->order);
    free(g->changes);
    free(g->names);
    free(g);
}

qvl_status qvl_graph_error(const qvl_graph *g, qvl_error *err) {
    if (!g) return qvl_fail(err, QVL_E_INVALID, "graph: no graph");
    if (g->err.status == QVL_OK) return QVL_OK;
    if (err) *err = g->err;
    return g->err.status;
}

/* Records the first builder error; later ones are dropped (they usually follow from it). */
QVL_PRINTF(3, 4)
static qvl_tid sticky_fail(qvl_graph *g, qvl_status s, const char *fmt, ...) {
    if (g->err.status == QVL_OK) {
        va_list ap;
        va_start(ap, fmt);
        qvl_failv(&g->err, s, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void qvl_gi_invalidate_plan(qvl_graph *g) {
    g->planned = false;
    free(g->order);
    g->order = NULL;
    g->n_order = 0;
    memset(&g->stats, 0, sizeof g->stats);
    if (g->has_offsets) /* only once: building and fusing change the graph thousands of times */
        for (size_t i = 0; i < g->n; i++) g->t[i].offset = QVL_GI_NO_OFFSET;
    g->has_offsets = false;
}

void qvl_gi_note_change(qvl_graph *g, qvl_tid t) {
    if (!g->tracking || g->track_lost) return;
    if (g->n_changes == g->cap_changes) {
        size_t cap = g->cap_changes ? 2 * g->cap_changes : 16;
        qvl_gi_change *c = realloc(g->changes, cap * sizeof *c);
        if (!c) {
            g->track_lost = true; /* fusion rebuilds its index instead */
            return;
        }
        g->changes = c;
        g->cap_changes = cap;
    }
    qvl_gi_change *c = &g->changes[g->n_changes++];
    c->t = t;
    memcpy(c->src, g->t[t].src, sizeof c->src);
}

void qvl_gi_kill(qvl_graph *g, qvl_tid t) {
    qvl_gi_note_change(g, t);
    g->t[t].live = false;
    qvl_gi_invalidate_plan(g);
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

qvl_tid qvl_gi_append(qvl_graph *g, qvl_tensor_kind kind, const qvl_tensor_desc *desc,
                      const char *name) {
    if (g->n >= (size_t)INT32_MAX) return sticky_fail(g, QVL_E_LIMIT, "graph: too many tensors");
    if (g->n == g->cap) {
        size_t cap = g->cap ? g->cap * 2 : 64;
        qvl_gtensor *t = realloc(g->t, cap * sizeof *t);
        if (!t) return sticky_fail(g, QVL_E_NOMEM, "graph: out of memory adding a tensor");
        g->t = t;
        g->cap = cap;
    }
    char *copy = NULL;
    if (name && !(copy = dup_str(name)))
        return sticky_fail(g, QVL_E_NOMEM, "graph: out of memory naming a tensor");
    qvl_gtensor *r = &g->t[g->n];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->live = true;
    r->desc = *desc;
    r->name = copy;
    r->offset = QVL_GI_NO_OFFSET;
    r->group = g->cur_group;
    for (int i = 0; i < QVL_MAX_SRC; i++) r->src[i] = -1;
    qvl_gi_invalidate_plan(g);
    qvl_tid t = (qvl_tid)g->n++;
    qvl_gi_note_change(g, t);
    return t;
}

/* Is name already taken by an input, a weight or an output (other than tensor self)? */
static bool name_taken(const qvl_graph *g, const char *name, qvl_tid self) {
    return qvl_gi_names_taken(g, name, self);
}

static qvl_tid add_leaf(qvl_graph *g, qvl_tensor_kind kind, const char *name, qvl_dtype dtype,
                        int ndim, const int64_t *shape) {
    const char *what = kind == QVL_TENSOR_INPUT ? "input" : "weight";
    if (g->err.status != QVL_OK) return -1;
    if (!name || !*name) return sticky_fail(g, QVL_E_INVALID, "graph: %s without a name", what);
    if (!qvl_dtype_valid((int)dtype))
        return sticky_fail(g, QVL_E_DTYPE, "graph: %s %s: invalid dtype %d", what, name,
                           (int)dtype);
    qvl_tensor_desc d;
    if (!shape || !qvl_desc_init(&d, dtype, ndim, shape))
        return sticky_fail(g, QVL_E_SHAPE, "graph: %s %s: invalid shape (%d dims)", what, name,
                           ndim);
    size_t bytes;
    if (!qvl_gi_bytes(&d, &bytes)) {
        char s[128];
        return sticky_fail(g, QVL_E_SHAPE, "graph: %s %s: %s has no valid byte size", what,
                           name, qvl_desc_str(&d, s, sizeof s));
    }
    if (name_taken(g, name, -1))
        return sticky_fail(g, QVL_E_INVALID, "graph: duplicate name '%s' (%s)", name, what);
    qvl_tid t = qvl_gi_append(g, kind, &d, name);
    if (t >= 0 && !qvl_gi_names_add(g, t, -1))
        return sticky_fail(g, QVL_E_NOMEM, "graph: out of memory indexing names");
    return t;
}

qvl_tid qvl_g_input(qvl_graph *g, const char *name, qvl_dtype dtype, int ndim,
                    const int64_t *shape) {
    if (!g) return -1;
    return add_leaf(g, QVL_TENSOR_INPUT, name, dtype, ndim, shape);
}

qvl_tid qvl_g_weight(qvl_graph *g, const char *name, qvl_dtype dtype, int ndim,
                     const int64_t *shape) {
    if (!g) return -1;
    return add_leaf(g, QVL_TENSOR_WEIGHT, name, dtype, ndim, shape);
}

qvl_tid qvl_g_node(qvl_graph *g, qvl_op op, const qvl_params *params, const qvl_tid *src,
                   const qvl_tensor_desc *view_desc, const char *name) {
    if (!g || g->err.status != QVL_OK) return -1;
    const char *shown = name ? name : "(unnamed)";
    if ((int)op < 0 || op >= QVL_OP_COUNT)
        return sticky_fail(g, QVL_E_INVALID, "graph: node %s: invalid op %d", shown, (int)op);
    const char *opn = qvl_op_name(op);
    uint32_t n_src = qvl_op_max_inputs(op);
    if (!src) return sticky_fail(g, QVL_E_INVALID, "graph: node %s (%s): no inputs", shown, opn);
    const qvl_tensor_desc *descs[QVL_MAX_SRC] = {0};
    for (uint32_t i = 0; i < n_src; i++) {
        if (src[i] == -1) continue;
        if (!qvl_gi_valid_tid(g, src[i]) || !g->t[src[i]].live)
            return sticky_fail(g, QVL_E_INVALID, "graph: node %s (%s): input %u: unknown tensor id %d",
                               shown, opn, i, (int)src[i]);
        descs[i] = &g->t[src[i]].desc;
    }
    qvl_params p;
    memset(&p, 0, sizeof p);
    if (params) p = *params;
    qvl_tensor_desc out;
    memset(&out, 0, sizeof out);
    if (qvl_op_is_view(op)) {
        if (!view_desc)
            return sticky_fail(g, QVL_E_INVALID, "graph: node %s (%s): no view descriptor",
                               shown, opn);
        out = *view_desc;
    }
    qvl_error e = {0};
    if (qvl_op_infer(op, &p, n_src, descs, &out, &e) != QVL_OK)
        return sticky_fail(g, e.status, "graph: node %s: %s", shown, e.msg);
    qvl_tid t = qvl_gi_append(g, QVL_TENSOR_NODE, &out, name);
    if (t < 0) return -1;
    qvl_gtensor *r = &g->t[t];
    r->op = op;
    r->params = p;
    for (uint32_t i = 0; i < n_src; i++) r->src[i] = src[i];
    return t;
}

void qvl_g_name(qvl_graph *g, qvl_tid t, const char *fmt, ...) {
    if (!g || g->err.status != QVL_OK) return;
    if (!qvl_gi_valid_tid(g, t)) {
        sticky_fail(g, QVL_E_INVALID, "graph: naming unknown tensor id %d", (int)t);
        return;
    }
    if (!fmt) {
        sticky_fail(g, QVL_E_INVALID, "graph: naming tensor #%d without a name", (int)t);
        return;
    }
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof buf) {
        sticky_fail(g, QVL_E_LIMIT, "graph: name of tensor #%d is longer than %zu bytes", (int)t,
                    sizeof buf - 1);
        return;
    }
    qvl_gtensor *r = &g->t[t];
    if (r->kind != QVL_TENSOR_NODE && (!*buf || name_taken(g, buf, t))) {
        sticky_fail(g, QVL_E_INVALID, "graph: cannot rename tensor #%d to '%s': %s", (int)t,
                    buf, *buf ? "duplicate name" : "empty name");
        return;
    }
    char *copy = dup_str(buf);
    if (!copy) {
        sticky_fail(g, QVL_E_NOMEM, "graph: out of memory naming a tensor");
        return;
    }
    bool leaf = r->kind != QVL_TENSOR_NODE;
    if (leaf) qvl_gi_names_remove(g, r->name, t, -1);
    free(r->name);
    r->name = copy;
    if (leaf && !qvl_gi_names_add(g, t, -1))
        sticky_fail(g, QVL_E_NOMEM, "graph: out of memory indexing names");
}

void qvl_g_output(qvl_graph *g, qvl_tid t, const char *name) {
    if (!g || g->err.status != QVL_OK) return;
    if (!qvl_gi_valid_tid(g, t) || !g->t[t].live) {
        sticky_fail(g, QVL_E_INVALID, "graph: output %s: unknown tensor id %d",
                    name ? name : "(unnamed)", (int)t);
        return;
    }
    if (!name || !*name) {
        sticky_fail(g, QVL_E_INVALID, "graph: output of tensor #%d without a name", (int)t);
        return;
    }
    if (name_taken(g, name, t)) {
        sticky_fail(g, QVL_E_INVALID, "graph: duplicate name '%s' (output)", name);
        return;
    }
    for (size_t i = 0; i < g->n_out; i++)
        if (g->out[i].t == t && strcmp(g->out[i].name, name) == 0) return; /* already marked */
    if (g->n_out == g->cap_out) {
        size_t cap = g->cap_out ? g->cap_out * 2 : 8;
        qvl_goutput *o = realloc(g->out, cap * sizeof *o);
        if (!o) {
            sticky_fail(g, QVL_E_NOMEM, "graph: out of memory adding an output");
            return;
        }
        g->out = o;
        g->cap_out = cap;
    }
    char *copy = dup_str(name);
    char *copy2 = g->t[t].name ? NULL : dup_str(name);
    if (!copy || (!g->t[t].name && !copy2)) {
        free(copy);
        free(copy2);
        sticky_fail(g, QVL_E_NOMEM, "graph: out of memory naming an output");
        return;
    }
    if (copy2) g->t[t].name = copy2; /* an unnamed node takes its output name */
    g->out[g->n_out].t = t;
    g->out[g->n_out].name = copy;
    g->n_out++;
    if (!qvl_gi_names_add(g, t, (int32_t)(g->n_out - 1)))
        sticky_fail(g, QVL_E_NOMEM, "graph: out of memory indexing names");
    qvl_gi_invalidate_plan(g);
}

void qvl_g_set_group(qvl_graph *g, int32_t group) {
    if (!g || g->err.status != QVL_OK) return;
    if (group < 0) {
        sticky_fail(g, QVL_E_INVALID, "graph: placement group %d is negative", (int)group);
        return;
    }
    g->cur_group = group;
}
