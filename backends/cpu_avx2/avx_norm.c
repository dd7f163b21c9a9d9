/* RMS_NORM and LAYER_NORM over the innermost dim: statistics with 4 vector accumulators
 * (f32; ~1e-7 relative for rows of thousands), then one vector pass. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "avx_kernels.h"
#include "avx_math.h"

/* sum of x[i] * y[i] with the tail masked */
static float dot_f32(const float *x, const float *y, int64_t n) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int u = 0; u < 4; u++)
            acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * u), _mm256_loadu_ps(y + i + 8 * u),
                                     acc[u]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    if (i < n) {
        __m256i m = avx_tail_mask((int)(n - i));
        acc[1] = _mm256_fmadd_ps(_mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m), acc[1]);
    }
    return avx_hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void avx_rms_norm_row(float *y, const float *x, const float *gamma, int64_t n, float eps) {
    float ss = dot_f32(x, x, n);
    float inv = (float)(1.0 / sqrt((double)ss / (double)n + (double)eps));
    __m256 vi = _mm256_set1_ps(inv);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vi),
                                              _mm256_loadu_ps(gamma + i)));
    for (; i < n; i++) y[i] = (x[i] * inv) * gamma[i];
}

void avx_layer_norm_row(float *y, const float *x, const float *gamma, const float *beta,
                        int64_t n, float eps) {
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + i));
    float sum = avx_hsum(s);
    for (; i < n; i++) sum += x[i];
    float mean = sum / (float)n;
    __m256 vm = _mm256_set1_ps(mean), d2 = _mm256_setzero_ps();
    float dev = 0.0f;
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
        d2 = _mm256_fmadd_ps(d, d, d2);
    }
    dev = avx_hsum(d2);
    for (; i < n; i++) dev += (x[i] - mean) * (x[i] - mean);
    float inv = (float)(1.0 / sqrt((double)dev / (double)n + (double)eps));
    __m256 vi = _mm256_set1_ps(inv);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi),
                                 _mm256_loadu_ps(gamma + i));
        if (beta) v = _mm256_add_ps(v, _mm256_loadu_ps(beta + i));
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        float v = (x[i] - mean) * inv * gamma[i];
        y[i] = beta ? v + beta[i] : v;
    }
}

typedef struct norm_job {
    const qvl_tensor *x;
    const float *gamma, *beta;
    float eps;
    int layer;
    float *out;
    int64_t D;
} norm_job;

static void norm_one(void *ctx, int64_t r, float *scratch) {
    norm_job *j = ctx;
    const float *row = avx_row(j->x, r, scratch);
    if (j->layer) avx_layer_norm_row(j->out + r * j->D, row, j->gamma, j->beta, j->D, j->eps);
    else avx_rms_norm_row(j->out + r * j->D, row, j->gamma, j->D, j->eps);
}

static qvl_status run_norm(qvl_backend *be, const qvl_node *n, int layer, qvl_error *err) {
    const qvl_tensor *x = n->src[0], *gamma = n->src[1], *beta = layer ? qvl_node_src(n, 2) : NULL;
    int64_t D = avx_row_len(&x->desc);
    float *g32 = avx_scratch(D), *b32 = avx_scratch(D);
    qvl_status s = QVL_OK;
    if (!g32 || !b32) {
        s = QVL_E_NOMEM;
    } else {
        avx_gather(gamma, 0, gamma->desc.stride[0], D, g32);
        if (beta) avx_gather(beta, 0, beta->desc.stride[0], D, b32);
        norm_job j = {x, g32, beta ? b32 : NULL, n->params.norm.eps, layer, n->dst->data, D};
        s = avx_for_rows(be, avx_n_rows(&x->desc), D, norm_one, &j);
    }
    free(g32);
    free(b32);
    if (s != QVL_OK) return avx_fail(n, err, s, "out of memory for rows of %lld", (long long)D);
    return QVL_OK;
}

qvl_status avx_rms_norm(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : run_norm(be, n, 0, err);
}

qvl_status avx_layer_norm(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : run_norm(be, n, 1, err);
}
