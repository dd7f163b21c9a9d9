/* The scheduler's placement: which target runs each computing node (qvl/split.h, step 1).
 *
 * Nodes are placed in execution order, so a cache write is placed before any node that reads
 * it. A node is asked about as the executor will hand it over, without memory (the contract,
 * the op table and dtypes, accepts()); fusion later only rewrites nodes within one part, and
 * asks that part's backend. */
#include "qvl/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "qvl/backend_helpers.h"

static bool is_computing(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_is_node(g, t) && !qvl_op_is_view(g->t[t].op);
}

/* Does target tg take node t? why receives the backend's reason when not. */
static bool takes(const qvl_graph *g, qvl_tid t, const qvl_split_target *tg, qvl_error *why) {
    qvl_tensor in[QVL_MAX_SRC], dst;
    qvl_node node;
    qvl_gi_probe_node(g, t, in, &dst, &node);
    qvl_error_clear(why);
    return qvl_backend_check(tg->iface, tg->be, &node, why) == QVL_OK;
}

/* The executor's refusal, word for word, so a run without fallback fails as it always did. */
static qvl_status refuse(const qvl_graph *g, qvl_tid t, const qvl_split_target *tg,
                         const qvl_error *why, const char *extra, qvl_error *err) {
    char lbl[128], shapes[768];
    qvl_gi_shapes_str(g, t, shapes, sizeof shapes);
    return qvl_fail(err, QVL_E_UNSUPPORTED, "backend %s does not support %s (node %s: %s): %s%s",
                    tg->iface->name ? tg->iface->name : "?", qvl_op_name(g->t[t].op),
                    qvl_gi_label(g, t, lbl, sizeof lbl), shapes, why->msg, extra);
}

static qvl_status group_target(const qvl_graph *g, qvl_tid t, size_t n_targets,
                               const qvl_split_options *o, int32_t *out, qvl_error *err) {
    *out = 0;
    if (!o || !o->target_of_group) return QVL_OK;
    int32_t grp = g->t[t].group;
    char lbl[128];
    if (grp < 0 || (size_t)grp >= o->n_groups)
        return qvl_fail(err, QVL_E_INVALID, "split: node %s is in group %d, which has no "
                        "placement", qvl_gi_label(g, t, lbl, sizeof lbl), (int)grp);
    *out = o->target_of_group[grp];
    if (*out < 0 || (size_t)*out >= n_targets)
        return qvl_fail(err, QVL_E_INVALID, "split: group %d is placed on backend %d of %zu",
                        (int)grp, (int)*out, n_targets);
    return QVL_OK;
}

/* The tensor under a chain of views. */
static qvl_tid under_views(const qvl_graph *g, qvl_tid t) {
    while (qvl_gi_is_node(g, t) && qvl_op_is_view(g->t[t].op)) t = g->t[t].src[0];
    return t;
}

/* Where node t must run whatever its group says (-1: nowhere in particular): a cache write
 * where its cache lives, a reader of a cache write where the write ran. */
static qvl_status pinned_target(const qvl_graph *g, qvl_tid t, const int32_t *target_of,
                                size_t n_targets, const qvl_split_options *o, int32_t *pin,
                                qvl_error *err) {
    const qvl_gtensor *r = &g->t[t];
    char lbl[128];
    *pin = -1;
    if (qvl_gi_is_store_op(r->op) && o && o->input_home) {
        qvl_tid dst = under_views(g, r->src[0]);
        if (g->t[dst].kind == QVL_TENSOR_INPUT && g->t[dst].name) {
            int32_t home = o->input_home(o->input_home_ctx, g->t[dst].name);
            if (home >= (int32_t)n_targets)
                return qvl_fail(err, QVL_E_INVALID, "split: input %s lives on backend %d of %zu",
                                g->t[dst].name, (int)home, n_targets);
            *pin = home;
        }
    }
    for (int i = 0; i < QVL_MAX_SRC; i++) {
        if (r->src[i] < 0) continue;
        qvl_tid s = under_views(g, r->src[i]);
        if (!is_computing(g, s) || !qvl_gi_is_store_op(g->t[s].op)) continue;
        if (*pin >= 0 && *pin != target_of[s])
            return qvl_fail(err, QVL_E_UNSUPPORTED, "split: %s reads caches written on two "
                            "backends", qvl_gi_label(g, t, lbl, sizeof lbl));
        *pin = target_of[s];
    }
    return QVL_OK;
}

/* One node: its pinned target, else its group's, else the first of the fallback order that
 * takes it. */
static qvl_status place_node(const qvl_graph *g, qvl_tid t, const qvl_split_target *targets,
                             size_t n_targets, const qvl_split_options *o, int32_t *target_of,
                             qvl_error *err) {
    int32_t pin, pref;
    qvl_status st = pinned_target(g, t, target_of, n_targets, o, &pin, err);
    if (st == QVL_OK && pin < 0) st = group_target(g, t, n_targets, o, &pref, err);
    if (st != QVL_OK) return st;
    qvl_error why;
    if (pin >= 0) {
        if (takes(g, t, &targets[pin], &why)) {
            target_of[t] = pin;
            return QVL_OK;
        }
        return refuse(g, t, &targets[pin], &why,
                      " (a KV cache's write and its readers run where the cache lives)", err);
    }
    if (takes(g, t, &targets[pref], &why)) {
        target_of[t] = pref;
        return QVL_OK;
    }
    const bool may_fall_back = o && o->fallback_order && !targets[pref].no_fallback;
    for (size_t k = 0; may_fall_back && k < o->n_fallback; k++) {
        int32_t c = o->fallback_order[k];
        qvl_error ignored;
        if (c < 0 || (size_t)c >= n_targets || c == pref) continue;
        if (takes(g, t, &targets[c], &ignored)) {
            target_of[t] = c;
            return QVL_OK;
        }
    }
    return refuse(g, t, &targets[pref], &why,
                  may_fall_back ? " (and no other backend loaded takes it)" : "", err);
}

qvl_status qvl_split_place(const qvl_graph *g, const qvl_split_target *targets,
                           size_t n_targets, const qvl_split_options *o, int32_t *target_of,
                           qvl_error *err) {
    if (!g || !targets || n_targets == 0 || !target_of)
        return qvl_fail(err, QVL_E_INVALID, "split: no graph, backend or result");
    for (size_t i = 0; i < g->n; i++) target_of[i] = -1;
    qvl_tid *order = NULL;
    size_t n_order = 0;
    qvl_status st = qvl_gi_topo_order(g, &order, &n_order, err);
    for (size_t k = 0; st == QVL_OK && k < n_order; k++)
        if (is_computing(g, order[k]))
            st = place_node(g, order[k], targets, n_targets, o, target_of, err);
    free(order);
    return st;
}
