/* Rule "norm+linear": RMS_NORM or LAYER_NORM whose output feeds only the `a` input of 1..3
 * MATMULs with 2-D weights becomes one NORM_LINEAR computing every projection into one
 * [..., N1+N2+N3] tensor.
 *
 * With one projection the matmul node simply becomes the NORM_LINEAR (same shape, same index).
 * With two or three each matmul node becomes a VIEW slicing its columns out of the fused
 * output, so its readers keep their inputs. Views that read a matmul (reshape to heads, ...)
 * carried strides into the matmul's contiguous storage; they are rewritten into the fused
 * tensor's layout, which is possible when no view index can carry from one column block into
 * the next (checked; the rule does not fire otherwise).
 *
 * A norm read by more than 3 matmuls, or by anything else, is left alone: NORM_LINEAR has
 * three weight slots, and keeping the plain norm for the others would compute it twice. */
#include <string.h>

#include "graph_internal.h"

enum { R_NORM = 0, R_MM0 = 1 }; /* roles: the norm, then the matmuls in index order */

#define MAX_PROJ 3
#define MAX_VIEW_DEPTH 16

/* Maps a view of a contiguous [rows, ni] storage (strides and element offset o in that
 * storage) into the fused [rows, ntot] storage, columns starting at col. */
static bool remap_desc(const qvl_tensor_desc *d, int64_t o, int64_t ni, int64_t ntot,
                       int64_t col, qvl_tensor_desc *out, int64_t *f_off) {
    if (o < 0) return false;
    *out = *d;
    int64_t cols = o % ni; /* largest column any element reaches must stay < ni */
    for (int k = 0; k < d->ndim; k++) {
        int64_t s = d->stride[k], n = d->shape[k];
        if (n == 1) continue;
        if (s < 0) return false;
        int64_t b = s % ni, reach;
        if (__builtin_mul_overflow(b, n - 1, &reach) || __builtin_add_overflow(cols, reach, &cols))
            return false;
        out->stride[k] = (s / ni) * ntot + b;
    }
    if (cols >= ni) return false;
    *f_off = col + (o / ni) * ntot + o % ni;
    return true;
}

/* Walks the tree of aliases reading tensor p (whose element 0 sits at m_off in the matmul's
 * storage and at f_off in the fused one) and checks every view in it; when apply is the graph
 * (not NULL) it also rewrites them. STORE_ROWS into the matmul's storage cannot be expressed:
 * refuse. */
static bool remap_readers(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid p, int64_t m_off,
                          int64_t f_off, int64_t ni, int64_t ntot, int64_t col,
                          qvl_graph *apply, int depth) {
    if (depth > MAX_VIEW_DEPTH) return false;
    for (uint32_t i = 0; i < qvl_gi_n_uses(u, p); i++) {
        qvl_tid c = qvl_gi_user(u, p, i);
        const qvl_gtensor *r = &g->t[c];
        if (qvl_gi_is_store_op(r->op) && r->src[0] == p) return false;
        if (r->op != QVL_OP_VIEW) continue;
        if (u->is_output[c]) return false; /* outputs stay contiguous tensors */
        int64_t c_m_off = m_off + r->params.view.offset, c_f_off;
        qvl_tensor_desc nd;
        if (!remap_desc(&r->desc, c_m_off, ni, ntot, col, &nd, &c_f_off) || c_f_off < f_off)
            return false;
        if (apply) {
            apply->t[c].desc = nd;
            apply->t[c].params.view.offset = c_f_off - f_off;
        }
        if (!remap_readers(g, u, c, c_m_off, c_f_off, ni, ntot, col, apply, depth + 1))
            return false;
    }
    return true;
}

static void fused_inputs(const qvl_graph *g, const qvl_fuse_match *m, qvl_tid *src) {
    const qvl_gtensor *norm = &g->t[m->role[R_NORM]];
    for (int i = 0; i < QVL_MAX_SRC; i++) src[i] = -1;
    src[0] = norm->src[0];
    src[1] = norm->src[1];
    src[2] = norm->op == QVL_OP_LAYER_NORM ? norm->src[2] : -1;
    for (int i = 0; i < m->params.norm_linear.n_proj; i++) {
        const qvl_gtensor *mm = &g->t[m->role[R_MM0 + i]];
        src[3 + 2 * i] = mm->src[1];
        src[4 + 2 * i] = mm->src[2];
    }
}

static int64_t cols_of(const qvl_graph *g, qvl_tid t) {
    const qvl_tensor_desc *d = &g->t[t].desc;
    return d->shape[d->ndim - 1];
}

static bool match(const qvl_graph *g, const qvl_gi_uses *u, qvl_tid t, qvl_fuse_match *m) {
    const qvl_gtensor *norm = &g->t[t];
    if (norm->op != QVL_OP_RMS_NORM && norm->op != QVL_OP_LAYER_NORM) return false;
    uint32_t k = qvl_gi_n_uses(u, t);
    if (u->is_output[t] || k < 1 || k > MAX_PROJ) return false;
    for (uint32_t i = 0; i < k; i++) {
        qvl_tid mm = qvl_gi_user(u, t, i);
        const qvl_gtensor *r = &g->t[mm];
        if (r->op != QVL_OP_MATMUL || r->src[0] != t || r->src[1] == t || r->src[2] == t)
            return false;
        if (!qvl_gi_valid_tid(g, r->src[1]) || g->t[r->src[1]].desc.ndim != 2) return false;
        if (k > 1 && u->is_output[mm]) return false; /* it would become a strided slice */
        m->role[R_MM0 + i] = mm;
    }
    m->role[R_NORM] = t;
    memset(&m->params, 0, sizeof m->params);
    m->params.norm_linear.norm = norm->op == QVL_OP_RMS_NORM ? QVL_NORM_RMS : QVL_NORM_LAYER;
    m->params.norm_linear.eps = norm->params.norm.eps;
    m->params.norm_linear.n_proj = (int32_t)k;

    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(g, m, src);
    qvl_tensor_desc f;
    if (!qvl_gi_infer(g, QVL_OP_NORM_LINEAR, &m->params, src, &f)) return false;
    if (!qvl_gi_backend_takes(g, QVL_OP_NORM_LINEAR, &m->params, src, &f)) return false;
    if (k == 1) return qvl_desc_same_shape(&f, &g->t[m->role[R_MM0]].desc);

    int64_t ntot = 0, col = 0;
    for (uint32_t i = 0; i < k; i++) ntot += cols_of(g, m->role[R_MM0 + i]);
    if (ntot != f.shape[f.ndim - 1]) return false;
    for (uint32_t i = 0; i < k; i++) {
        qvl_tid mm = m->role[R_MM0 + i];
        int64_t ni = cols_of(g, mm);
        if (!remap_readers(g, u, mm, 0, col, ni, ntot, col, NULL, 0)) return false;
        col += ni;
    }
    return true;
}

static qvl_status rewrite(qvl_graph *g, const qvl_gi_uses *u, const qvl_fuse_match *m,
                          qvl_error *err) {
    int k = m->params.norm_linear.n_proj;
    qvl_tid norm = m->role[R_NORM];
    qvl_tid src[QVL_MAX_SRC];
    fused_inputs(g, m, src);
    qvl_tensor_desc f;
    if (!qvl_gi_infer(g, QVL_OP_NORM_LINEAR, &m->params, src, &f))
        return qvl_fail(err, QVL_E_INVALID, "fusion norm+linear: the match no longer infers");
    qvl_gi_kill(g, norm);

    if (k == 1) {
        qvl_gi_replace(g, m->role[R_MM0], QVL_OP_NORM_LINEAR, &m->params, src, QVL_MAX_SRC, &f);
        return QVL_OK;
    }
    qvl_tid fused = qvl_gi_append(g, QVL_TENSOR_NODE, &f, g->t[norm].name);
    if (fused < 0) {
        g->t[norm].live = true;
        return qvl_graph_error(g, err);
    }
    qvl_gi_replace(g, fused, QVL_OP_NORM_LINEAR, &m->params, src, QVL_MAX_SRC, &f);

    int64_t ntot = f.shape[f.ndim - 1], col = 0;
    for (int i = 0; i < k; i++) {
        qvl_tid mm = m->role[R_MM0 + i];
        int64_t ni = cols_of(g, mm), f_off = col;
        qvl_tensor_desc slice;
        remap_desc(&g->t[mm].desc, 0, ni, ntot, col, &slice, &f_off);
        remap_readers(g, u, mm, 0, col, ni, ntot, col, g, 0);
        qvl_params p;
        memset(&p, 0, sizeof p);
        p.view.offset = f_off;
        qvl_tid vsrc[1] = {fused};
        qvl_gi_replace(g, mm, QVL_OP_VIEW, &p, vsrc, 1, &slice);
        col += ni;
    }
    return QVL_OK;
}

const qvl_fuse_rule qvl_fuse_norm_linear = {"norm+linear", match, rewrite};
