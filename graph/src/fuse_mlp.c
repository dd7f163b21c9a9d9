/* Rule "mlp+residual": the feed-forward block and its residual add
 *
 *   ADD(res, MATMUL(h, w_down [D,F], b_down?))       (either operand order)
 *   h = MUL(SILU(a), up) | MUL(up, SILU(a))          gated SiLU (Qwen3 text)
 *     | GELU_TANH(a) | GELU_ERF(a)                    plain MLP (the vision blocks)
 *     | anything else                                 a linear layer (attention's o_proj):
 *                                                     act none, a = h
 *
 * becomes MLP_RESIDUAL(res, a, w_down, up?, b_down?) in the place of the ADD. The matmul, the
 * product and the activation must each be read only by the next step and not be outputs; res
 * and the matmul output must have the same shape (no broadcasting in the fused op). With act
 * none, h itself stays as it is (others may read it). */
#include <string.h>

#include "graph_internal.h"

enum { R_ADD, R_RES, R_DOWN, R_H, R_ACT, R_A, R_UP, R_W, R_B };

static bool is_op(const qvl_graph *g, qvl_tid t, qvl_op op) {
    return qvl_gi_is_node(g, t) && g->t[t].op == op;
}

/* Matches h = activation part (h read only by the matmul); fills R_H, R_ACT, R_A, R_UP and the
 * act kind. */
static bool match_activation(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid h,
                             qvl_fuse_match *m) {
    m->role[R_H] = h;
    m->role[R_UP] = -1;
    m->role[R_ACT] = -1;
    if (!qvl_gi_single_use(g, u, h)) return false;
    if (is_op(g, h, QVL_OP_GELU_TANH) || is_op(g, h, QVL_OP_GELU_ERF)) {
        m->params.mlp.act = g->t[h].op == QVL_OP_GELU_TANH ? QVL_ACT_GELU_TANH : QVL_ACT_GELU_ERF;
        m->role[R_A] = g->t[h].src[0];
        return true;
    }
    if (!is_op(g, h, QVL_OP_MUL)) return false;
    for (int side = 0; side < 2; side++) {
        qvl_tid act = g->t[h].src[side], up = g->t[h].src[1 - side];
        if (!is_op(g, act, QVL_OP_SILU) || !qvl_gi_single_use(g, u, act)) continue;
        m->params.mlp.act = QVL_ACT_SILU;
        m->role[R_ACT] = act;
        m->role[R_A] = g->t[act].src[0];
        m->role[R_UP] = up;
        return true;
    }
    return false;
}

static void fused_inputs(const qvl_fuse_match *m, qvl_tid *src) {
    for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
    src[0] = m->role[R_RES];
    src[1] = m->role[R_A];
    src[2] = m->role[R_W];
    src[3] = m->role[R_UP];
    src[4] = m->role[R_B];
}

static bool match(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t, qvl_fuse_match *m) {
    const qvl_gtensor *add = &g->t[t];
    if (add->op != QVL_OP_ADD) return false;
    for (int side = 0; side < 2; side++) {
        qvl_tid res = add->src[1 - side], d = add->src[side];
        if (!is_op(g, d, QVL_OP_MATMUL) || !qvl_gi_single_use(g, u, d)) continue;
        if (!qvl_gi_valid_tid(g, res) ||
            !qvl_desc_same_shape(&g->t[res].desc, &g->t[d].desc))
            continue;
        qvl_tid h = g->t[d].src[0], w = g->t[d].src[1];
        if (!qvl_gi_valid_tid(g, w) || g->t[w].desc.ndim != 2) continue;
        memset(&m->params, 0, sizeof m->params);
        if (!match_activation(g, u, h, m)) { /* a plain linear layer: h is the input */
            m->params.mlp.act = QVL_ACT_NONE;
            m->role[R_H] = -1;
            m->role[R_ACT] = -1;
            m->role[R_UP] = -1;
            m->role[R_A] = h;
        }
        m->role[R_ADD] = t;
        m->role[R_RES] = res;
        m->role[R_DOWN] = d;
        m->role[R_W] = w;
        m->role[R_B] = g->t[d].src[2];
        qvl_tid src[QVL_MAX_SRC];
        fused_inputs(m, src);
        if (qvl_gi_infers_as(g, QVL_OP_MLP_RESIDUAL, &m->params, src, t)) return true;
    }
    return false;
}

static qvl_status rewrite(qvl_graph *g, const qvl_gi_uses *u, const qvl_fuse_match *m,
                          qvl_error *err) {
    (void)u;
    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(m, src);
    static const int dead[] = {R_DOWN, R_H, R_ACT}; /* R_H, R_ACT are -1 with act none */
    return qvl_gi_fuse_into(g, m, R_ADD, QVL_OP_MLP_RESIDUAL, src, dead, 3, "mlp+residual", err);
}

const qvl_fuse_rule qvl_fuse_mlp = {"mlp+residual", match, rewrite};
