/* The validator: every live node is re-inferred from its inputs and must match what it
 * records; references must be in range, live and in the op's slots; there must be no cycle. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

static bool same_desc(const qvl_tensor_desc *a, const qvl_tensor_desc *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i] || (a->shape[i] > 1 && a->stride[i] != b->stride[i]))
            return false;
    return true;
}

static qvl_status check_node(const qvl_graph *g, qvl_tid t, qvl_error *err) {
    const qvl_gtensor *r = &g->t[t];
    char lbl[128], lbl2[128];
    qvl_gi_label(g, t, lbl, sizeof lbl);
    if ((int)r->op < 0 || r->op >= QVL_OP_COUNT)
        return qvl_fail(err, QVL_E_INVALID, "graph: node %s has an invalid op %d", lbl,
                        (int)r->op);
    const char *opn = qvl_op_name(r->op);
    uint32_t n_src = qvl_op_max_inputs(r->op);
    const qvl_tensor_desc *descs[QVL_MAX_SRC] = {0};
    for (uint32_t i = 0; i < QVL_MAX_SRC; i++) {
        qvl_tid s = r->src[i];
        if (s == -1) continue;
        if (i >= n_src)
            return qvl_fail(err, QVL_E_SHAPE, "graph: node %s (%s) has input %u but the op takes %u",
                            lbl, opn, i, n_src);
        if (!qvl_gi_valid_tid(g, s))
            return qvl_fail(err, QVL_E_INVALID, "graph: node %s (%s): input %u is an unknown tensor id %d",
                            lbl, opn, i, (int)s);
        if (!g->t[s].live)
            return qvl_fail(err, QVL_E_INVALID, "graph: node %s (%s): input %u refers to removed node %s",
                            lbl, opn, i, qvl_gi_label(g, s, lbl2, sizeof lbl2));
        if (s == t)
            return qvl_fail(err, QVL_E_INVALID, "graph: node %s (%s) reads its own output", lbl,
                            opn);
        descs[i] = &g->t[s].desc;
    }
    qvl_tensor_desc out;
    memset(&out, 0, sizeof out);
    if (qvl_op_is_view(r->op)) out = r->desc;
    qvl_error e = {0};
    if (qvl_op_infer(r->op, &r->params, n_src, descs, &out, &e) != QVL_OK)
        return qvl_fail(err, e.status, "graph: node %s: %s", lbl, e.msg);
    if (!same_desc(&out, &r->desc)) {
        char want[128], have[128];
        return qvl_fail(err, QVL_E_SHAPE, "graph: node %s (%s) records %s but its inputs give %s",
                        lbl, opn, qvl_desc_str(&r->desc, have, sizeof have),
                        qvl_desc_str(&out, want, sizeof want));
    }
    return QVL_OK;
}

qvl_status qvl_graph_validate(const qvl_graph *g, qvl_error *err) {
    if (!g) return qvl_fail(err, QVL_E_INVALID, "graph: no graph");
    if (g->err.status != QVL_OK) {
        if (err) *err = g->err;
        return g->err.status;
    }
    char lbl[128];
    for (size_t i = 0; i < g->n; i++) {
        const qvl_gtensor *r = &g->t[i];
        if (!r->live) continue;
        if (r->kind == QVL_TENSOR_NODE) {
            qvl_status s = check_node(g, (qvl_tid)i, err);
            if (s != QVL_OK) return s;
        } else if (r->kind == QVL_TENSOR_INPUT || r->kind == QVL_TENSOR_WEIGHT) {
            size_t bytes;
            if (!qvl_desc_is_contiguous(&r->desc) || !qvl_gi_bytes(&r->desc, &bytes))
                return qvl_fail(err, QVL_E_SHAPE, "graph: %s %s must be contiguous",
                                r->kind == QVL_TENSOR_INPUT ? "input" : "weight",
                                qvl_gi_label(g, (qvl_tid)i, lbl, sizeof lbl));
        } else {
            return qvl_fail(err, QVL_E_INVALID, "graph: tensor #%zu has an invalid kind %d", i,
                            (int)r->kind);
        }
    }
    for (size_t i = 0; i < g->n_out; i++) {
        qvl_tid t = g->out[i].t;
        if (!qvl_gi_valid_tid(g, t) || !g->t[t].live)
            return qvl_fail(err, QVL_E_INVALID, "graph: output %s refers to %s tensor %d",
                            g->out[i].name, qvl_gi_valid_tid(g, t) ? "removed" : "unknown",
                            (int)t);
    }
    qvl_tid *order;
    size_t n_order;
    qvl_status s = qvl_gi_topo_order(g, &order, &n_order, err);
    free(order);
    return s;
}
