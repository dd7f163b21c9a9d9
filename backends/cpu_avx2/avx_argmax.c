/* ARGMAX(x [R, V]) -> [R] i32 (ops.h): one pass for the largest value and the NaN / +inf check,
 * 8 lanes at a time, then one for its first index (which stops there). Rows go to the pool's
 * threads; a row that is not contiguous f32 is gathered into the thread's scratch first. */
#include <immintrin.h>
#include <math.h>

#include "avx_common.h"
#include "avx_kernels.h"
#include "avx_math.h"

static int32_t argmax_row(const float *x, int64_t n) {
    const __m256 pinf = _mm256_set1_ps(INFINITY);
    __m256 vmax = _mm256_set1_ps(-INFINITY), bad = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, pinf, _CMP_EQ_OQ));
        vmax = _mm256_max_ps(vmax, v);
    }
    if (_mm256_movemask_ps(bad)) return -1;
    float m = avx_hmax(vmax);
    for (; i < n; i++) {
        if (isnan(x[i]) || x[i] == INFINITY) return -1;
        if (x[i] > m) m = x[i];
    }
    if (m == -INFINITY) return -1; /* nothing above -inf */
    const __m256 vm = _mm256_set1_ps(m);
    for (i = 0; i + 8 <= n; i += 8) {
        int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vm, _CMP_EQ_OQ));
        if (hit) return (int32_t)(i + __builtin_ctz((unsigned)hit));
    }
    for (; i < n; i++)
        if (x[i] == m) return (int32_t)i;
    return -1; /* not reached: m is one of the values */
}

typedef struct argmax_job {
    const qvl_node *n;
    int64_t V;
} argmax_job;

static void argmax_one(void *ctx, int64_t r, float *scratch) {
    const argmax_job *j = ctx;
    const qvl_tensor *x = j->n->src[0];
    int64_t off = avx_row_offset(&x->desc, r), step = x->desc.stride[x->desc.ndim - 1];
    const float *row = (const float *)x->data + off;
    if (step != 1) {
        avx_gather(x, off, step, j->V, scratch);
        row = scratch;
    }
    ((int32_t *)j->n->dst->data)[r] = argmax_row(row, j->V);
}

qvl_status avx_argmax(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *x = n->src[0];
    argmax_job j = {n, avx_row_len(&x->desc)};
    s = avx_for_rows(be, avx_n_rows(&x->desc), j.V, argmax_one, &j);
    if (s != QVL_OK) return avx_fail(n, err, s, "out of memory");
    return QVL_OK;
}
