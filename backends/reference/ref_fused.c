/* Fused ops made of the primitive kernels' own pieces (ref_math.h), so that a fused node
 * computes exactly what its unfused subgraph computes:
 *   NORM_LINEAR  = rms_norm or layer_norm, then up to three matmuls side by side;
 *   MLP_RESIDUAL = activation (silu * up, gelu_tanh or gelu_erf), matmul (+ bias), add. */
#include <stdlib.h>

#include "ref_access.h"
#include "ref_check.h"
#include "ref_math.h"
#include "ref_ops.h"

/* ---- NORM_LINEAR(x, gamma, beta?, w1, b1?, w2?, b2?, w3?, b3?) ---- */

#define NL_MAX_PROJ 3
static uint32_t w_slot(int p) { return 3 + 2 * (uint32_t)p; }
static uint32_t b_slot(int p) { return 4 + 2 * (uint32_t)p; }
static const char *const w_names[NL_MAX_PROJ] = {"w1", "w2", "w3"};
static const char *const b_names[NL_MAX_PROJ] = {"b1", "b2", "b3"};

qvl_status ref_check_norm_linear(const qvl_node *n, qvl_error *err) {
    const qvl_norm_linear_params *p = &n->params.norm_linear;
    qvl_status s;
    if ((s = ref_need(n, 0, "x", REF_READABLE, 1, 4, err)) ||
        (s = ref_need(n, 1, "gamma", REF_READABLE, 1, 1, err)))
        return s;
    const qvl_tensor_desc *x = &n->src[0]->desc;
    int64_t D = ref_row_len(x);
    if ((s = ref_vector_len(n, 1, "gamma", D, err))) return s;
    if (p->norm == QVL_NORM_RMS) {
        if ((s = ref_absent(n, 2, "beta", err))) return s;
    } else if (p->norm == QVL_NORM_LAYER) {
        if ((s = ref_maybe(n, 2, "beta", REF_READABLE, 1, 1, err)) ||
            (s = ref_vector_len(n, 2, "beta", D, err)))
            return s;
    } else {
        return ref_fail(n, err, QVL_E_INVALID, "unknown norm kind %d", (int)p->norm);
    }
    if (p->n_proj < 1 || p->n_proj > NL_MAX_PROJ)
        return ref_fail(n, err, QVL_E_INVALID, "n_proj is %d, not 1..3", (int)p->n_proj);

    int64_t total = 0;
    for (int i = 0; i < NL_MAX_PROJ; i++) {
        if (i >= p->n_proj) {
            if ((s = ref_absent(n, w_slot(i), w_names[i], err)) ||
                (s = ref_absent(n, b_slot(i), b_names[i], err)))
                return s;
            continue;
        }
        if ((s = ref_need(n, w_slot(i), w_names[i], REF_READABLE, 2, 2, err)) ||
            (s = ref_maybe(n, b_slot(i), b_names[i], REF_READABLE, 1, 1, err)))
            return s;
        const qvl_tensor_desc *w = &n->src[w_slot(i)]->desc;
        if (w->shape[1] != D)
            return ref_fail(n, err, QVL_E_SHAPE, "%s has K = %lld, x rows have %lld", w_names[i],
                            (long long)w->shape[1], (long long)D);
        if ((s = ref_vector_len(n, b_slot(i), b_names[i], w->shape[0], err))) return s;
        total += w->shape[0];
    }
    int64_t shape[QVL_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = total;
    return ref_output(n, REF_DT(QVL_F32), x->ndim, shape, err);
}

qvl_status ref_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    qvl_status s = ref_begin(n, ref_check_norm_linear, err);
    if (s != QVL_OK) return s;
    const qvl_norm_linear_params *p = &n->params.norm_linear;
    const qvl_tensor *x = n->src[0], *gamma = n->src[1], *beta = ref_src(n, 2);
    int64_t D = ref_row_len(&x->desc), M = ref_n_rows(&x->desc);
    int64_t total = ref_row_len(&n->dst->desc), widest = 0;
    for (int i = 0; i < p->n_proj; i++)
        if (n->src[w_slot(i)]->desc.shape[0] > widest) widest = n->src[w_slot(i)]->desc.shape[0];

    float *xn = ref_scratch(M * D), *g32 = ref_scratch(D), *b32 = ref_scratch(D);
    float *w_row = ref_scratch(D), *bias = ref_scratch(widest);
    if (!xn || !g32 || !b32 || !w_row || !bias) {
        s = ref_fail(n, err, QVL_E_NOMEM, "out of memory for %lld x %lld scratch", (long long)M,
                     (long long)D);
        goto done;
    }
    /* 1. the norm, row by row, exactly as RMS_NORM / LAYER_NORM do it */
    ref_read_row(gamma, 0, g32);
    if (beta) ref_read_row(beta, 0, b32);
    ref_read_rows(x, xn);
    for (int64_t r = 0; r < M; r++) {
        if (p->norm == QVL_NORM_LAYER)
            ref_layer_norm_row(xn + r * D, xn + r * D, g32, beta ? b32 : NULL, D, p->eps);
        else
            ref_rms_norm_row(xn + r * D, xn + r * D, g32, D, p->eps);
    }
    /* 2. each projection fills its own column range of the output, as MATMUL would */
    float *out = n->dst->data;
    int64_t col = 0;
    for (int i = 0; i < p->n_proj; i++) {
        ref_matrix w = ref_matrix_of(n->src[w_slot(i)], 0);
        const qvl_tensor *b = ref_src(n, b_slot(i));
        if (b) ref_read_row(b, 0, bias);
        ref_linear(xn, M, &w, b ? bias : NULL, w_row, out + col, total);
        col += w.rows;
    }
done:
    free(xn);
    free(g32);
    free(b32);
    free(w_row);
    free(bias);
    return s;
}

/* ---- MLP_RESIDUAL(res [..., D], a [..., F], w_down [D, F], up [..., F]?, b_down [D]?) ---- */

qvl_status ref_check_mlp_residual(const qvl_node *n, qvl_error *err) {
    qvl_status s;
    if ((s = ref_need(n, 0, "res", REF_READABLE, 1, 4, err)) ||
        (s = ref_need(n, 1, "a", REF_READABLE, 1, 4, err)) ||
        (s = ref_need(n, 2, "w_down", REF_READABLE, 2, 2, err)) ||
        (s = ref_maybe(n, 3, "up", REF_READABLE, 1, 4, err)) ||
        (s = ref_maybe(n, 4, "b_down", REF_READABLE, 1, 1, err)))
        return s;
    const qvl_tensor_desc *res = &n->src[0]->desc, *a = &n->src[1]->desc;
    const qvl_tensor_desc *w = &n->src[2]->desc;
    const qvl_tensor *up = ref_src(n, 3);
    int64_t D = ref_row_len(res), F = ref_row_len(a);
    if (!ref_same_leading(res, a))
        return ref_fail(n, err, QVL_E_SHAPE, "res and a have different rows");
    if (w->shape[0] != D || w->shape[1] != F)
        return ref_fail(n, err, QVL_E_SHAPE, "w_down is [%lld, %lld], expected [%lld, %lld]",
                        (long long)w->shape[0], (long long)w->shape[1], (long long)D,
                        (long long)F);
    if (up && (!ref_same_leading(&up->desc, a) || ref_row_len(&up->desc) != F))
        return ref_fail(n, err, QVL_E_SHAPE, "up and a have different shapes");
    if ((s = ref_vector_len(n, 4, "b_down", D, err))) return s;
    int32_t act = n->params.mlp.act;
    if (up && act != QVL_ACT_SILU)
        return ref_fail(n, err, QVL_E_INVALID, "a gated mlp (with up) needs act silu, not %d",
                        (int)act);
    if (!up && act != QVL_ACT_GELU_TANH && act != QVL_ACT_GELU_ERF && act != QVL_ACT_NONE)
        return ref_fail(n, err, QVL_E_INVALID,
                        "an mlp without up needs act gelu_tanh, gelu_erf or none, not %d",
                        (int)act);
    return ref_output(n, REF_DT(QVL_F32), res->ndim, res->shape, err);
}

qvl_status ref_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    (void)be;
    qvl_status s = ref_begin(n, ref_check_mlp_residual, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *res = n->src[0], *a = n->src[1], *up = ref_src(n, 3);
    const qvl_tensor *b_down = ref_src(n, 4);
    int64_t M = ref_n_rows(&res->desc), D = ref_row_len(&res->desc), F = ref_row_len(&a->desc);
    float *h = ref_scratch(M * F), *u = up ? ref_scratch(M * F) : NULL;
    float *y = ref_scratch(M * D), *r = ref_scratch(D), *w_row = ref_scratch(F);
    float *bias = ref_scratch(D);
    if (!h || (up && !u) || !y || !r || !w_row || !bias) {
        s = ref_fail(n, err, QVL_E_NOMEM, "out of memory for %lld x %lld scratch", (long long)M,
                     (long long)F);
        goto done;
    }
    /* 1. h = silu(a) * up, gelu_tanh(a), gelu_erf(a) (the SILU, MUL, GELU kernels' math) or
     *    a itself (act none) */
    ref_read_rows(a, h);
    if (up) ref_read_rows(up, u);
    for (int64_t i = 0; i < M * F; i++) {
        if (up)
            h[i] = ref_act_silu(h[i]) * u[i];
        else if (n->params.mlp.act == QVL_ACT_GELU_TANH)
            h[i] = ref_act_gelu_tanh(h[i]);
        else if (n->params.mlp.act == QVL_ACT_GELU_ERF)
            h[i] = ref_act_gelu_erf(h[i]);
    }
    /* 2. y = h . w_down^T + b_down (MATMUL) */
    ref_matrix w = ref_matrix_of(n->src[2], 0);
    if (b_down) ref_read_row(b_down, 0, bias);
    ref_linear(h, M, &w, b_down ? bias : NULL, w_row, y, D);
    /* 3. out = res + y (ADD); y is a separate scratch, so out may even alias res */
    float *out = n->dst->data;
    for (int64_t m = 0; m < M; m++) {
        ref_read_row(res, m, r);
        for (int64_t d = 0; d < D; d++) out[m * D + d] = r[d] + y[m * D + d];
    }
done:
    free(h);
    free(u);
    free(y);
    free(r);
    free(w_row);
    free(bias);
    return s;
}
