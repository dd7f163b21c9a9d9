/* RMS_NORM and LAYER_NORM over the innermost dimension. */
#include <math.h>
#include <stdlib.h>

#include "ref_ops.h"
#include "ref_math.h"

void ref_rms_norm_row(float *y, const float *x, const float *gamma, int64_t n, float eps) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; i++) sum_sq += (double)x[i] * (double)x[i];
    float inv_rms = (float)(1.0 / sqrt(sum_sq / (double)n + (double)eps));
    /* Like HF: normalize in f32, then apply the weight. */
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] * inv_rms) * gamma[i];
}

void ref_layer_norm_row(float *y, const float *x, const float *gamma, const float *beta,
                        int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    double mean = sum / (double)n;
    double sum_dev = 0.0; /* two passes: the variance does not lose digits to the mean */
    for (int64_t i = 0; i < n; i++) sum_dev += ((double)x[i] - mean) * ((double)x[i] - mean);
    float inv_std = (float)(1.0 / sqrt(sum_dev / (double)n + (double)eps)); /* biased var */
    float mean32 = (float)mean;
    for (int64_t i = 0; i < n; i++) {
        float v = (x[i] - mean32) * inv_std * gamma[i];
        y[i] = beta ? v + beta[i] : v;
    }
}

/* Inputs: 0 x [..., D], 1 gamma [D], 2 beta [D] (layer norm only, optional). */


static qvl_status run_norm(const qvl_node *n, int layer, qvl_error *err) {
    const qvl_tensor *x = n->src[0], *gamma = n->src[1], *beta = layer ? qvl_node_src(n, 2) : NULL;
    int64_t D = qvl_desc_row_len(&x->desc), rows = qvl_desc_n_rows(&x->desc);
    float *g32 = ref_scratch(D), *b32 = ref_scratch(D), *row = ref_scratch(D);
    qvl_status s = QVL_OK;
    if (!g32 || !b32 || !row) {
        s = ref_fail(n, err, QVL_E_NOMEM, "out of memory for rows of %lld", (long long)D);
        goto done;
    }
    qvl_tensor_read_row(gamma, 0, g32);
    if (beta) qvl_tensor_read_row(beta, 0, b32);
    float *out = n->dst->data;
    for (int64_t r = 0; r < rows; r++) {
        qvl_tensor_read_row(x, r, row);
        if (layer)
            ref_layer_norm_row(out + r * D, row, g32, beta ? b32 : NULL, D, n->params.norm.eps);
        else
            ref_rms_norm_row(out + r * D, row, g32, D, n->params.norm.eps);
    }
done:
    free(g32);
    free(b32);
    free(row);
    return s;
}

qvl_status ref_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : run_norm(n, 0, err);
}

qvl_status ref_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = ref_begin(be, n, err);
    return s != QVL_OK ? s : run_norm(n, 1, err);
}
