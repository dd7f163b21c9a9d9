/* Arithmetic of a node, for the per-op rates of a profile (graph.h: qvl_node_flops). */
#include "qvl/graph.h"

static double nelem(const qvl_tensor *t) { return t ? (double)qvl_desc_nelem(&t->desc) : 0.0; }

/* Output columns of a matmul-like weight: dim -2 of [..., N, K]. */
static double out_cols(const qvl_tensor *w) {
    return w && w->desc.ndim >= 2 ? (double)w->desc.shape[w->desc.ndim - 2] : 0.0;
}

double qvl_node_flops(const qvl_node *nd) {
    if (!nd) return 0.0;
    switch (nd->op) {
    case QVL_OP_MATMUL: /* a [..., K] . w^T: K multiply-adds per output */
        return 2.0 * nelem(nd->src[0]) * out_cols(nd->src[1]);
    case QVL_OP_NORM_LINEAR: /* the normed x against w1, w2, w3 (slots 3, 5, 7) */
        return 2.0 * nelem(nd->src[0]) *
               (out_cols(nd->src[3]) + out_cols(nd->src[5]) + out_cols(nd->src[7]));
    case QVL_OP_MLP_RESIDUAL: /* act(a) [..., F] . w_down^T, w_down [D, F] */
        return 2.0 * nelem(nd->src[1]) * out_cols(nd->src[2]);
    case QVL_OP_ATTENTION: {
        /* q . k^T and p . v: 2 D multiply-adds per (query, head, visible key). Visible keys per
         * query: all L without a mask and with segments (exact for one segment, an upper bound
         * for several, whose boundaries are data); n_past + (N + 1) / 2 on average when causal.
         * CAUSAL_AT reads n_past from memory at run time: not counted. */
        const qvl_tensor *q = nd->src[0], *k = nd->src[1];
        if (!q || !k || q->desc.ndim != 3 || k->desc.ndim != 3) return 0.0;
        const double N = (double)q->desc.shape[0], L = (double)k->desc.shape[0];
        double keys;
        switch (nd->params.attention.mask) {
        case QVL_MASK_NONE:
        case QVL_MASK_SEGMENTS: keys = L; break;
        case QVL_MASK_CAUSAL: keys = (double)nd->params.attention.n_past + (N + 1.0) / 2.0; break;
        default: return 0.0;
        }
        return 4.0 * nelem(q) * keys;
    }
    default: return 0.0; /* element-wise and data movement: their time is not arithmetic */
    }
}
