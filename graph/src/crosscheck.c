/* Cross-check: one graph, two backends, same random weights and inputs; every node's output
 * is compared, twice: end to end (each side runs the whole graph) and isolated (each node runs
 * again on side b from side a's inputs). Backend a is the reference (usually the reference
 * backend), b the candidate. The verdict is the isolated pass: it judges every op on exactly
 * the reference's inputs, where end-to-end differences compound along the graph (through 24
 * vision blocks of random weights they grow past 1e-3 with every op within 1e-5). The graph is
 * planned without buffer reuse so every intermediate survives the run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* Tolerances by the dtype of the compared output: a node fails when
 * max|a - b| > atol + rtol * max|a|.
 *  - f32: backends reorder sums (blocking, FMA, SIMD lanes, threads). Over the K <= ~10^4
 *    terms of a matmul or a norm the rounding stays around 1e-5 of the largest magnitude;
 *    rtol 1e-3 leaves room for that to compound through a few fused steps (softmax of scaled
 *    scores, norms that divide by a small rms), atol 1e-4 covers outputs that are all near 0.
 *  - f16 (e.g. a half-precision KV cache): an f32 difference at a rounding boundary flips one
 *    f16 ulp (2^-10 relative), so allow 4 ulps.
 *  - bf16: one ulp is 2^-7 relative; allow 2 ulps.
 *  - q8_0: a flipped rounding moves a value by a block scale (max|block| / 127): 1/64.
 *  - i32: exact. */
static const struct {
    qvl_dtype dtype;
    double atol, rtol;
} tolerances[] = {
    {QVL_F32, 1e-4, 1e-3},
    {QVL_F16, 1e-3, 4e-3},
    {QVL_BF16, 1e-2, 1.6e-2},
    {QVL_Q8_0, 1e-2, 1.6e-2},
    {QVL_I32, 0.0, 0.0},
};

static void tolerance(qvl_dtype d, double *atol, double *rtol) {
    *atol = 1e-4;
    *rtol = 1e-3;
    for (size_t i = 0; i < sizeof tolerances / sizeof tolerances[0]; i++)
        if (tolerances[i].dtype == d) {
            *atol = tolerances[i].atol;
            *rtol = tolerances[i].rtol;
        }
}

/* splitmix64: a tiny seeded generator; each tensor gets its own stream derived from the seed
 * and its name, so the same name gets the same values in any graph. */
static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_hash(const char *name, qvl_tid t) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    if (!name) return h ^ (uint64_t)t;
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
    return h;
}

typedef struct side {
    const qvl_backend_iface *iface;
    qvl_backend *be;
    qvl_exec *ex;
    qvl_buffer *bufs; /* weight buffers, one per tensor index (size 0: none) */
} side;

typedef struct check {
    qvl_graph *g;
    side s[2];
    uint64_t seed;
    qvl_fill_i32_fn fill_i32;
    void *user;
    qvl_crosscheck_progress_fn progress;
    void *progress_user;
} check;

/* Host bytes for a weight or input: uniform values in [-1, 1) converted to its dtype, or the
 * caller's i32 values. */
static qvl_status make_data(const check *c, qvl_tid t, void **out, size_t *bytes,
                            qvl_error *err) {
    const qvl_gtensor *r = &c->g->t[t];
    char lbl[128];
    int64_t n = qvl_desc_nelem(&r->desc);
    *out = NULL;
    if (!qvl_gi_bytes(&r->desc, bytes))
        return qvl_fail(err, QVL_E_LIMIT, "crosscheck: %s has no valid size",
                        qvl_gi_label(c->g, t, lbl, sizeof lbl));
    void *host = malloc(*bytes ? *bytes : 1);
    float *f = r->desc.dtype == QVL_I32 ? NULL : malloc((size_t)n * sizeof *f);
    if (!host || (r->desc.dtype != QVL_I32 && !f)) {
        free(host);
        free(f);
        return qvl_fail(err, QVL_E_NOMEM, "crosscheck: out of memory for %s",
                        qvl_gi_label(c->g, t, lbl, sizeof lbl));
    }
    if (r->desc.dtype == QVL_I32) {
        if (!c->fill_i32) {
            free(host);
            return qvl_fail(err, QVL_E_INVALID, "crosscheck: %s is i32: a fill callback is needed",
                            qvl_gi_label(c->g, t, lbl, sizeof lbl));
        }
        memset(host, 0, *bytes);
        c->fill_i32(t, r->name, host, n, c->user);
    } else {
        uint64_t state = c->seed ^ name_hash(r->name, t);
        for (int64_t i = 0; i < n; i++)
            f[i] = (float)((double)(splitmix(&state) >> 40) * 0x1p-23 - 1.0);
        qvl_from_f32(r->desc.dtype, f, host, n);
        free(f);
    }
    *out = host;
    return QVL_OK;
}

/* Gives weight t memory on side s holding host, and binds it. */
static qvl_status upload_weight(check *c, side *s, qvl_tid t, const void *host, size_t bytes,
                                qvl_error *err) {
    qvl_error e = {0};
    char lbl[128];
    qvl_status st = s->iface->buffer_alloc(s->be, bytes, &s->bufs[t], &e);
    if (st == QVL_OK) st = s->iface->upload(s->be, s->bufs[t].data, host, bytes, &e);
    if (st != QVL_OK)
        return qvl_fail(err, st, "crosscheck: weight %s on %s: %s",
                        qvl_gi_label(c->g, t, lbl, sizeof lbl), s->iface->name, e.msg);
    return qvl_exec_bind(s->ex, t, s->bufs[t].data, err);
}

static qvl_status fill_all(check *c, qvl_error *err) {
    qvl_graph *g = c->g;
    for (size_t i = 0; i < g->n; i++) {
        qvl_tid t = (qvl_tid)i;
        const qvl_gtensor *r = &g->t[i];
        if (!r->live || r->kind == QVL_TENSOR_NODE) continue;
        void *host;
        size_t bytes;
        qvl_status s = make_data(c, t, &host, &bytes, err);
        for (int k = 0; k < 2 && s == QVL_OK; k++)
            s = r->kind == QVL_TENSOR_WEIGHT ? upload_weight(c, &c->s[k], t, host, bytes, err)
                                             : qvl_exec_set(c->s[k].ex, t, host, bytes, err);
        free(host);
        if (s != QVL_OK) return s;
    }
    return QVL_OK;
}

static qvl_status to_f32(const qvl_exec *ex, qvl_tid t, const qvl_tensor_desc *d, void *raw,
                         size_t bytes, float *out, qvl_error *err) {
    qvl_status s = qvl_exec_get((qvl_exec *)ex, t, raw, bytes, err);
    if (s != QVL_OK) return s;
    int64_t n = qvl_desc_nelem(d);
    if (d->dtype == QVL_I32)
        for (int64_t i = 0; i < n; i++) out[i] = (float)((const int32_t *)raw)[i];
    else
        qvl_to_f32(d->dtype, raw, out, n);
    return QVL_OK;
}

/* Largest |a - b| and largest |a|; a NaN or infinity on one side only counts as infinite. */
static void compare(const float *a, const float *b, int64_t n, double *max_abs,
                    double *max_ref) {
    *max_abs = 0;
    *max_ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = a[i], y = b[i];
        if (isnan(x) || isnan(y)) {
            if (!(isnan(x) && isnan(y))) *max_abs = INFINITY;
            continue;
        }
        if (x == y) {
            if (isfinite(x) && fabs(x) > *max_ref) *max_ref = fabs(x);
            continue;
        }
        if (!isfinite(x) || !isfinite(y)) {
            *max_abs = INFINITY;
            continue;
        }
        if (fabs(x) > *max_ref) *max_ref = fabs(x);
        if (fabs(x - y) > *max_abs) *max_abs = fabs(x - y);
    }
}

/* What one pass found. */
typedef struct verdict {
    size_t compared;
    qvl_tid worst, first_bad;
    double worst_ratio, worst_abs, worst_rel, bad_abs, bad_rel;
} verdict;

typedef struct scratch {
    void *raw;
    float *fa, *fb;
} scratch;

static qvl_status scratch_init(const qvl_graph *g, scratch *sc, qvl_error *err) {
    size_t max_bytes = 0;
    int64_t max_n = 0;
    for (size_t i = 0; i < g->n; i++) { /* every tensor: node outputs and the roots copied */
        const qvl_gtensor *r = &g->t[i];
        size_t b;
        if (!r->live || r->op == QVL_OP_VIEW || !qvl_gi_bytes(&r->desc, &b)) continue;
        if (b > max_bytes) max_bytes = b;
        if (qvl_desc_nelem(&r->desc) > max_n) max_n = qvl_desc_nelem(&r->desc);
    }
    sc->raw = malloc(max_bytes ? max_bytes : 1);
    sc->fa = malloc((size_t)(max_n ? max_n : 1) * sizeof *sc->fa);
    sc->fb = malloc((size_t)(max_n ? max_n : 1) * sizeof *sc->fb);
    if (!sc->raw || !sc->fa || !sc->fb)
        return qvl_fail(err, QVL_E_NOMEM, "crosscheck: out of memory comparing");
    return QVL_OK;
}

static void scratch_free(scratch *sc) {
    free(sc->raw);
    free(sc->fa);
    free(sc->fb);
}

/* Node t's output on both sides, judged against the tolerance of its dtype. */
static qvl_status compare_one(check *c, scratch *sc, qvl_tid t, verdict *v, qvl_error *err) {
    const qvl_gtensor *r = &c->g->t[t];
    size_t bytes;
    if (r->op == QVL_OP_VIEW || !qvl_desc_is_contiguous(&r->desc) ||
        !qvl_gi_bytes(&r->desc, &bytes))
        return QVL_OK;
    qvl_status s = to_f32(c->s[0].ex, t, &r->desc, sc->raw, bytes, sc->fa, err);
    if (s == QVL_OK) s = to_f32(c->s[1].ex, t, &r->desc, sc->raw, bytes, sc->fb, err);
    if (s != QVL_OK) return s;
    double max_abs, max_ref, atol, rtol;
    compare(sc->fa, sc->fb, qvl_desc_nelem(&r->desc), &max_abs, &max_ref);
    tolerance(r->desc.dtype, &atol, &rtol);
    double tol = atol + rtol * max_ref;
    double ratio = tol > 0 ? max_abs / tol : (max_abs > 0 ? INFINITY : 0);
    double rel = max_ref > 0 ? max_abs / max_ref : (max_abs > 0 ? INFINITY : 0);
    v->compared++;
    if (ratio > v->worst_ratio) {
        v->worst_ratio = ratio;
        v->worst = t;
        v->worst_abs = max_abs;
        v->worst_rel = rel;
    }
    if (max_abs > tol && v->first_bad < 0) {
        v->first_bad = t;
        v->bad_abs = max_abs;
        v->bad_rel = rel;
    }
    return QVL_OK;
}

/* End to end: every node as each side computed it running the whole graph. */
static qvl_status compare_end_to_end(check *c, scratch *sc, verdict *v, qvl_error *err) {
    qvl_status s = QVL_OK;
    for (size_t k = 0; k < c->g->n_order && s == QVL_OK; k++)
        s = compare_one(c, sc, c->g->order[k], v, err);
    return s;
}

/* Isolated: before node t runs again on side b, the storage of everything it reads (other than
 * weights, which are the same bytes on both sides) gets side a's bytes. */
static qvl_status compare_isolated(check *c, scratch *sc, verdict *v, qvl_error *err) {
    qvl_graph *g = c->g;
    qvl_status s = QVL_OK;
    size_t total = 0, done = 0;
    for (size_t k = 0; k < g->n_order; k++) total += g->t[g->order[k]].op != QVL_OP_VIEW;
    for (size_t k = 0; k < g->n_order && s == QVL_OK; k++) {
        qvl_tid t = g->order[k];
        if (g->t[t].op == QVL_OP_VIEW) continue;
        uint32_t ns = qvl_gi_n_src(g, t);
        for (uint32_t i = 0; i < ns && s == QVL_OK; i++) {
            if (g->t[t].src[i] < 0) continue;
            qvl_tid root = qvl_gi_storage_root(g, g->t[t].src[i], NULL);
            size_t bytes;
            if (g->t[root].kind == QVL_TENSOR_WEIGHT || !qvl_gi_bytes(&g->t[root].desc, &bytes))
                continue;
            s = qvl_exec_get(c->s[0].ex, root, sc->raw, bytes, err);
            if (s == QVL_OK) s = qvl_exec_store_raw(c->s[1].ex, root, sc->raw, bytes, err);
        }
        if (s == QVL_OK) s = qvl_exec_run_node(c->s[1].ex, t, err);
        if (s == QVL_OK) s = compare_one(c, sc, t, v, err);
        if (s == QVL_OK && c->progress) c->progress(t, ++done, total, c->progress_user);
    }
    return s;
}

qvl_status qvl_graph_crosscheck(qvl_graph *g, const qvl_backend_iface *ia, qvl_backend *a,
                                const qvl_backend_iface *ib, qvl_backend *b, uint64_t seed,
                                qvl_fill_i32_fn fill_i32, void *user,
                                qvl_crosscheck_result *res_out, qvl_error *err) {
    return qvl_graph_crosscheck_progress(g, ia, a, ib, b, seed, fill_i32, user, NULL, NULL,
                                         res_out, err);
}

qvl_status qvl_graph_crosscheck_progress(qvl_graph *g, const qvl_backend_iface *ia,
                                         qvl_backend *a, const qvl_backend_iface *ib,
                                         qvl_backend *b, uint64_t seed, qvl_fill_i32_fn fill_i32,
                                         void *user, qvl_crosscheck_progress_fn progress,
                                         void *progress_user, qvl_crosscheck_result *res_out,
                                         qvl_error *err) {
    qvl_crosscheck_result res = {0, -1, 0, 0, -1, 0, 0, -1, -1, 0, 0};
    if (res_out) *res_out = res;
    if (!g || !ia || !ib) return qvl_fail(err, QVL_E_INVALID, "crosscheck: missing graph or backend");
    bool replan = g->planned && g->plan_reuse; /* put a reusing plan back afterwards */
    qvl_status s = qvl_graph_plan(g, false, NULL, err);
    if (s != QVL_OK) return s;
    check c = {g, {{ia, a, NULL, NULL}, {ib, b, NULL, NULL}}, seed, fill_i32, user, progress,
               progress_user};
    for (int k = 0; k < 2 && s == QVL_OK; k++) {
        c.s[k].bufs = calloc(g->n ? g->n : 1, sizeof(qvl_buffer));
        if (!c.s[k].bufs) s = qvl_fail(err, QVL_E_NOMEM, "crosscheck: out of memory");
        else s = qvl_exec_create(g, c.s[k].iface, c.s[k].be, &c.s[k].ex, err);
    }
    if (s == QVL_OK) s = fill_all(&c, err);
    for (int k = 0; k < 2 && s == QVL_OK; k++) s = qvl_exec_run(c.s[k].ex, err);
    verdict e2e = {0, -1, -1, -1, 0, 0, 0, 0}, iso = {0, -1, -1, -1, 0, 0, 0, 0};
    scratch sc = {NULL, NULL, NULL};
    if (s == QVL_OK) s = scratch_init(g, &sc, err);
    if (s == QVL_OK) s = compare_end_to_end(&c, &sc, &e2e, err);
    if (s == QVL_OK) s = compare_isolated(&c, &sc, &iso, err);
    scratch_free(&sc);
    res.nodes_compared = iso.compared;
    res.worst = iso.worst;
    res.worst_abs = iso.worst_abs;
    res.worst_rel = iso.worst_rel;
    res.first_bad = iso.first_bad;
    res.bad_abs = iso.bad_abs;
    res.bad_rel = iso.bad_rel;
    res.e2e_worst = e2e.worst;
    res.e2e_first_beyond = e2e.first_bad;
    res.e2e_worst_abs = e2e.worst_abs;
    res.e2e_worst_rel = e2e.worst_rel;
    if (s == QVL_OK && res.first_bad >= 0) {
        char lbl[128], wl[128];
        double atol, rtol;
        tolerance(g->t[res.first_bad].desc.dtype, &atol, &rtol);
        s = qvl_fail(err, QVL_E_MISMATCH,
                     "crosscheck %s vs %s: node %s (%s) differs on the same inputs: max abs %.3g "
                     "(%.3g of max|ref|) beyond atol %g + rtol %g; worst node %s (%.3g abs)",
                     ia->name, ib->name, qvl_gi_label(g, res.first_bad, lbl, sizeof lbl),
                     qvl_op_name(g->t[res.first_bad].op), res.bad_abs, res.bad_rel, atol, rtol,
                     qvl_gi_label(g, res.worst, wl, sizeof wl), res.worst_abs);
    }
    for (int k = 0; k < 2; k++) {
        qvl_exec_free(c.s[k].ex);
        for (size_t i = 0; c.s[k].bufs && i < g->n; i++)
            if (c.s[k].bufs[i].size || c.s[k].bufs[i].data)
                c.s[k].iface->buffer_free(c.s[k].be, &c.s[k].bufs[i]);
        free(c.s[k].bufs);
    }
    if (replan) {
        qvl_error e = {0};
        qvl_status ps = qvl_graph_plan(g, true, NULL, &e);
        if (s == QVL_OK && ps != QVL_OK) s = qvl_fail(err, ps, "%s", e.msg);
    }
    if (res_out) *res_out = res;
    return s;
}
