/* MATMUL: a . w^T (+ bias), with 2-D weights or 3-D (batched, grouped) weights. */
#include <stdlib.h>

#include "qvl/checked.h"
#include "ref_ops.h"
#include "ref_math.h"

float *ref_scratch(int64_t n) {
    size_t bytes;
    if (n < 1) n = 1;
    if (!qvl_mul_size((size_t)n, sizeof(float), &bytes)) return NULL;
    return malloc(bytes);
}

ref_matrix ref_matrix_of(const qvl_tensor *w, int64_t batch) {
    const qvl_tensor_desc *d = &w->desc;
    int r = d->ndim - 2, c = d->ndim - 1; /* the two innermost dims */
    ref_matrix m = {
        .t = w,
        .off = d->ndim == 3 ? batch * d->stride[0] : 0,
        .rows = d->shape[r],
        .cols = d->shape[c],
        .row_stride = d->stride[r],
        .col_stride = d->stride[c],
    };
    return m;
}

double ref_dot(const float *x, const float *y, int64_t n) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; i++) acc += (double)x[i] * (double)y[i];
    return acc;
}

void ref_linear(const float *a, int64_t M, const ref_matrix *w, const float *bias,
                float *w_row, float *out, int64_t ldo) {
    /* Weight row by weight row, so each row is converted from its dtype once. */
    for (int64_t j = 0; j < w->rows; j++) {
        qvl_elem_gather(w->t, w->off + j * w->row_stride, w->col_stride, w->cols, w_row);
        for (int64_t m = 0; m < M; m++) {
            double acc = ref_dot(a + m * w->cols, w_row, w->cols);
            if (bias) acc += bias[j];
            out[m * ldo + j] = (float)acc;
        }
    }
}

/* Inputs: 0 a [..., K], 1 w [N, K] or [Bw, N, K], 2 bias [N] (2-D w only). */

qvl_status ref_matmul(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *a = n->src[0], *w = n->src[1], *bias = qvl_node_src(n, 2);
    int64_t K = qvl_desc_row_len(&a->desc), rows = qvl_desc_n_rows(&a->desc);
    int64_t N = w->desc.shape[w->desc.ndim - 2];
    /* 2-D w: one batch of all rows. 3-D w: batch b of a uses w batch b / (B / Bw). */
    int64_t batches = w->desc.ndim == 3 ? a->desc.shape[0] : 1;
    int64_t per_w = w->desc.ndim == 3 ? batches / w->desc.shape[0] : 1;
    int64_t M = rows / batches;

    float *a32 = ref_scratch(rows * K), *w_row = ref_scratch(K);
    float *b32 = bias ? ref_scratch(N) : NULL;
    if (!a32 || !w_row || (bias && !b32)) {
        s = ref_fail(n, err, QVL_E_NOMEM, "out of memory for %lld x %lld scratch",
                     (long long)rows, (long long)K);
        goto done;
    }
    qvl_tensor_read_rows(a, a32);
    if (bias) qvl_tensor_read_row(bias, 0, b32);
    float *out = n->dst->data;
    for (int64_t b = 0; b < batches; b++) {
        ref_matrix wm = ref_matrix_of(w, b / per_w);
        ref_linear(a32 + b * M * K, M, &wm, b32, w_row, out + b * M * N, N);
    }
done:
    free(a32);
    free(w_row);
    free(b32);
    return s;
}
