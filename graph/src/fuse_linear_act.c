/* Rule "linear+act": the activation of a plain MLP moves from MLP_RESIDUAL into the epilogue of
 * the projection that feeds it
 *
 *   MLP_RESIDUAL(res, a, w_down, -, b_down?) {act gelu_tanh | gelu_erf}   (no up: ungated)
 *   a = NORM_LINEAR(x, gamma, beta?, w1, b1?) {act none, one projection}
 *
 * becomes NORM_LINEAR {act = that gelu} and MLP_RESIDUAL {act none}, both in place (the vision
 * blocks' fc1 and fc2 after the norm+linear and mlp+residual rules). The activation is then
 * applied as the fc1 output is written, instead of in a pass of its own over that [S, F]
 * tensor before fc2. a must be read by the MLP alone, once, and not be a graph output: any
 * other reader would see the activated values. Only one projection: with several, the output
 * is sliced by views for other readers. Both rewritten nodes must be taken by the backend. */
#include <string.h>

#include "graph_internal.h"

enum { R_NL, R_MLP };

/* MLP_RESIDUAL's parameters once its activation has moved out. */
static qvl_params mlp_without_act(void) {
    qvl_params p;
    memset(&p, 0, sizeof p);
    p.mlp.act = QVL_ACT_NONE;
    return p;
}

static bool match(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t, qvl_fuse_match *m) {
    const qvl_gtensor *nl = &g->t[t];
    if (nl->op != QVL_OP_NORM_LINEAR || nl->params.norm_linear.act != QVL_ACT_NONE ||
        nl->params.norm_linear.n_proj != 1 || !qvl_gi_single_use(g, u, t))
        return false;
    qvl_tid mt = qvl_gi_user(u, t, 0);
    const qvl_gtensor *mlp = &g->t[mt];
    if (mlp->op != QVL_OP_MLP_RESIDUAL || mlp->src[1] != t || mlp->src[3] != -1) return false;
    int32_t act = mlp->params.mlp.act;
    if (act != QVL_ACT_GELU_TANH && act != QVL_ACT_GELU_ERF) return false;

    memset(&m->params, 0, sizeof m->params);
    m->params.norm_linear = nl->params.norm_linear;
    m->params.norm_linear.act = act;
    m->role[R_NL] = t;
    m->role[R_MLP] = mt;
    qvl_params mp = mlp_without_act();
    return qvl_gi_infers_as(g, QVL_OP_NORM_LINEAR, &m->params, nl->src, t) &&
           qvl_gi_infers_as(g, QVL_OP_MLP_RESIDUAL, &mp, mlp->src, mt);
}

static qvl_status rewrite(qvl_graph *g, const qvl_gi_uses *u, const qvl_fuse_match *m,
                          qvl_error *err) {
    (void)u;
    const qvl_tid nl = m->role[R_NL], mlp = m->role[R_MLP];
    qvl_params mp = mlp_without_act();
    /* both inferred before either changes: half a rewrite would apply the activation twice */
    qvl_tid nl_src[QVL_MAX_SRC], mlp_src[QVL_MAX_SRC];
    memcpy(nl_src, g->t[nl].src, sizeof nl_src);
    memcpy(mlp_src, g->t[mlp].src, sizeof mlp_src);
    qvl_tensor_desc nl_out, mlp_out;
    if (!qvl_gi_infer(g, QVL_OP_NORM_LINEAR, &m->params, nl_src, &nl_out) ||
        !qvl_gi_infer(g, QVL_OP_MLP_RESIDUAL, &mp, mlp_src, &mlp_out))
        return qvl_fail(err, QVL_E_INVALID, "fusion linear+act: the match no longer infers");
    qvl_gi_replace(g, nl, QVL_OP_NORM_LINEAR, &m->params, nl_src, QVL_MAX_SRC, &nl_out);
    qvl_gi_replace(g, mlp, QVL_OP_MLP_RESIDUAL, &mp, mlp_src, QVL_MAX_SRC, &mlp_out);
    return QVL_OK;
}

const qvl_fuse_rule qvl_fuse_linear_act = {"linear+act", match, rewrite};
