/* Rule "attention+softmax": the primitive attention chain
 *
 *   qp = permute(q [N,Hq,D] -> [Hq,N,D]),  kp = permute(k [L,Hkv,D] -> [Hkv,L,D])
 *   s  = matmul(qp, kp)                    (3-D weight: K/V heads shared by Hq/Hkv queries)
 *   s  = scale(s)?  s = mask_causal(s) | mask_causal_at(s, at) | mask_segments(s, seg)?
 *   p  = softmax(s)
 *   vt = permute(v [L,Hkv,D] -> [Hkv,D,L]),  o = matmul(p, vt)   [Hq,N,D]
 *   ob = permute(o -> [N,Hq,D]),  cont(ob)?
 *
 * becomes ATTENTION(q, k, v, seg or at?) in the place of the last node (the cont, or the permute
 * back). Every intermediate must be read only by the next step and must not be an output; the
 * permutes are checked on shapes and strides against their sources. Without the cont, the
 * permute back is replaced only when no view reads it (a view's strides would refer to the
 * permuted layout, which the contiguous ATTENTION output does not have). */
#include <string.h>

#include "graph_internal.h"

enum {
    R_SOFTMAX, R_MASK, R_SCALE, R_QK, R_QP, R_KP, R_VT, R_PV, R_OB, R_CONT,
    R_Q, R_K, R_V, R_SEG, R_FINAL
};

static const int heads_first[3] = {1, 0, 2};  /* [N,H,D] <-> [H,N,D] */
static const int transposed_v[3] = {1, 2, 0}; /* [L,H,D] -> [H,D,L] */

static bool is_op(const qvl_graph *g, qvl_tid t, qvl_op op) {
    return qvl_gi_is_node(g, t) && g->t[t].op == op;
}

static void fused_inputs(const qvl_fuse_match *m, qvl_tid *src) {
    for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
    src[0] = m->role[R_Q];
    src[1] = m->role[R_K];
    src[2] = m->role[R_V];
    src[3] = m->role[R_SEG];
}

static bool match(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t, qvl_fuse_match *m) {
    if (g->t[t].op != QVL_OP_SOFTMAX || !qvl_gi_single_use(g, u, t)) return false;
    for (int i = 0; i < QVL_FUSE_MAX_ROLES; i++) m->role[i] = -1;
    memset(&m->params, 0, sizeof m->params);
    m->params.attention.scale = 1.0f;
    m->params.attention.mask = QVL_MASK_NONE;
    m->role[R_SOFTMAX] = t;

    /* Backwards from the softmax: mask?, scale?, then Q.K^T. */
    qvl_tid s = g->t[t].src[0];
    if (is_op(g, s, QVL_OP_MASK_CAUSAL) || is_op(g, s, QVL_OP_MASK_SEGMENTS) ||
        is_op(g, s, QVL_OP_MASK_CAUSAL_AT)) {
        if (!qvl_gi_single_use(g, u, s)) return false;
        m->role[R_MASK] = s;
        if (g->t[s].op == QVL_OP_MASK_CAUSAL) {
            m->params.attention.mask = QVL_MASK_CAUSAL;
            m->params.attention.n_past = g->t[s].params.mask.n_past;
        } else if (g->t[s].op == QVL_OP_MASK_CAUSAL_AT) {
            m->params.attention.mask = QVL_MASK_CAUSAL_AT;
            m->role[R_SEG] = g->t[s].src[1]; /* the "at" row count takes the seg slot */
        } else {
            m->params.attention.mask = QVL_MASK_SEGMENTS;
            m->role[R_SEG] = g->t[s].src[1];
        }
        s = g->t[s].src[0];
    }
    if (is_op(g, s, QVL_OP_SCALE)) {
        if (!qvl_gi_single_use(g, u, s)) return false;
        m->role[R_SCALE] = s;
        m->params.attention.scale = g->t[s].params.scale.s;
        s = g->t[s].src[0];
    }
    if (!is_op(g, s, QVL_OP_MATMUL) || !qvl_gi_single_use(g, u, s) || g->t[s].src[2] != -1)
        return false;
    m->role[R_QK] = s;
    qvl_tid qp = g->t[s].src[0], kp = g->t[s].src[1];
    if (qp == kp || !qvl_gi_single_use(g, u, qp) || !qvl_gi_single_use(g, u, kp) ||
        !qvl_gi_is_permute(g, qp, heads_first) || !qvl_gi_is_permute(g, kp, heads_first))
        return false;
    m->role[R_QP] = qp;
    m->role[R_KP] = kp;
    m->role[R_Q] = g->t[qp].src[0];
    m->role[R_K] = g->t[kp].src[0];

    /* Forwards from the softmax: P.V, the permute back, cont?. */
    qvl_tid pv = qvl_gi_user(u, t, 0);
    if (!is_op(g, pv, QVL_OP_MATMUL) || g->t[pv].src[0] != t || g->t[pv].src[2] != -1 ||
        !qvl_gi_single_use(g, u, pv))
        return false;
    qvl_tid vt = g->t[pv].src[1];
    if (!qvl_gi_single_use(g, u, vt) || !qvl_gi_is_permute(g, vt, transposed_v)) return false;
    m->role[R_PV] = pv;
    m->role[R_VT] = vt;
    m->role[R_V] = g->t[vt].src[0];
    qvl_tid ob = qvl_gi_user(u, pv, 0);
    if (!qvl_gi_is_permute(g, ob, heads_first) || g->t[ob].src[0] != pv) return false;
    m->role[R_OB] = ob;
    if (u->is_output[ob]) return false;
    qvl_tid final = ob;
    if (qvl_gi_n_uses(u, ob) == 1 && is_op(g, qvl_gi_user(u, ob, 0), QVL_OP_CONT)) {
        final = qvl_gi_user(u, ob, 0);
        m->role[R_CONT] = final;
    } else {
        for (uint32_t i = 0; i < qvl_gi_n_uses(u, ob); i++) {
            const qvl_gtensor *r = &g->t[qvl_gi_user(u, ob, i)];
            if (r->op == QVL_OP_VIEW || (qvl_gi_is_store_op(r->op) && r->src[0] == ob))
                return false;
        }
    }
    m->role[R_FINAL] = final;

    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(m, src);
    return qvl_gi_infers_as(g, QVL_OP_ATTENTION, &m->params, src, final);
}

static qvl_status rewrite(qvl_graph *g, const qvl_gi_uses *u, const qvl_fuse_match *m,
                          qvl_error *err) {
    (void)u;
    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(m, src);
    static const int dead[] = {R_SOFTMAX, R_MASK, R_SCALE, R_QK, R_QP, R_KP, R_VT, R_PV, R_OB};
    return qvl_gi_fuse_into(g, m, R_FINAL, QVL_OP_ATTENTION, src, dead,
                            sizeof dead / sizeof dead[0], "attention+softmax", err);
}

const qvl_fuse_rule qvl_fuse_attention = {"attention+softmax", match, rewrite};
