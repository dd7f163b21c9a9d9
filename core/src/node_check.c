/* The generic part of checking a node before a kernel runs it, shared by every backend. */
#include <stdio.h>

#include "qvl/backend.h"

static qvl_status node_fail(const qvl_node *n, qvl_error *err, qvl_status s, const char *what,
                            const qvl_tensor_desc *got, const qvl_tensor_desc *want) {
    char g[96], w[96];
    return qvl_fail(err, s, "%s%s%s%s: %s %s, expected %s", qvl_op_name(n->op),
                    n->name ? " '" : "", n->name ? n->name : "", n->name ? "'" : "", what,
                    qvl_desc_str(got, g, sizeof g), qvl_desc_str(want, w, sizeof w));
}

qvl_status qvl_node_check(const qvl_node *n, qvl_error *err) {
    if (!n || (unsigned)n->op >= QVL_OP_COUNT)
        return qvl_fail(err, QVL_E_INVALID, "node with an unknown op");
    if (!n->dst) return qvl_fail(err, QVL_E_INVALID, "%s: node has no output", qvl_op_name(n->op));
    if (n->n_src > QVL_MAX_SRC)
        return qvl_fail(err, QVL_E_INVALID, "%s: %u inputs (at most %d)", qvl_op_name(n->op),
                        n->n_src, QVL_MAX_SRC);
    const qvl_tensor_desc *src[QVL_MAX_SRC] = {0};
    for (uint32_t i = 0; i < n->n_src; i++) src[i] = n->src[i] ? &n->src[i]->desc : NULL;
    qvl_tensor_desc want = n->dst->desc; /* VIEW reads its output descriptor from here */
    qvl_status s = qvl_op_infer(n->op, &n->params, n->n_src, src, &want, err);
    if (s != QVL_OK) return s;
    const qvl_tensor_desc *got = &n->dst->desc;
    bool same = got->dtype == want.dtype && got->ndim == want.ndim;
    for (int i = 0; same && i < want.ndim; i++)
        same = got->shape[i] == want.shape[i] &&
               (got->shape[i] == 1 || got->stride[i] == want.stride[i]);
    if (!same) return node_fail(n, err, QVL_E_SHAPE, "output is", got, &want);
    return QVL_OK;
}
