/* The scheduler: one graph cut into parts on several backends (qvl/split.h explains the
 * rules). Building copies the original graph part by part through the public builder, so each
 * part is an ordinary graph that fuses, plans and runs exactly like an unsplit one. */
#include "qvl/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* One boundary activation: output from_tid of part from_part, input to_tid of this part. */
typedef struct split_xfer {
    size_t from_part;
    qvl_tid from_tid, to_tid;
    size_t bytes;
} split_xfer;

typedef struct split_part {
    int32_t target;
    qvl_graph *g;
    qvl_exec *ex;
    split_xfer *in;
    size_t n_in, cap_in;
    size_t n_nodes, bytes_in;
    struct qvl_split *owner; /* for the progress of a run (qvl_split_set_progress) */
    double work_before;      /* work units of the parts before this one */
    bool no_work;            /* counted as none: no flops where other parts have some */
} split_part;

struct qvl_split {
    qvl_split_target *targets;
    size_t n_targets;
    split_part *part;
    size_t n_part;
    void *staging; /* host bounce buffer for copies that cross device memory */
    size_t staging_bytes;
    qvl_exec_progress_fn progress; /* qvl_split_set_progress; NULL: off */
    void *progress_arg;
    double work_total;
};

/* While building: where each tensor of the original graph lives. */
typedef struct split_build {
    const qvl_graph *g;
    qvl_split *s;
    size_t *part_of;       /* computing nodes: their part; others SIZE_MAX */
    qvl_tid *local_in_own; /* computing nodes: their id in their own part's graph */
    qvl_tid *local;        /* any tensor: its id in the part being built (-1: not yet) */
    bool *exported;        /* computing nodes already marked as a boundary output */
} split_build;

static bool is_computing(const qvl_graph *g, qvl_tid t) {
    return qvl_gi_is_node(g, t) && !qvl_op_is_view(g->t[t].op);
}

static const char *label(const qvl_graph *g, qvl_tid t, char *buf, size_t n) {
    return qvl_gi_label(g, t, buf, n);
}

static qvl_status add_xfer(split_part *p, split_xfer x, qvl_error *err) {
    if (p->n_in == p->cap_in) {
        size_t cap = p->cap_in ? 2 * p->cap_in : 8;
        split_xfer *v = realloc(p->in, cap * sizeof *v);
        if (!v) return qvl_fail(err, QVL_E_NOMEM, "split: out of memory");
        p->in = v;
        p->cap_in = cap;
    }
    p->in[p->n_in++] = x;
    p->bytes_in += x.bytes;
    return QVL_OK;
}

/* An activation computed by an earlier part becomes an input here, and an output there. */
static qvl_tid import_boundary(split_build *b, size_t pi, qvl_tid t, qvl_error *err) {
    const qvl_graph *g = b->g;
    char lbl[128];
    if (qvl_gi_is_store_op(g->t[t].op)) {
        qvl_fail(err, QVL_E_UNSUPPORTED, "split: %s writes a cache that a part on another "
                 "backend reads; keep its readers on the same backend", label(g, t, lbl, sizeof lbl));
        return -1;
    }
    const qvl_tensor_desc *d = &g->t[t].desc;
    size_t bytes;
    if (!qvl_gi_bytes(d, &bytes)) {
        qvl_fail(err, QVL_E_SHAPE, "split: %s cannot cross backends (not contiguous)",
                 label(g, t, lbl, sizeof lbl));
        return -1;
    }
    char name[48];
    snprintf(name, sizeof name, "split.in.%d", (int)t);
    split_part *p = &b->s->part[pi];
    qvl_tid in = qvl_g_input(p->g, name, d->dtype, d->ndim, d->shape);
    size_t from = b->part_of[t];
    if (!b->exported[t]) {
        qvl_g_output(b->s->part[from].g, b->local_in_own[t], name);
        b->exported[t] = true;
    }
    if (in < 0) return -1;
    if (add_xfer(p, (split_xfer){from, b->local_in_own[t], in, bytes}, err) != QVL_OK) return -1;
    return in;
}

/* The id of original tensor t in part pi's graph, bringing it in first: leaves by name, views
 * recomputed over their (brought-in) source, computing nodes of other parts as boundaries. */
static qvl_tid pull(split_build *b, size_t pi, qvl_tid t, qvl_error *err) {
    if (b->local[t] >= 0) return b->local[t];
    const qvl_graph *g = b->g;
    qvl_graph *pg = b->s->part[pi].g;
    const qvl_gtensor *r = &g->t[t];
    qvl_tid out = -1;
    if (r->kind == QVL_TENSOR_INPUT) {
        out = qvl_g_input(pg, r->name, r->desc.dtype, r->desc.ndim, r->desc.shape);
    } else if (r->kind == QVL_TENSOR_WEIGHT) {
        out = qvl_g_weight(pg, r->name, r->desc.dtype, r->desc.ndim, r->desc.shape);
    } else if (qvl_op_is_view(r->op)) {
        qvl_tid src = pull(b, pi, r->src[0], err);
        const qvl_tid srcs[QVL_MAX_SRC] = {src, -1, -1, -1};
        if (src >= 0) out = qvl_g_node(pg, r->op, &r->params, srcs, &r->desc, r->name);
    } else {
        out = import_boundary(b, pi, t, err);
    }
    if (out < 0 && err && err->status == QVL_OK) qvl_graph_error(pg, err);
    b->local[t] = out;
    return out;
}

/* Copies computing node t into part pi (its sources pulled first). */
static qvl_status copy_node(split_build *b, size_t pi, qvl_tid t, qvl_error *err) {
    const qvl_gtensor *r = &b->g->t[t];
    qvl_tid srcs[QVL_MAX_SRC];
    for (int i = 0; i < QVL_MAX_SRC; i++) {
        srcs[i] = -1;
        if (r->src[i] >= 0 && (srcs[i] = pull(b, pi, r->src[i], err)) < 0) return err->status;
    }
    qvl_graph *pg = b->s->part[pi].g;
    qvl_tid n = qvl_g_node(pg, r->op, &r->params, srcs, NULL, r->name);
    if (n < 0) return qvl_graph_error(pg, err);
    b->local[t] = b->local_in_own[t] = n;
    b->part_of[t] = pi;
    b->s->part[pi].n_nodes++;
    return QVL_OK;
}

static qvl_status new_part(qvl_split *s, int32_t target, qvl_error *err) {
    split_part *v = realloc(s->part, (s->n_part + 1) * sizeof *v);
    if (!v) return qvl_fail(err, QVL_E_NOMEM, "split: out of memory");
    s->part = v;
    split_part *p = &s->part[s->n_part];
    memset(p, 0, sizeof *p);
    p->target = target;
    if (!(p->g = qvl_graph_new())) return qvl_fail(err, QVL_E_NOMEM, "split: out of memory");
    s->n_part++;
    return QVL_OK;
}

/* The original graph's outputs, marked in the part that computes them. A view or leaf output
 * is brought into the last part, whose ids `local` still holds (the last part built). */
static qvl_status mark_outputs(split_build *b, qvl_error *err) {
    const size_t last = b->s->n_part - 1;
    for (size_t i = 0; i < b->g->n_out; i++) {
        qvl_tid t = b->g->out[i].t;
        size_t pi = is_computing(b->g, t) ? b->part_of[t] : last;
        qvl_tid lt = is_computing(b->g, t) ? b->local_in_own[t] : pull(b, last, t, err);
        if (lt < 0) return err->status;
        qvl_g_output(b->s->part[pi].g, lt, b->g->out[i].name);
    }
    return QVL_OK;
}

static qvl_status build_parts(split_build *b, const qvl_split_options *o, qvl_error *err) {
    qvl_tid *order = NULL;
    size_t n_order = 0;
    int32_t *placed = malloc((b->g->n ? b->g->n : 1) * sizeof *placed);
    qvl_status st = placed ? qvl_split_place(b->g, b->s->targets, b->s->n_targets, o, placed, err)
                           : qvl_fail(err, QVL_E_NOMEM, "split: out of memory");
    if (st == QVL_OK) st = qvl_gi_topo_order(b->g, &order, &n_order, err);
    for (size_t k = 0; st == QVL_OK && k < n_order; k++) {
        qvl_tid t = order[k];
        if (!is_computing(b->g, t)) continue;
        const int32_t target = placed[t];
        if (b->s->n_part == 0 || b->s->part[b->s->n_part - 1].target != target) {
            st = new_part(b->s, target, err);
            /* a new part starts with nothing of the original graph in it */
            for (size_t i = 0; st == QVL_OK && i < b->g->n; i++) b->local[i] = -1;
        }
        if (st == QVL_OK) st = copy_node(b, b->s->n_part - 1, t, err);
    }
    free(order);
    free(placed);
    if (st == QVL_OK && b->s->n_part == 0)
        st = qvl_fail(err, QVL_E_INVALID, "split: the graph computes nothing");
    if (st == QVL_OK) st = mark_outputs(b, err);
    for (size_t i = 0; st == QVL_OK && i < b->s->n_part; i++)
        st = qvl_graph_error(b->s->part[i].g, err);
    return st;
}

static void add_report(qvl_fusion_report *acc, const qvl_fusion_report *r) {
    if (acc->n_rules == 0) {
        *acc = *r;
        return;
    }
    for (size_t i = 0; i < r->n_rules && i < acc->n_rules; i++) {
        acc->fired[i] += r->fired[i];
        acc->declined[i] += r->declined[i];
    }
    acc->nodes_before += r->nodes_before;
    acc->nodes_after += r->nodes_after;
}

static qvl_status ready_parts(qvl_split *s, const qvl_split_options *o, qvl_fusion_report *rep,
                              qvl_error *err) {
    for (size_t i = 0; i < s->n_part; i++) {
        split_part *p = &s->part[i];
        const qvl_split_target *tg = &s->targets[p->target];
        qvl_status st = QVL_OK;
        if (!(o && o->no_fuse)) {
            qvl_fusion_report r;
            memset(&r, 0, sizeof r);
            st = qvl_graph_fuse(p->g, tg->iface, tg->be, &r, err);
            if (st == QVL_OK && rep) add_report(rep, &r);
        }
        if (st == QVL_OK) st = qvl_exec_create(p->g, tg->iface, tg->be, &p->ex, err);
        if (st != QVL_OK) return st;
        for (size_t k = 0; k < p->n_in; k++)
            if (p->in[k].bytes > s->staging_bytes) s->staging_bytes = p->in[k].bytes;
    }
    if (s->staging_bytes && !(s->staging = malloc(s->staging_bytes)))
        return qvl_fail(err, QVL_E_NOMEM, "split: out of memory");
    return QVL_OK;
}

qvl_status qvl_split_create(const qvl_graph *g, const qvl_split_target *targets,
                            size_t n_targets, const qvl_split_options *opts,
                            qvl_fusion_report *report, qvl_split **out, qvl_error *err) {
    *out = NULL;
    if (!g || !targets || n_targets == 0)
        return qvl_fail(err, QVL_E_INVALID, "split: no graph or no backend");
    if (report) memset(report, 0, sizeof *report);
    qvl_status st = qvl_graph_validate(g, err);
    if (st != QVL_OK) return st;
    qvl_split *s = calloc(1, sizeof *s);
    split_build b = {.g = g, .s = s};
    const size_t n = g->n ? g->n : 1;
    if (s) s->targets = malloc(n_targets * sizeof *targets);
    b.part_of = malloc(n * sizeof *b.part_of);
    b.local_in_own = malloc(n * sizeof *b.local_in_own);
    b.local = malloc(n * sizeof *b.local);
    b.exported = calloc(n, sizeof *b.exported);
    if (!s || !s->targets || !b.part_of || !b.local_in_own || !b.local || !b.exported) {
        st = qvl_fail(err, QVL_E_NOMEM, "split: out of memory");
    } else {
        memcpy(s->targets, targets, n_targets * sizeof *targets);
        s->n_targets = n_targets;
        for (size_t i = 0; i < g->n; i++) {
            b.part_of[i] = SIZE_MAX;
            b.local_in_own[i] = b.local[i] = -1;
        }
        st = build_parts(&b, opts, err);
    }
    if (st == QVL_OK) st = ready_parts(s, opts, report, err);
    free(b.part_of);
    free(b.local_in_own);
    free(b.local);
    free(b.exported);
    if (st != QVL_OK) {
        qvl_split_free(s);
        return st;
    }
    *out = s;
    return QVL_OK;
}

void qvl_split_free(qvl_split *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_part; i++) {
        qvl_exec_free(s->part[i].ex);
        qvl_graph_free(s->part[i].g);
        free(s->part[i].in);
    }
    free(s->part);
    free(s->targets);
    free(s->staging);
    free(s);
}

size_t qvl_split_n_parts(const qvl_split *s) { return s ? s->n_part : 0; }

qvl_split_part qvl_split_part_at(const qvl_split *s, size_t i) {
    qvl_split_part r = {.target = -1};
    if (!s || i >= s->n_part) return r;
    const split_part *p = &s->part[i];
    r.target = p->target;
    r.graph = p->g;
    r.exec = p->ex;
    r.n_nodes = p->n_nodes;
    r.bytes_in = p->bytes_in;
    return r;
}

size_t qvl_split_copy_bytes(const qvl_split *s) {
    size_t n = 0;
    for (size_t i = 0; s && i < s->n_part; i++) n += s->part[i].bytes_in;
    return n;
}

qvl_status qvl_split_set(qvl_split *s, const char *name, const void *host, size_t bytes,
                         qvl_error *err) {
    bool found = false;
    for (size_t i = 0; i < s->n_part; i++) {
        qvl_tid t = qvl_graph_find(s->part[i].g, name);
        if (t < 0 || qvl_graph_kind(s->part[i].g, t) != QVL_TENSOR_INPUT) continue;
        found = true;
        qvl_status st = qvl_exec_set(s->part[i].ex, t, host, bytes, err);
        if (st != QVL_OK) return st;
    }
    return found ? QVL_OK : qvl_fail(err, QVL_E_NOT_FOUND, "split: the graph has no input %s", name);
}

/* Moves one boundary activation into part p: straight from the producer's buffer when that
 * is host memory (one copy: the consumer's upload), else through the staging buffer. */
static qvl_status copy_in(qvl_split *s, split_part *p, const split_xfer *x, qvl_error *err) {
    split_part *from = &s->part[x->from_part];
    if (s->targets[from->target].host_memory) {
        const void *src = qvl_exec_addr(from->ex, x->from_tid);
        if (src) return qvl_exec_set(p->ex, x->to_tid, src, x->bytes, err);
    }
    qvl_status st = qvl_exec_get(from->ex, x->from_tid, s->staging, x->bytes, err);
    if (st == QVL_OK) st = qvl_exec_set(p->ex, x->to_tid, s->staging, x->bytes, err);
    return st;
}

qvl_status qvl_split_run(qvl_split *s, qvl_error *err) {
    if (!s) return qvl_fail(err, QVL_E_INVALID, "split: run: no split");
    for (size_t i = 0; i < s->n_part; i++) {
        split_part *p = &s->part[i];
        for (size_t k = 0; k < p->n_in; k++) {
            qvl_status st = copy_in(s, p, &p->in[k], err);
            if (st != QVL_OK) return qvl_error_prefix(err, "split: part %zu", i);
        }
        qvl_status st = qvl_exec_run(p->ex, err);
        if (st != QVL_OK) return st;
    }
    return QVL_OK;
}

qvl_status qvl_split_get(qvl_split *s, const char *name, void *host, size_t bytes,
                         qvl_error *err) {
    for (size_t i = s->n_part; i-- > 0;) {
        qvl_tid t = qvl_graph_find(s->part[i].g, name);
        if (t >= 0 && qvl_graph_kind(s->part[i].g, t) == QVL_TENSOR_NODE)
            return qvl_exec_get(s->part[i].ex, t, host, bytes, err);
    }
    return qvl_fail(err, QVL_E_NOT_FOUND, "split: the graph has no output %s", name);
}

void qvl_split_release_arenas(qvl_split *s) {
    for (size_t i = 0; s && i < s->n_part; i++) qvl_exec_release_arena(s->part[i].ex);
}

/* A part's progress as the whole run's: the parts before it are done. */
static void part_progress(void *arg, double done, double total) {
    (void)total;
    const split_part *p = arg;
    const qvl_split *s = p->owner;
    s->progress(s->progress_arg, p->work_before + (p->no_work ? 0.0 : done), s->work_total);
}

/* One unit for the whole run: flops where any part has some (a part without counts as none),
 * else nodes everywhere (each executor's own choice then agrees). */
void qvl_split_set_progress(qvl_split *s, qvl_exec_progress_fn fn, void *arg) {
    if (!s) return;
    s->progress = fn;
    s->progress_arg = arg;
    bool by_flops = false;
    for (size_t i = 0; i < s->n_part; i++)
        by_flops = by_flops || qvl_exec_flops(s->part[i].ex) > 0.0;
    s->work_total = 0.0;
    for (size_t i = 0; i < s->n_part; i++) {
        split_part *p = &s->part[i];
        p->owner = s;
        p->work_before = s->work_total;
        p->no_work = by_flops && qvl_exec_flops(p->ex) == 0.0;
        s->work_total += p->no_work ? 0.0 : qvl_exec_work(p->ex);
        qvl_exec_set_progress(p->ex, fn ? part_progress : NULL, fn ? p : NULL);
    }
}

void qvl_split_set_profiling(qvl_split *s, bool on) {
    for (size_t i = 0; s && i < s->n_part; i++) qvl_exec_set_profiling(s->part[i].ex, on);
}

void qvl_split_profile(const qvl_split *s, qvl_op_profile *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; s && i < s->n_part; i++) {
        qvl_op_profile p;
        qvl_exec_profile(s->part[i].ex, &p);
        qvl_op_profile_add(out, &p);
    }
}

void qvl_split_profile_reset(qvl_split *s) {
    for (size_t i = 0; s && i < s->n_part; i++) qvl_exec_profile_reset(s->part[i].ex);
}
