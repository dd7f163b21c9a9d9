/* What a graph takes on a backend before it runs (qvl_graph_memory): the arena the planner
 * lays out, less the inputs the caller binds to memory of its own, and the scratch the
 * backend's kernels would grow beside it. Placement counts this instead of guessing. */
#include <stdlib.h>

#include "graph_internal.h"

qvl_status qvl_graph_memory(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be,
                            bool (*bound)(void *ctx, const char *name), void *ctx,
                            size_t *arena_bytes, size_t *scratch, size_t *scratch_bytes,
                            qvl_error *err) {
    *arena_bytes = 0;
    if (scratch_bytes) *scratch_bytes = 0;
    qvl_status s = g->planned ? QVL_OK : qvl_graph_plan(g, true, NULL, err);
    if (s != QVL_OK) return s;
    bool *exclude = calloc(g->n ? g->n : 1, sizeof *exclude);
    size_t *offsets = malloc((g->n ? g->n : 1) * sizeof *offsets);
    if (!exclude || !offsets) {
        free(exclude);
        free(offsets);
        return qvl_fail(err, QVL_E_NOMEM, "graph: out of memory planning");
    }
    for (size_t t = 0; bound && t < g->n; t++)
        exclude[t] = g->t[t].live && g->t[t].kind == QVL_TENSOR_INPUT && g->t[t].name &&
                     bound(ctx, g->t[t].name);
    qvl_plan_stats st;
    s = qvl_gi_place(g, g->order, g->n_order, g->plan_reuse, exclude, offsets, &st, err);
    free(exclude);
    free(offsets);
    if (s != QVL_OK) return s;
    *arena_bytes = st.peak_bytes;
    if (!scratch) return QVL_OK;
    qvl_backend_scratch_fn ask = (qvl_backend_scratch_fn)qvl_backend_proc(iface, QVL_EXT_SCRATCH);
    for (size_t k = 0; ask && k < g->n_order; k++) {
        qvl_tid t = g->order[k];
        if (!qvl_gi_is_node(g, t) || qvl_op_is_view(g->t[t].op)) continue;
        qvl_tensor in[QVL_MAX_SRC], dst;
        qvl_node node;
        qvl_gi_probe_node(g, t, in, &dst, &node);
        ask(be, &node, scratch);
    }
    if (scratch_bytes)
        for (int i = 0; i < QVL_SCRATCH_SLOTS; i++) *scratch_bytes += scratch[i];
    return QVL_OK;
}
