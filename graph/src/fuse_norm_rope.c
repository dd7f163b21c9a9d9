/* Rule "norm+rope": ROPE whose input is an RMS_NORM read by nothing else,
 *
 *   ROPE(RMS_NORM(x, gamma), pos)        (Qwen3's q_norm / k_norm before the rotation)
 *
 * becomes NORM_ROPE(x, pos, gamma) in the place of the ROPE: one pass over each head instead
 * of a normalised copy written and read back. */
#include <string.h>

#include "graph_internal.h"

enum { R_ROPE, R_NORM, R_X, R_POS, R_GAMMA };

static void fused_inputs(const qvl_fuse_match *m, qvl_tid *src) {
    for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
    src[0] = m->role[R_X];
    src[1] = m->role[R_POS];
    src[2] = m->role[R_GAMMA];
}

static bool match(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t, qvl_fuse_match *m) {
    const qvl_gtensor *rope = &g->t[t];
    if (rope->op != QVL_OP_ROPE) return false;
    qvl_tid nt = rope->src[0];
    if (!qvl_gi_is_node(g, nt) || g->t[nt].op != QVL_OP_RMS_NORM ||
        !qvl_gi_single_use(g, u, nt))
        return false;
    const qvl_gtensor *norm = &g->t[nt];
    memset(&m->params, 0, sizeof m->params);
    qvl_norm_rope_params *p = &m->params.norm_rope;
    p->mode = rope->params.rope.mode;
    p->theta = rope->params.rope.theta;
    for (int i = 0; i < 3; i++) p->sections[i] = rope->params.rope.sections[i];
    p->eps = norm->params.norm.eps;
    m->role[R_ROPE] = t;
    m->role[R_NORM] = nt;
    m->role[R_X] = norm->src[0];
    m->role[R_POS] = rope->src[1];
    m->role[R_GAMMA] = norm->src[1];
    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(m, src);
    return qvl_gi_infers_as(g, QVL_OP_NORM_ROPE, &m->params, src, t);
}

static qvl_status rewrite(qvl_graph *g, const qvl_gi_uses *u, const qvl_fuse_match *m,
                          qvl_error *err) {
    (void)u;
    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(m, src);
    static const int dead[] = {R_NORM};
    return qvl_gi_fuse_into(g, m, R_ROPE, QVL_OP_NORM_ROPE, src, dead, 1, "norm+rope", err);
}

const qvl_fuse_rule qvl_fuse_norm_rope = {"norm+rope", match, rewrite};
