/* MATMUL and the two fused ops built on avx_linear:
 *   NORM_LINEAR  = the norm once per row (threaded), then each projection into its column
 *                  range of the output, its activation (if any) applied as each thread
 *                  finishes a range of columns;
 *   MLP_RESIDUAL = act(a) [* up] per row (threaded), then the down projection with the
 *                  residual (and bias) added as each output element is written. */
#include <immintrin.h>
#include <stdlib.h>

#include "avx_kernels.h"
#include "avx_linear.h"

/* bias/gamma-like 1-D input as f32 (NULL slot gives NULL); *ok = 0 when out of memory */
static float *vector_f32(const qvl_tensor *t, int *ok) {
    if (!t) return NULL;
    int64_t len = t->desc.shape[0];
    float *v = avx_scratch(len);
    if (!v) {
        *ok = 0;
        return NULL;
    }
    avx_gather(t, 0, t->desc.stride[0], len, v);
    return v;
}

/* ---- MATMUL(a [..., K], w [N, K] or [Bw, N, K], bias?) ---- */

qvl_status avx_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *a = n->src[0], *w = n->src[1];
    int64_t K = avx_row_len(&a->desc), rows = avx_n_rows(&a->desc);
    int64_t N = w->desc.shape[w->desc.ndim - 2];
    int64_t batches = w->desc.ndim == 3 ? a->desc.shape[0] : 1;
    int64_t per_w = w->desc.ndim == 3 ? batches / w->desc.shape[0] : 1;
    int64_t M = rows / batches;
    int ok = 1;
    float *a_owned = NULL, *bias = vector_f32(qvl_node_src(n, 2), &ok);
    const float *a32 = avx_rows_f32(a, &a_owned);
    if (!a32 || !ok) {
        s = QVL_E_NOMEM;
        goto done;
    }
    for (int64_t b = 0; b < batches && s == QVL_OK; b++) {
        avx_wmat wm;
        float *w_owned = NULL;
        if ((s = avx_wmat_of(w, b / per_w, &wm, &w_owned)) == QVL_OK)
            s = avx_linear(be, a32 + b * M * K, M, &wm, bias, NULL,
                           (float *)n->dst->data + b * M * N, N);
        free(w_owned);
    }
done:
    free(a_owned);
    free(bias);
    if (s != QVL_OK)
        return avx_fail(n, err, s, "out of memory for %lld x %lld scratch", (long long)rows,
                        (long long)K);
    return QVL_OK;
}

/* ---- NORM_LINEAR(x, gamma, beta?, w1, b1?, w2?, b2?, w3?, b3?) ---- */

typedef struct nl_job {
    const qvl_tensor *x;
    const float *gamma, *beta;
    float eps;
    int layer;
    float *xn;
    int64_t D;
} nl_job;

static void nl_norm_row(void *ctx, int64_t r, float *scratch) {
    nl_job *j = ctx;
    const float *row = avx_row(j->x, r, scratch);
    if (j->layer) avx_layer_norm_row(j->xn + r * j->D, row, j->gamma, j->beta, j->D, j->eps);
    else avx_rms_norm_row(j->xn + r * j->D, row, j->gamma, j->D, j->eps);
}

qvl_status avx_norm_linear(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_norm_linear_params *p = &n->params.norm_linear;
    const qvl_tensor *x = n->src[0];
    int64_t D = avx_row_len(&x->desc), M = avx_n_rows(&x->desc);
    int64_t total = avx_row_len(&n->dst->desc);
    int ok = 1;
    float *g32 = vector_f32(n->src[1], &ok), *b32 = vector_f32(qvl_node_src(n, 2), &ok);
    float *xn = avx_scratch(M * D);
    if (!ok || !xn) {
        s = QVL_E_NOMEM;
        goto done;
    }
    nl_job j = {x, g32, b32, p->eps, p->norm == QVL_NORM_LAYER, xn, D};
    if ((s = avx_for_rows(be, M, D, nl_norm_row, &j)) != QVL_OK) goto done;
    /* all projections in one pass over the threads */
    avx_wmat wm[3];
    float *w_owned[3] = {0}, *bias[3] = {0};
    avx_linear_part parts[3];
    int64_t col = 0;
    int np = 0;
    for (; np < p->n_proj && s == QVL_OK; np++) {
        bias[np] = vector_f32(qvl_node_src(n, 4 + 2 * (uint32_t)np), &ok);
        if (!ok) s = QVL_E_NOMEM;
        else s = avx_wmat_of(n->src[3 + 2 * np], 0, &wm[np], &w_owned[np]);
        parts[np] = (avx_linear_part){&wm[np], bias[np], col, p->act};
        col += n->src[3 + 2 * np]->desc.shape[0];
    }
    if (s == QVL_OK) s = avx_linear_parts(be, xn, M, parts, np, NULL, (float *)n->dst->data, total);
    for (int i = 0; i < np; i++) {
        free(w_owned[i]);
        free(bias[i]);
    }
done:
    free(g32);
    free(b32);
    free(xn);
    if (s != QVL_OK)
        return avx_fail(n, err, s, "out of memory for %lld x %lld scratch", (long long)M,
                        (long long)D);
    return QVL_OK;
}

/* ---- MLP_RESIDUAL(res [..., D], a [..., F], w_down [D, F], up [..., F]?, b_down [D]?) ---- */

typedef struct mlp_job {
    const qvl_tensor *a, *up;
    int32_t act;
    float *h;
    int64_t F;
} mlp_job;

static void mlp_act_row(void *ctx, int64_t r, float *scratch) {
    mlp_job *j = ctx;
    float *h = j->h + r * j->F;
    const qvl_tensor *a = j->a;
    avx_gather(a, avx_row_offset(&a->desc, r), a->desc.stride[a->desc.ndim - 1], j->F, h);
    if (j->up) {
        avx_silu_row(h, j->F);
        const float *u = avx_row(j->up, r, scratch);
        int64_t i = 0;
        for (; i + 8 <= j->F; i += 8)
            _mm256_storeu_ps(h + i, _mm256_mul_ps(_mm256_loadu_ps(h + i), _mm256_loadu_ps(u + i)));
        for (; i < j->F; i++) h[i] *= u[i];
    } else if (j->act == QVL_ACT_GELU_TANH) {
        avx_gelu_tanh_row(h, j->F);
    } else if (j->act == QVL_ACT_GELU_ERF) {
        avx_gelu_erf_row(h, j->F);
    } /* QVL_ACT_NONE: a as it is */
}

qvl_status avx_mlp_residual(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *res = n->src[0], *a = n->src[1];
    int64_t M = avx_n_rows(&res->desc), D = avx_row_len(&res->desc), F = avx_row_len(&a->desc);
    int ok = 1;
    /* Without an activation (attention's o_proj, a vision MLP whose fc1 applied it) a is
     * multiplied where it lies: a copy of a vision tower's [3072, 4096] rows cost about a
     * tenth of the product, most of it faulting in fresh scratch pages. */
    const bool plain = !qvl_node_src(n, 3) && n->params.mlp.act == QVL_ACT_NONE;
    float *bias = vector_f32(qvl_node_src(n, 4), &ok), *h = NULL;
    float *res_owned = NULL, *w_owned = NULL;
    const float *r32 = avx_rows_f32(res, &res_owned);
    const float *in; /* the rows multiplied: a itself, or act(a) [* up] in h */
    if (plain) {
        in = avx_rows_f32(a, &h); /* h: a converted copy, when a is not f32 rows */
    } else {
        in = h = avx_scratch(M * F);
    }
    if (!ok || !in || !r32) {
        s = QVL_E_NOMEM;
        goto done;
    }
    mlp_job j = {a, qvl_node_src(n, 3), n->params.mlp.act, h, F};
    if (!plain && (s = avx_for_rows(be, M, F, mlp_act_row, &j)) != QVL_OK) goto done;
    avx_wmat wm;
    if ((s = avx_wmat_of(n->src[2], 0, &wm, &w_owned)) == QVL_OK)
        s = avx_linear(be, in, M, &wm, bias, r32, n->dst->data, D); /* r32 may be the output */
done:
    free(bias);
    free(h);
    free(res_owned);
    free(w_owned);
    if (s != QVL_OK)
        return avx_fail(n, err, s, "out of memory for %lld x %lld scratch", (long long)M,
                        (long long)F);
    return QVL_OK;
}
