/* Fused ops made of the primitive kernels' own pieces (ref_math.h), so that a fused node
 * computes exactly what its unfused subgraph computes:
 *   NORM_LINEAR  = rms_norm or layer_norm, then up to three matmuls side by side, then the
 *                  output activation (gelu_tanh, gelu_erf) if any;
 *   MLP_RESIDUAL = activation (silu * up, gelu_tanh or gelu_erf), matmul (+ bias), add. */
#include <stdlib.h>

#include "ref_ops.h"
#include "ref_math.h"

/* ---- NORM_LINEAR(x, gamma, beta?, w1, b1?, w2?, b2?, w3?, b3?) ---- */

#define NL_MAX_PROJ 3
static uint32_t w_slot(int p) { return 3 + 2 * (uint32_t)p; }
static uint32_t b_slot(int p) { return 4 + 2 * (uint32_t)p; }

qvl_status ref_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_norm_linear_params *p = &n->params.norm_linear;
    const qvl_tensor *x = n->src[0], *gamma = n->src[1], *beta = qvl_node_src(n, 2);
    int64_t D = qvl_desc_row_len(&x->desc), M = qvl_desc_n_rows(&x->desc);
    int64_t total = qvl_desc_row_len(&n->dst->desc), widest = 0;
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
    qvl_tensor_read_row(gamma, 0, g32);
    if (beta) qvl_tensor_read_row(beta, 0, b32);
    qvl_tensor_read_rows(x, xn);
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
        const qvl_tensor *b = qvl_node_src(n, b_slot(i));
        if (b) qvl_tensor_read_row(b, 0, bias);
        ref_linear(xn, M, &w, b ? bias : NULL, w_row, out + col, total);
        col += w.rows;
    }
    /* 3. the activation, as GELU_TANH / GELU_ERF would apply it to that output */
    if (p->act == QVL_ACT_GELU_TANH)
        for (int64_t i = 0; i < M * total; i++) out[i] = ref_act_gelu_tanh(out[i]);
    else if (p->act == QVL_ACT_GELU_ERF)
        for (int64_t i = 0; i < M * total; i++) out[i] = ref_act_gelu_erf(out[i]);
done:
    free(xn);
    free(g32);
    free(b32);
    free(w_row);
    free(bias);
    return s;
}

/* ---- MLP_RESIDUAL(res [..., D], a [..., F], w_down [D, F], up [..., F]?, b_down [D]?) ---- */

qvl_status ref_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *res = n->src[0], *a = n->src[1], *up = qvl_node_src(n, 3);
    const qvl_tensor *b_down = qvl_node_src(n, 4);
    int64_t M = qvl_desc_n_rows(&res->desc), D = qvl_desc_row_len(&res->desc), F = qvl_desc_row_len(&a->desc);
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
    qvl_tensor_read_rows(a, h);
    if (up) qvl_tensor_read_rows(up, u);
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
    if (b_down) qvl_tensor_read_row(b_down, 0, bias);
    ref_linear(h, M, &w, b_down ? bias : NULL, w_row, y, D);
    /* 3. out = res + y (ADD); y is a separate scratch, so out may even alias res */
    float *out = n->dst->data;
    for (int64_t m = 0; m < M; m++) {
        qvl_tensor_read_row(res, m, r);
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
