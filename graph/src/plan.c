/* The memory planner: execution order, lifetimes, arena offsets.
 *
 * Time runs over steps: step 0 is "before the run" (inputs are set), node k of the order runs
 * at step k+1, step n+1 is "after the run" (outputs are read). A buffer owner (an input, or a
 * node that computes into fresh storage) lives from its step to the last step at which any
 * tensor sharing its storage is read or written: views and STORE_ROWS results extend their
 * storage root's life, outputs keep theirs to the end. Two buffers may share arena bytes only
 * when their lives do not meet, not even at one step (a kernel's output never overlaps its
 * inputs). An input's bytes may be reused after its last reader, so inputs are set again
 * before each run (as graph.h says). Weights live outside the arena.
 *
 * Placement is greedy best-fit in step order: each new buffer takes the smallest gap between
 * the buffers alive at its step that holds it, else goes above the highest one.
 *
 * The order follows data dependencies only: a node that must see what a STORE_ROWS wrote
 * reads the STORE_ROWS result, not the destination input itself. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct live_block {
    size_t offset, size;
    size_t last; /* step of the last use */
} live_block;

typedef struct arena {
    live_block *b; /* alive blocks sorted by offset */
    size_t n;
    size_t top;    /* highest end ever used: the arena size */
} arena;

static bool align_up(size_t x, size_t *out) {
    if (x > SIZE_MAX - (QVL_GI_ALIGN - 1)) return false;
    *out = (x + QVL_GI_ALIGN - 1) & ~(QVL_GI_ALIGN - 1);
    return true;
}

/* Frees blocks whose last use is before step, then places size bytes alive until last. */
static size_t arena_place(arena *a, size_t step, size_t size, size_t last) {
    size_t k = 0;
    for (size_t i = 0; i < a->n; i++)
        if (a->b[i].last >= step) a->b[k++] = a->b[i];
    a->n = k;

    size_t best = SIZE_MAX, best_gap = SIZE_MAX, end = 0, at = a->n;
    for (size_t i = 0; i < a->n; i++) {
        if (a->b[i].offset >= end) {
            size_t gap = a->b[i].offset - end;
            if (gap >= size && gap < best_gap) {
                best = end;
                best_gap = gap;
                at = i;
            }
        }
        size_t e = a->b[i].offset + a->b[i].size;
        if (e > end) end = e;
    }
    if (best == SIZE_MAX) {
        best = end;
        at = a->n;
    }
    memmove(&a->b[at + 1], &a->b[at], (a->n - at) * sizeof a->b[0]);
    a->b[at] = (live_block){best, size, last};
    a->n++;
    if (best + size > a->top) a->top = best + size;
    return best;
}

qvl_status qvl_gi_place(const qvl_graph *g, const qvl_tid *order, size_t n_order, bool reuse,
                        const bool *exclude, size_t *offsets, qvl_plan_stats *stats,
                        qvl_error *err) {
    size_t n = g->n, end_step = n_order + 1;
    size_t *def = calloc(n ? n : 1, sizeof *def);   /* step at which a tensor is made */
    size_t *last = calloc(n ? n : 1, sizeof *last); /* last step its storage is used */
    qvl_tid *owners = malloc((n ? n : 1) * sizeof *owners);
    arena a = {malloc((n ? n : 1) * sizeof(live_block)), 0, 0};
    qvl_status s = QVL_OK;
    if (!def || !last || !owners || !a.b) {
        s = qvl_fail(err, QVL_E_NOMEM, "graph: out of memory planning");
        goto done;
    }
    for (size_t t = 0; t < n; t++) offsets[t] = QVL_GI_NO_OFFSET;
    for (size_t k = 0; k < n_order; k++) def[order[k]] = last[order[k]] = k + 1;
    for (size_t k = 0; k < n_order; k++) {
        qvl_tid t = order[k];
        uint32_t ns = qvl_gi_n_src(g, t);
        for (uint32_t i = 0; i < ns; i++) {
            if (g->t[t].src[i] < 0) continue;
            qvl_tid root = qvl_gi_storage_root(g, g->t[t].src[i], NULL);
            if (last[root] < k + 1) last[root] = k + 1;
        }
        qvl_tid root = qvl_gi_storage_root(g, t, NULL); /* STORE_ROWS writes its root */
        if (last[root] < k + 1) last[root] = k + 1;
    }
    for (size_t i = 0; i < g->n_out; i++)
        last[qvl_gi_storage_root(g, g->out[i].t, NULL)] = end_step;

    /* Owners in step order: inputs (step 0) first, then computing nodes. */
    size_t n_owners = 0;
    for (size_t t = 0; t < n; t++)
        if (g->t[t].live && g->t[t].kind == QVL_TENSOR_INPUT && !(exclude && exclude[t]))
            owners[n_owners++] = (qvl_tid)t;
    for (size_t k = 0; k < n_order; k++)
        if (!qvl_gi_is_alias(g, order[k])) owners[n_owners++] = order[k];

    qvl_plan_stats st = {0, 0, n_owners};
    char lbl[128];
    for (size_t i = 0; i < n_owners; i++) {
        qvl_tid t = owners[i];
        size_t bytes, size;
        if (!qvl_gi_bytes(&g->t[t].desc, &bytes) || !align_up(bytes, &size) ||
            st.total_bytes > SIZE_MAX - size) {
            s = qvl_fail(err, QVL_E_LIMIT, "graph: tensor %s is too large to plan",
                         qvl_gi_label(g, t, lbl, sizeof lbl));
            goto done;
        }
        offsets[t] = reuse ? arena_place(&a, def[t], size, last[t]) : st.total_bytes;
        st.total_bytes += size;
    }
    st.peak_bytes = reuse ? a.top : st.total_bytes;
    *stats = st;
done:
    free(def);
    free(last);
    free(owners);
    free(a.b);
    return s;
}

qvl_status qvl_graph_plan(qvl_graph *g, bool reuse, qvl_plan_stats *stats, qvl_error *err) {
    qvl_status s = qvl_graph_validate(g, err);
    if (s != QVL_OK) return s;
    qvl_gi_invalidate_plan(g);
    qvl_tid *order;
    size_t n_order;
    s = qvl_gi_topo_order(g, &order, &n_order, err);
    if (s != QVL_OK) return s;
    size_t *offsets = malloc((g->n ? g->n : 1) * sizeof *offsets);
    qvl_plan_stats st;
    if (!offsets) s = qvl_fail(err, QVL_E_NOMEM, "graph: out of memory planning");
    else s = qvl_gi_place(g, order, n_order, reuse, NULL, offsets, &st, err);
    if (s == QVL_OK) {
        for (size_t t = 0; t < g->n; t++) g->t[t].offset = offsets[t];
        g->has_offsets = true;
        g->order = order;
        g->n_order = n_order;
        g->stats = st;
        g->plan_reuse = reuse;
        g->planned = true;
        if (stats) *stats = st;
    } else {
        free(order);
    }
    free(offsets);
    return s;
}
