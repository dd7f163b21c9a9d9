/* The executor: checks that the backend runs every node, allocates the arena, gives every
 * tensor its backend address and runs the nodes in plan order.
 *
 * Addresses: an arena tensor sits at arena base + offset; a bound weight or input at the
 * caller's address; a view at its storage root's address plus its element offset in bytes; a
 * STORE_ROWS result at its destination's address. Kernel nodes point into one tensor array,
 * so rebinding only has to recompute the addresses.
 *
 * The arena is allocated when first needed (set of an arena input, get, run, addr), not at
 * create: inputs bound before then (a KV cache) are placed again without them, so they take no
 * arena space. Binding an input later still works; its arena bytes then simply go unused.
 *
 * Profiling (off by default) times every node on its own; see qvl_exec_set_profiling. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph_internal.h"

struct qvl_exec {
    qvl_graph *g;
    const qvl_backend_iface *iface;
    qvl_backend *be;
    qvl_buffer arena;
    bool has_arena;       /* allocated (or nothing to allocate) */
    size_t *offsets;      /* per tensor: arena offset of buffer owners, else QVL_GI_NO_OFFSET */
    size_t n;             /* tensors in the graph at create time */
    qvl_tensor *tensors;  /* per tensor: descriptor and backend address */
    void **bound;         /* per tensor: caller's memory for weights/inputs, else NULL */
    bool *ready;          /* weights/inputs: bound or set */
    qvl_node *nodes;      /* kernel nodes (VIEWs excluded) in plan order */
    const qvl_node **node_ptrs;
    size_t n_nodes;
    qvl_tid *root;        /* per tensor: the tensor that owns its storage (itself if none) */
    int64_t *elem;        /* per tensor: its first element within root's storage */
    size_t *by_root_first, *by_root; /* tensors grouped by root: by_root[first[r] .. first[r+1]) */
    bool profiling;          /* time each node (qvl_exec_set_profiling) */
    qvl_op_profile profile;  /* totals while profiling was on */
    qvl_exec_progress_fn progress; /* qvl_exec_set_progress; NULL: off */
    void *progress_arg;
    bool work_by_flops;      /* node work = qvl_node_flops (else 1 per node: no node has any) */
    double work_total;       /* qvl_exec_work, fixed with the plan */
};

static void *root_base(const qvl_exec *ex, qvl_tid root) {
    if (ex->bound[root]) return ex->bound[root];
    if (ex->offsets[root] == QVL_GI_NO_OFFSET || !ex->has_arena || !ex->arena.data) return NULL;
    return (char *)ex->arena.data + ex->offsets[root];
}

static void set_address(qvl_exec *ex, size_t t) {
    qvl_tid root = ex->root[t];
    char *base = root_base(ex, root);
    ex->tensors[t].data =
        base ? base + qvl_dtype_offset_bytes(ex->g->t[root].desc.dtype, ex->elem[t]) : NULL;
}

static void compute_addresses(qvl_exec *ex) {
    for (size_t t = 0; t < ex->n; t++) set_address(ex, t);
}

/* After binding root r: only the tensors in its storage move (a model binds hundreds of
 * weights, so recomputing every address per bind would cost n * binds). */
static void compute_addresses_of_root(qvl_exec *ex, qvl_tid r) {
    for (size_t i = ex->by_root_first[r]; i < ex->by_root_first[r + 1]; i++)
        set_address(ex, ex->by_root[i]);
}

/* Storage roots are fixed once the graph is planned: find them once, and group the tensors by
 * root (a counting sort). */
static void find_roots(qvl_exec *ex) {
    for (size_t t = 0; t < ex->n; t++) {
        ex->elem[t] = 0;
        qvl_tid r = qvl_gi_storage_root(ex->g, (qvl_tid)t, &ex->elem[t]);
        /* the views of a validated graph always end at a tensor; keep a bad one harmless */
        ex->root[t] = r >= 0 && (size_t)r < ex->n ? r : (qvl_tid)t;
        ex->by_root_first[ex->root[t] + 1]++;
    }
    for (size_t r = 0; r < ex->n; r++) ex->by_root_first[r + 1] += ex->by_root_first[r];
    size_t *cursor = ex->by_root_first; /* advanced while filling, then shifted back */
    for (size_t t = 0; t < ex->n; t++) ex->by_root[cursor[ex->root[t]]++] = t;
    for (size_t r = ex->n; r > 0; r--) cursor[r] = cursor[r - 1];
    cursor[0] = 0;
}

static const char *node_label(const qvl_exec *ex, qvl_tid t, char *buf, size_t size) {
    return qvl_gi_label(ex->g, t, buf, size);
}

/* Can the backend run node k? Fails naming the backend, op, node and shapes. */
static qvl_status check_support(const qvl_exec *ex, const qvl_node *nd, qvl_tid t,
                                qvl_error *err) {
    qvl_error why = {0};
    if (qvl_backend_check(ex->iface, ex->be, nd, &why) == QVL_OK) return QVL_OK;
    char lbl[128], shapes[768];
    qvl_gi_shapes_str(ex->g, t, shapes, sizeof shapes);
    return qvl_fail(err, QVL_E_UNSUPPORTED, "backend %s does not support %s (node %s: %s): %s",
                    ex->iface->name ? ex->iface->name : "?", qvl_op_name(nd->op),
                    node_label(ex, t, lbl, sizeof lbl), shapes, why.msg);
}

qvl_status qvl_exec_create(qvl_graph *g, const qvl_backend_iface *iface, qvl_backend *be,
                           qvl_exec **out, qvl_error *err) {
    if (out) *out = NULL;
    if (!g || !iface || !out) return qvl_fail(err, QVL_E_INVALID, "exec: missing graph, backend or result");
    qvl_status s = QVL_OK;
    if (!g->planned && (s = qvl_graph_plan(g, true, NULL, err)) != QVL_OK) return s;

    qvl_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return qvl_fail(err, QVL_E_NOMEM, "exec: out of memory");
    ex->g = g;
    ex->iface = iface;
    ex->be = be;
    ex->n = g->n;
    size_t nn = g->n ? g->n : 1;
    ex->tensors = calloc(nn, sizeof *ex->tensors);
    ex->bound = calloc(nn, sizeof *ex->bound);
    ex->ready = calloc(nn, sizeof *ex->ready);
    ex->offsets = malloc(nn * sizeof *ex->offsets);
    ex->nodes = calloc(g->n_order ? g->n_order : 1, sizeof *ex->nodes);
    ex->node_ptrs = calloc(g->n_order ? g->n_order : 1, sizeof *ex->node_ptrs);
    ex->root = malloc(nn * sizeof *ex->root);
    ex->elem = malloc(nn * sizeof *ex->elem);
    ex->by_root_first = calloc(nn + 1, sizeof *ex->by_root_first);
    ex->by_root = malloc(nn * sizeof *ex->by_root);
    if (!ex->tensors || !ex->bound || !ex->ready || !ex->offsets || !ex->nodes ||
        !ex->node_ptrs || !ex->root || !ex->elem || !ex->by_root_first || !ex->by_root) {
        qvl_exec_free(ex);
        return qvl_fail(err, QVL_E_NOMEM, "exec: out of memory");
    }
    for (size_t t = 0; t < g->n; t++) {
        ex->tensors[t].desc = g->t[t].desc;
        ex->offsets[t] = g->t[t].offset;
    }

    for (size_t k = 0; k < g->n_order; k++) {
        qvl_tid t = g->order[k];
        const qvl_gtensor *r = &g->t[t];
        if (r->op == QVL_OP_VIEW) continue; /* no kernel: an address computed here */
        qvl_node *nd = &ex->nodes[ex->n_nodes];
        nd->op = r->op;
        nd->params = r->params;
        nd->n_src = qvl_op_max_inputs(r->op);
        for (uint32_t i = 0; i < nd->n_src; i++)
            nd->src[i] = r->src[i] >= 0 ? &ex->tensors[r->src[i]] : NULL;
        nd->dst = &ex->tensors[t];
        nd->name = r->name;
        if ((s = check_support(ex, nd, t, err)) != QVL_OK) {
            qvl_exec_free(ex);
            return s;
        }
        ex->node_ptrs[ex->n_nodes++] = nd;
    }
    find_roots(ex);
    compute_addresses(ex);
    *out = ex;
    return QVL_OK;
}

/* Allocates the arena on first need, leaving out inputs that are bound by now. */
static qvl_status ensure_arena(qvl_exec *ex, qvl_error *err) {
    if (ex->has_arena) return QVL_OK;
    const qvl_graph *g = ex->g;
    qvl_plan_stats st = g->stats;
    bool *exclude = NULL; /* inputs bound by now, when there are any */
    for (size_t t = 0; t < ex->n; t++) {
        if (g->t[t].kind != QVL_TENSOR_INPUT || !ex->bound[t]) continue;
        if (!exclude && !(exclude = calloc(ex->n, sizeof *exclude)))
            return qvl_fail(err, QVL_E_NOMEM, "exec: out of memory");
        exclude[t] = true;
    }
    if (exclude) {
        qvl_status s = qvl_gi_place(g, g->order, g->n_order, g->plan_reuse, exclude,
                                    ex->offsets, &st, err);
        free(exclude);
        if (s != QVL_OK) return s;
    }
    if (st.peak_bytes > 0) {
        qvl_error e = {0};
        const char *name = ex->iface->name ? ex->iface->name : "?";
        qvl_status s = ex->iface->buffer_alloc
                           ? ex->iface->buffer_alloc(ex->be, st.peak_bytes, &ex->arena, &e)
                           : QVL_E_UNSUPPORTED;
        if (s != QVL_OK)
            return qvl_fail(err, s, "exec: arena of %zu bytes on %s: %s", st.peak_bytes, name,
                            e.msg[0] ? e.msg : "allocation failed");
    }
    ex->has_arena = true;
    compute_addresses(ex);
    return QVL_OK;
}

void qvl_exec_free(qvl_exec *ex) {
    if (!ex) return;
    if (ex->arena.data && ex->iface->buffer_free) ex->iface->buffer_free(ex->be, &ex->arena);
    free(ex->tensors);
    free(ex->offsets);
    free(ex->bound);
    free(ex->ready);
    free(ex->nodes);
    free(ex->node_ptrs);
    free(ex->root);
    free(ex->elem);
    free(ex->by_root_first);
    free(ex->by_root);
    free(ex);
}

static qvl_status check_tid(const qvl_exec *ex, qvl_tid t, const char *what, qvl_error *err) {
    if (!ex) return qvl_fail(err, QVL_E_INVALID, "exec: %s: no executor", what);
    if (t < 0 || (size_t)t >= ex->n || !ex->g->t[t].live)
        return qvl_fail(err, QVL_E_INVALID, "exec: %s: unknown tensor id %d", what, (int)t);
    return QVL_OK;
}

static qvl_status check_bytes(const qvl_exec *ex, qvl_tid t, size_t bytes, const char *what,
                              qvl_error *err) {
    char lbl[128], d[128];
    const qvl_tensor_desc *desc = &ex->g->t[t].desc;
    size_t want;
    if (!qvl_desc_is_contiguous(desc) || !qvl_gi_bytes(desc, &want))
        return qvl_fail(err, QVL_E_INVALID, "exec: %s %s: %s is not contiguous", what,
                        node_label(ex, t, lbl, sizeof lbl), qvl_desc_str(desc, d, sizeof d));
    if (bytes != want)
        return qvl_fail(err, QVL_E_SHAPE, "exec: %s %s: %zu bytes given, %s takes %zu", what,
                        node_label(ex, t, lbl, sizeof lbl), bytes,
                        qvl_desc_str(desc, d, sizeof d), want);
    return QVL_OK;
}

qvl_status qvl_exec_bind(qvl_exec *ex, qvl_tid t, void *backend_addr, qvl_error *err) {
    qvl_status s = check_tid(ex, t, "bind", err);
    if (s != QVL_OK) return s;
    char lbl[128];
    if (ex->g->t[t].kind == QVL_TENSOR_NODE)
        return qvl_fail(err, QVL_E_INVALID, "exec: bind %s: only weights and inputs can be bound",
                        node_label(ex, t, lbl, sizeof lbl));
    if (!backend_addr)
        return qvl_fail(err, QVL_E_INVALID, "exec: bind %s: no address",
                        node_label(ex, t, lbl, sizeof lbl));
    ex->bound[t] = backend_addr;
    ex->ready[t] = true;
    compute_addresses_of_root(ex, t);
    return QVL_OK;
}

qvl_status qvl_exec_set(qvl_exec *ex, qvl_tid t, const void *host, size_t bytes,
                        qvl_error *err) {
    qvl_status s = check_tid(ex, t, "set", err);
    if (s != QVL_OK) return s;
    char lbl[128];
    const qvl_gtensor *r = &ex->g->t[t];
    if (r->kind == QVL_TENSOR_NODE || (r->kind == QVL_TENSOR_WEIGHT && !ex->bound[t]))
        return qvl_fail(err, QVL_E_INVALID, "exec: set %s: only inputs and bound weights can be set",
                        node_label(ex, t, lbl, sizeof lbl));
    if ((s = check_bytes(ex, t, bytes, "set", err)) != QVL_OK) return s;
    if (!ex->bound[t] && (s = ensure_arena(ex, err)) != QVL_OK) return s;
    if (!host || !ex->tensors[t].data)
        return qvl_fail(err, QVL_E_INVALID, "exec: set %s: no data or no place for it",
                        node_label(ex, t, lbl, sizeof lbl));
    qvl_error e = {0};
    s = ex->iface->upload(ex->be, ex->tensors[t].data, host, bytes, &e);
    if (s != QVL_OK)
        return qvl_fail(err, s, "exec: set %s: %s", node_label(ex, t, lbl, sizeof lbl), e.msg);
    ex->ready[t] = true;
    return QVL_OK;
}

qvl_status qvl_exec_get(qvl_exec *ex, qvl_tid t, void *host, size_t bytes, qvl_error *err) {
    qvl_status s = check_tid(ex, t, "get", err);
    if (s != QVL_OK) return s;
    char lbl[128];
    if ((s = check_bytes(ex, t, bytes, "get", err)) != QVL_OK) return s;
    if ((s = ensure_arena(ex, err)) != QVL_OK) return s;
    if (!host || !ex->tensors[t].data)
        return qvl_fail(err, QVL_E_INVALID, "exec: get %s: no destination or no data",
                        node_label(ex, t, lbl, sizeof lbl));
    qvl_error e = {0};
    s = ex->iface->download(ex->be, host, ex->tensors[t].data, bytes, &e);
    if (s != QVL_OK)
        return qvl_fail(err, s, "exec: get %s: %s", node_label(ex, t, lbl, sizeof lbl), e.msg);
    return QVL_OK;
}

qvl_status qvl_exec_store_raw(qvl_exec *ex, qvl_tid t, const void *host, size_t bytes,
                              qvl_error *err) {
    qvl_status s = check_tid(ex, t, "store", err);
    if (s == QVL_OK) s = check_bytes(ex, t, bytes, "store", err);
    if (s == QVL_OK) s = ensure_arena(ex, err);
    if (s != QVL_OK) return s;
    qvl_error e = {0};
    if (!host || !ex->tensors[t].data)
        return qvl_fail(err, QVL_E_INVALID, "exec: store: no data or no place for it");
    s = ex->iface->upload(ex->be, ex->tensors[t].data, host, bytes, &e);
    return s == QVL_OK ? QVL_OK : qvl_fail(err, s, "exec: store: %s", e.msg);
}

qvl_status qvl_exec_run_node(qvl_exec *ex, qvl_tid t, qvl_error *err) {
    qvl_status s = check_tid(ex, t, "run node", err);
    if (s == QVL_OK) s = ensure_arena(ex, err);
    if (s != QVL_OK) return s;
    for (size_t k = 0; k < ex->n_nodes; k++) {
        const qvl_node *nd = ex->node_ptrs[k];
        if (nd->dst != &ex->tensors[t]) continue;
        qvl_error e = {0};
        s = qvl_backend_kernel(ex->iface, nd->op)(ex->be, nd, &e);
        if (s == QVL_OK && ex->iface->synchronize) s = ex->iface->synchronize(ex->be, &e);
        if (s != QVL_OK) {
            char lbl[128];
            return qvl_fail(err, s, "exec: node %s (%s): %s", node_label(ex, t, lbl, sizeof lbl),
                            qvl_op_name(nd->op), e.msg[0] ? e.msg : qvl_status_str(s));
        }
        return QVL_OK;
    }
    return QVL_OK; /* a view: nothing runs */
}

void qvl_exec_release_arena(qvl_exec *ex) {
    if (!ex || !ex->has_arena) return;
    if (ex->arena.data && ex->iface->buffer_free) ex->iface->buffer_free(ex->be, &ex->arena);
    memset(&ex->arena, 0, sizeof ex->arena);
    ex->has_arena = false;
    /* inputs that were in the arena are gone: a run before they are set again is refused */
    for (size_t t = 0; t < ex->n; t++)
        if (ex->g->t[t].kind == QVL_TENSOR_INPUT && !ex->bound[t]) ex->ready[t] = false;
    compute_addresses(ex); /* arena tensors have no address until the next allocation */
}

size_t qvl_exec_arena_bytes(const qvl_exec *ex) {
    if (!ex) return 0;
    return ex->has_arena ? ex->arena.size : ex->g->stats.peak_bytes;
}

void *qvl_exec_addr(const qvl_exec *ex, qvl_tid t) {
    if (!ex || t < 0 || (size_t)t >= ex->n) return NULL;
    /* Asking for an address fixes the arena; ex is never a const object itself. */
    if (!ex->has_arena && ensure_arena((qvl_exec *)ex, NULL) != QVL_OK) return NULL;
    return ex->tensors[t].data;
}

/* Every weight and input a node reads (directly or through views) must be bound or set. */
static qvl_status check_ready(const qvl_exec *ex, qvl_error *err) {
    const qvl_graph *g = ex->g;
    for (size_t k = 0; k < g->n_order; k++) {
        qvl_tid t = g->order[k];
        uint32_t ns = qvl_gi_n_src(g, t);
        for (uint32_t i = 0; i < ns; i++) {
            if (g->t[t].src[i] < 0) continue;
            qvl_tid root = qvl_gi_storage_root(g, g->t[t].src[i], NULL);
            const qvl_gtensor *r = &g->t[root];
            if (r->kind == QVL_TENSOR_NODE || ex->ready[root]) continue;
            char lbl[128], lbl2[128];
            return qvl_fail(err, QVL_E_INVALID, "exec: %s %s (read by %s) is not %s",
                            r->kind == QVL_TENSOR_WEIGHT ? "weight" : "input",
                            node_label(ex, root, lbl, sizeof lbl),
                            node_label(ex, t, lbl2, sizeof lbl2),
                            r->kind == QVL_TENSOR_WEIGHT ? "bound" : "set");
        }
    }
    return QVL_OK;
}

static double node_work(const qvl_exec *ex, const qvl_node *nd) {
    return ex->work_by_flops ? qvl_node_flops(nd) : 1.0;
}

double qvl_exec_flops(const qvl_exec *ex) {
    double flops = 0.0;
    for (size_t k = 0; ex && k < ex->n_nodes; k++) flops += qvl_node_flops(ex->node_ptrs[k]);
    return flops;
}

double qvl_exec_work(const qvl_exec *ex) {
    if (!ex) return 0.0;
    const double flops = qvl_exec_flops(ex);
    return flops > 0.0 ? flops : (double)ex->n_nodes;
}

void qvl_exec_set_progress(qvl_exec *ex, qvl_exec_progress_fn fn, void *arg) {
    if (!ex) return;
    ex->progress = fn;
    ex->progress_arg = arg;
    ex->work_by_flops = fn && qvl_exec_flops(ex) > 0.0;
    ex->work_total = fn ? qvl_exec_work(ex) : 0.0;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits for the node's kernel (GPU backends run asynchronously) and books its time. */
static qvl_status profile_node(qvl_exec *ex, const qvl_node *nd, double t0, qvl_error *e) {
    if (ex->iface->synchronize) {
        qvl_status s = ex->iface->synchronize(ex->be, e);
        if (s != QVL_OK) return s;
    }
    ex->profile.seconds[nd->op] += now_seconds() - t0;
    ex->profile.calls[nd->op]++;
    ex->profile.flops[nd->op] += qvl_node_flops(nd);
    return QVL_OK;
}

void qvl_exec_set_profiling(qvl_exec *ex, bool on) {
    if (ex) ex->profiling = on;
}

void qvl_exec_profile_reset(qvl_exec *ex) {
    if (ex) memset(&ex->profile, 0, sizeof ex->profile);
}

void qvl_exec_profile(const qvl_exec *ex, qvl_op_profile *out) {
    if (!out) return;
    if (ex) *out = ex->profile;
    else memset(out, 0, sizeof *out);
}

void qvl_op_profile_add(qvl_op_profile *acc, const qvl_op_profile *p) {
    if (!acc || !p) return;
    for (int op = 0; op < QVL_OP_COUNT; op++) {
        acc->seconds[op] += p->seconds[op];
        acc->calls[op] += p->calls[op];
        acc->flops[op] += p->flops[op];
    }
}

qvl_status qvl_exec_run(qvl_exec *ex, qvl_error *err) {
    if (!ex) return qvl_fail(err, QVL_E_INVALID, "exec: run: no executor");
    if (!ex->g->planned || ex->g->n != ex->n)
        return qvl_fail(err, QVL_E_INVALID, "exec: run: the graph changed after qvl_exec_create");
    qvl_status s = check_ready(ex, err);
    if (s == QVL_OK) s = ensure_arena(ex, err);
    if (s != QVL_OK) return s;
    const char *be_name = ex->iface->name ? ex->iface->name : "?";
    qvl_error e = {0};
    bool done = false;
    /* A whole-graph run cannot be timed node by node: profiling runs the nodes one by one. */
    const double total = ex->work_total;
    double work_done = 0.0;
    if (ex->iface->run_graph && !ex->profiling) {
        s = ex->iface->run_graph(ex->be, ex->node_ptrs, ex->n_nodes, &e);
        if (s == QVL_OK) done = true;
        else if (s != QVL_E_UNSUPPORTED)
            return qvl_fail(err, s, "exec: run_graph on %s: %s", be_name, e.msg);
        if (done && ex->progress) ex->progress(ex->progress_arg, total, total);
    }
    for (size_t k = 0; !done && k < ex->n_nodes; k++) {
        const qvl_node *nd = ex->node_ptrs[k];
        qvl_error_clear(&e);
        double t0 = ex->profiling ? now_seconds() : 0.0;
        s = qvl_backend_kernel(ex->iface, nd->op)(ex->be, nd, &e);
        if (s == QVL_OK && ex->profiling) s = profile_node(ex, nd, t0, &e);
        if (s != QVL_OK) {
            char lbl[128];
            qvl_tid t = (qvl_tid)(nd->dst - ex->tensors);
            return qvl_fail(err, s, "exec: node %s (%s) on %s: %s",
                            node_label(ex, t, lbl, sizeof lbl), qvl_op_name(nd->op), be_name,
                            e.msg[0] ? e.msg : qvl_status_str(s));
        }
        if (ex->progress) {
            work_done += node_work(ex, nd);
            ex->progress(ex->progress_arg, k + 1 == ex->n_nodes ? total : work_done, total);
        }
    }
    if (ex->iface->synchronize && (s = ex->iface->synchronize(ex->be, &e)) != QVL_OK)
        return qvl_fail(err, s, "exec: synchronize on %s: %s", be_name, e.msg);
    return QVL_OK;
}
