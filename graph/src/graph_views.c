/* View conveniences: each computes the output descriptor (shape, element strides) and the
 * element offset of a VIEW node over its source, which qvl_op_infer then checks. */
#include <stdarg.h>
#include <string.h>

#include "graph_internal.h"

QVL_PRINTF(2, 3)
static qvl_tid view_fail(qvl_graph *g, const char *fmt, ...) {
    if (g->err.status == QVL_OK) {
        va_list ap;
        va_start(ap, fmt);
        qvl_failv(&g->err, QVL_E_SHAPE, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static qvl_tid make_view(qvl_graph *g, qvl_tid x, const qvl_tensor_desc *d, int64_t offset) {
    qvl_tid src[QVL_MAX_SRC];
    for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
    src[0] = x;
    qvl_params p;
    memset(&p, 0, sizeof p);
    p.view.offset = offset;
    return qvl_g_node(g, QVL_OP_VIEW, &p, src, d, NULL);
}

/* The source's descriptor, or NULL (with a sticky error) when x is not a usable tensor. */
static const qvl_tensor_desc *source(qvl_graph *g, qvl_tid x, const char *what) {
    if (!g || g->err.status != QVL_OK) return NULL;
    if (!qvl_gi_valid_tid(g, x) || !g->t[x].live) {
        view_fail(g, "graph: %s of unknown tensor id %d", what, (int)x);
        return NULL;
    }
    return &g->t[x].desc;
}

qvl_tid qvl_g_reshape(qvl_graph *g, qvl_tid x, int ndim, const int64_t *shape) {
    const qvl_tensor_desc *xs = source(g, x, "reshape");
    if (!xs) return -1;
    char buf[128], lbl[128];
    if (!qvl_desc_is_contiguous(xs))
        return view_fail(g, "graph: reshape of %s: %s is not contiguous (add a cont)",
                         qvl_gi_label(g, x, lbl, sizeof lbl), qvl_desc_str(xs, buf, sizeof buf));
    qvl_tensor_desc d;
    if (!shape || !qvl_desc_init(&d, xs->dtype, ndim, shape))
        return view_fail(g, "graph: reshape of %s: invalid shape (%d dims)",
                         qvl_gi_label(g, x, lbl, sizeof lbl), ndim);
    if (qvl_desc_nelem(&d) != qvl_desc_nelem(xs)) {
        char buf2[128];
        return view_fail(g, "graph: reshape of %s: %s to %s changes the element count",
                         qvl_gi_label(g, x, lbl, sizeof lbl), qvl_desc_str(xs, buf, sizeof buf),
                         qvl_desc_str(&d, buf2, sizeof buf2));
    }
    return make_view(g, x, &d, 0);
}

qvl_tid qvl_g_permute(qvl_graph *g, qvl_tid x, const int *perm) {
    const qvl_tensor_desc *xs = source(g, x, "permute");
    if (!xs) return -1;
    char lbl[128];
    if (!perm) return view_fail(g, "graph: permute of %s: no permutation",
                                qvl_gi_label(g, x, lbl, sizeof lbl));
    qvl_tensor_desc d = *xs;
    bool seen[QVL_MAX_DIMS] = {false};
    for (int i = 0; i < xs->ndim; i++) {
        int p = perm[i];
        if (p < 0 || p >= xs->ndim || seen[p])
            return view_fail(g, "graph: permute of %s: entry %d (%d) does not make a "
                             "permutation of %d dims",
                             qvl_gi_label(g, x, lbl, sizeof lbl), i, p, xs->ndim);
        seen[p] = true;
        d.shape[i] = xs->shape[p];
        d.stride[i] = xs->stride[p];
    }
    return make_view(g, x, &d, 0);
}

qvl_tid qvl_g_slice(qvl_graph *g, qvl_tid x, int dim, int64_t start, int64_t len) {
    const qvl_tensor_desc *xs = source(g, x, "slice");
    if (!xs) return -1;
    char lbl[128], buf[128];
    if (dim < 0 || dim >= xs->ndim)
        return view_fail(g, "graph: slice of %s: dim %d out of range for %s",
                         qvl_gi_label(g, x, lbl, sizeof lbl), dim,
                         qvl_desc_str(xs, buf, sizeof buf));
    if (start < 0 || len < 1 || start > xs->shape[dim] - len)
        return view_fail(g, "graph: slice of %s: [%lld, %lld+%lld) outside dim %d of %s",
                         qvl_gi_label(g, x, lbl, sizeof lbl), (long long)start,
                         (long long)start, (long long)len, dim,
                         qvl_desc_str(xs, buf, sizeof buf));
    qvl_tensor_desc d = *xs;
    d.shape[dim] = len;
    return make_view(g, x, &d, start * xs->stride[dim]);
}
