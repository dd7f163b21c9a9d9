/* The uses index the fusion matchers read: for every tensor, the live nodes that read it.
 *
 * Fusion rewrites a few nodes at a time in graphs of thousands, so after each rewrite the
 * index is updated from the changes the graph recorded (qvl_gi_note_change) instead of being
 * rebuilt: the changed nodes leave the lists of their old sources and join those of their
 * current ones. A full build costs O(tensors); an update O(changed nodes * their users). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

static bool list_insert(qvl_gi_user_list *l, qvl_tid t) {
    if (l->n == l->cap) {
        uint32_t cap = l->cap ? 2 * l->cap : 2;
        qvl_tid *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    uint32_t i = l->n++;
    for (; i > 0 && l->v[i - 1] > t; i--) l->v[i] = l->v[i - 1]; /* keep ascending */
    l->v[i] = t;
    return true;
}

static void list_remove_all(qvl_gi_user_list *l, qvl_tid t) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < l->n; i++)
        if (l->v[i] != t) l->v[k++] = l->v[i];
    l->n = k;
}

/* Adds node t to the lists of the tensors it reads (nothing for non-nodes). */
static bool add_reader(const qvl_graph *g, qvl_gi_uses *u, qvl_tid t) {
    if (!qvl_gi_is_node(g, t)) return true;
    uint32_t ns = qvl_gi_n_src(g, t);
    for (uint32_t i = 0; i < ns; i++) {
        qvl_tid s = g->t[t].src[i];
        if (qvl_gi_valid_tid(g, s) && (size_t)s < u->n && !list_insert(&u->list[s], t))
            return false;
    }
    return true;
}

/* Grows u to g's tensor count (new tensors: no readers, not outputs). */
static bool grow(const qvl_graph *g, qvl_gi_uses *u) {
    size_t n = g->n;
    if (n <= u->n) return true;
    qvl_gi_user_list *list = realloc(u->list, n * sizeof *list);
    if (!list) return false;
    u->list = list;
    memset(list + u->n, 0, (n - u->n) * sizeof *list);
    bool *out = realloc(u->is_output, n * sizeof *out);
    if (!out) return false;
    u->is_output = out;
    memset(out + u->n, 0, (n - u->n) * sizeof *out);
    u->n = n;
    return true;
}

qvl_status qvl_gi_uses_build(const qvl_graph *g, qvl_gi_uses *u, qvl_error *err) {
    memset(u, 0, sizeof *u);
    bool ok = grow(g, u);
    for (size_t t = 0; ok && t < g->n; t++) ok = add_reader(g, u, (qvl_tid)t);
    if (!ok) {
        qvl_gi_uses_free(u);
        return qvl_fail(err, QVL_E_NOMEM, "graph: out of memory listing uses");
    }
    for (size_t i = 0; i < g->n_out; i++)
        if (qvl_gi_valid_tid(g, g->out[i].t)) u->is_output[g->out[i].t] = true;
    return QVL_OK;
}

qvl_status qvl_gi_uses_update(qvl_graph *g, qvl_gi_uses *u, qvl_error *err) {
    bool ok = !g->track_lost && grow(g, u);
    for (size_t c = 0; ok && c < g->n_changes; c++) {
        const qvl_gi_change *ch = &g->changes[c];
        for (int i = 0; i < QVL_MAX_SRC; i++)
            if (ch->src[i] >= 0 && (size_t)ch->src[i] < u->n)
                list_remove_all(&u->list[ch->src[i]], ch->t);
    }
    for (size_t c = 0; ok && c < g->n_changes; c++) {
        bool seen = false; /* a node changed twice is added once */
        for (size_t e = 0; e < c && !seen; e++) seen = g->changes[e].t == g->changes[c].t;
        if (!seen) ok = add_reader(g, u, g->changes[c].t);
    }
    g->n_changes = 0;
    if (ok) return QVL_OK;
    g->track_lost = false; /* the rebuild below starts from the graph as it is */
    qvl_gi_uses_free(u);
    return qvl_gi_uses_build(g, u, err);
}

bool qvl_gi_uses_current(const qvl_graph *g, const qvl_gi_uses *u) {
    qvl_gi_uses fresh;
    qvl_error e = {0};
    if (qvl_gi_uses_build(g, &fresh, &e) != QVL_OK) return true; /* nothing to compare */
    bool same = fresh.n == u->n;
    for (size_t t = 0; same && t < u->n; t++)
        same = fresh.list[t].n == u->list[t].n && fresh.is_output[t] == u->is_output[t] &&
               (u->list[t].n == 0 ||
                memcmp(fresh.list[t].v, u->list[t].v, u->list[t].n * sizeof *u->list[t].v) == 0);
    qvl_gi_uses_free(&fresh);
    return same;
}

void qvl_gi_uses_free(qvl_gi_uses *u) {
    for (size_t t = 0; u->list && t < u->n; t++) free(u->list[t].v);
    free(u->list);
    free(u->is_output);
    memset(u, 0, sizeof *u);
}

bool qvl_gi_single_use(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t) {
    return qvl_gi_is_node(g, t) && !u->is_output[t] && qvl_gi_n_uses(u, t) == 1;
}
