/* The fusion pass: one table of rules (matcher + rewriter each), applied until none fires.
 * Every rule consumes its anchor op (a norm, a softmax, an add; for linear+act a NORM_LINEAR
 * without an activation, which it gives one) and creates none, so the loop ends. Rewrites
 * keep node indices of the tensors that survive, so the builder's tids stay valid for the
 * caller; new nodes are appended, and the planner orders nodes topologically. */
#include <string.h>

#include "graph_internal.h"

/* linear+act rewrites what norm+linear and mlp+residual wrote, so it comes after them (a
 * pass runs the rules in this order over the whole graph). */
static const qvl_fuse_rule *const rules[] = {
    &qvl_fuse_norm_linear,
    &qvl_fuse_attention,
    &qvl_fuse_mlp,
    &qvl_fuse_norm_rope,
    &qvl_fuse_linear_act,
};
#define N_RULES (sizeof rules / sizeof rules[0])
_Static_assert(N_RULES <= QVL_FUSION_MAX_RULES, "too many fusion rules for the report");

bool qvl_gi_is_permute(const qvl_graph *g, qvl_tid v, const int perm[3]) {
    if (!qvl_gi_is_node(g, v) || g->t[v].op != QVL_OP_VIEW || g->t[v].params.view.offset != 0)
        return false;
    qvl_tid x = g->t[v].src[0];
    if (!qvl_gi_valid_tid(g, x) || !g->t[x].live) return false;
    const qvl_tensor_desc *vd = &g->t[v].desc, *xd = &g->t[x].desc;
    if (vd->ndim != 3 || xd->ndim != 3 || vd->dtype != xd->dtype) return false;
    for (int i = 0; i < 3; i++)
        if (vd->shape[i] != xd->shape[perm[i]] || vd->stride[i] != xd->stride[perm[i]])
            return false;
    return true;
}

bool qvl_gi_infer(const qvl_graph *g, qvl_op op, const qvl_params *params, const qvl_tid *src,
                  qvl_tensor_desc *out) {
    uint32_t n_src = qvl_op_max_inputs(op);
    const qvl_tensor_desc *descs[QVL_MAX_SRC] = {0};
    for (uint32_t i = 0; i < n_src; i++) {
        if (src[i] == -1) continue;
        if (!qvl_gi_valid_tid(g, src[i]) || !g->t[src[i]].live) return false;
        descs[i] = &g->t[src[i]].desc;
    }
    qvl_error e = {0};
    if (!qvl_op_is_view(op)) memset(out, 0, sizeof *out);
    return qvl_op_infer(op, params, n_src, descs, out, &e) == QVL_OK;
}

void qvl_gi_replace(qvl_graph *g, qvl_tid t, qvl_op op, const qvl_params *params,
                    const qvl_tid *src, uint32_t n_src, const qvl_tensor_desc *desc) {
    qvl_gi_note_change(g, t);
    qvl_gtensor *r = &g->t[t];
    r->op = op;
    r->params = *params;
    for (uint32_t i = 0; i < QVL_MAX_SRC; i++) r->src[i] = i < n_src ? src[i] : -1;
    r->desc = *desc;
    qvl_gi_invalidate_plan(g);
}

bool qvl_gi_backend_takes(const qvl_graph *g, qvl_op op, const qvl_params *params,
                          const qvl_tid *src, const qvl_tensor_desc *out) {
    if (!g->fuse_iface) return true;
    /* The node as the backend will see it, without memory (supports() is asked before any
     * buffer exists). */
    qvl_tensor in[QVL_MAX_SRC], dst = {*out, NULL};
    qvl_node node;
    memset(&node, 0, sizeof node);
    node.op = op;
    node.params = *params;
    node.n_src = qvl_op_max_inputs(op);
    for (uint32_t i = 0; i < node.n_src; i++) {
        if (src[i] < 0) continue;
        in[i] = (qvl_tensor){g->t[src[i]].desc, NULL};
        node.src[i] = &in[i];
    }
    node.dst = &dst;
    if (qvl_backend_supports(g->fuse_iface, g->fuse_be, &node)) return true;
    ((qvl_graph *)g)->fuse_declined++; /* a count for the report, not graph state */
    return false;
}

bool qvl_gi_infers_as(const qvl_graph *g, qvl_op op, const qvl_params *params,
                      const qvl_tid *src, qvl_tid anchor) {
    qvl_tensor_desc out;
    return qvl_gi_infer(g, op, params, src, &out) &&
           qvl_desc_same_shape(&out, &g->t[anchor].desc) &&
           qvl_gi_backend_takes(g, op, params, src, &out);
}

qvl_status qvl_gi_fuse_into(qvl_graph *g, const qvl_fuse_match *m, int anchor_role, qvl_op op,
                            const qvl_tid *src, const int *dead_roles, size_t n_dead,
                            const char *rule, qvl_error *err) {
    qvl_tensor_desc out;
    if (!qvl_gi_infer(g, op, &m->params, src, &out))
        return qvl_fail(err, QVL_E_INVALID, "fusion %s: the match no longer infers", rule);
    qvl_tid anchor = m->role[anchor_role];
    for (size_t i = 0; i < n_dead; i++) {
        qvl_tid d = m->role[dead_roles[i]];
        if (d >= 0 && d != anchor) qvl_gi_kill(g, d);
    }
    qvl_gi_replace(g, anchor, op, &m->params, src, QVL_MAX_SRC, &out);
    return QVL_OK;
}

qvl_status qvl_graph_fuse(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be,
                          qvl_fusion_report *report, qvl_error *err) {
    if (!g) return qvl_fail(err, QVL_E_INVALID, "graph: no graph");
    if (g->err.status != QVL_OK) return qvl_graph_error(g, err);
    qvl_fusion_report rep;
    memset(&rep, 0, sizeof rep);
    rep.n_rules = N_RULES;
    for (size_t i = 0; i < N_RULES; i++) rep.rule[i] = rules[i]->name;
    rep.nodes_before = qvl_graph_n_nodes(g);

    qvl_status s = qvl_graph_validate(g, err);
    if (s != QVL_OK) return qvl_error_prefix(err, "before fusion"), s;

    qvl_gi_uses u;
    g->fuse_iface = iface;
    g->fuse_be = be;
    g->tracking = true;
    g->track_lost = false;
    g->n_changes = 0;
    s = qvl_gi_uses_build(g, &u, err);
    for (bool fired = true; s == QVL_OK && fired;) {
        fired = false;
        /* Counted afresh each pass: the last pass fires nothing, so its counts are the
         * matches left unfused. */
        memset(rep.declined, 0, sizeof rep.declined);
        for (size_t r = 0; r < N_RULES && s == QVL_OK; r++) {
            /* g->n may grow while rewriting; new nodes are fused ops no rule anchors on. */
            for (size_t t = 0; t < g->n && s == QVL_OK; t++) {
                qvl_fuse_match m;
                memset(&m, 0, sizeof m);
                g->fuse_declined = 0;
                bool matched = qvl_gi_is_node(g, (qvl_tid)t) &&
                               rules[r]->match(g, &u, (qvl_tid)t, &m);
                if (g->fuse_declined) rep.declined[r]++;
                if (!matched) continue;
                s = rules[r]->rewrite(g, &u, &m, err);
                if (s != QVL_OK) break;
                rep.fired[r]++;
                fired = true;
                s = qvl_gi_uses_update(g, &u, err);
#ifndef NDEBUG
                if (s == QVL_OK && !qvl_gi_uses_current(g, &u))
                    s = qvl_fail(err, QVL_E_INVALID, "fusion %s: a rewrite bypassed the change "
                                 "record (uses index out of date)", rules[r]->name);
#endif
            }
        }
    }
    qvl_gi_uses_free(&u);
    g->fuse_iface = NULL;
    g->fuse_be = NULL;
    g->tracking = false;
    g->n_changes = 0;
    if (s != QVL_OK) return s;
    rep.nodes_after = qvl_graph_n_nodes(g);
    if (report) *report = rep;
    s = qvl_graph_validate(g, err);
    if (s != QVL_OK) qvl_error_prefix(err, "after fusion");
    return s;
}
