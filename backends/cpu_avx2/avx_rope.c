/* ROPE: the angles exactly as the reference computes them (f32 powf, cosf, sinf: the values
 * are bit-identical), the rotation of every head vectorised. Tokens are split across
 * threads. NORM_ROPE: each head RMS-normalised (avx_rms_norm_row) before its rotation. */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "avx_kernels.h"

static int mrope_owner(int64_t j, const int32_t sections[4]) {
    if (j % 3 == 1 && j < 3 * (int64_t)sections[1]) return 1;
    if (j % 3 == 2 && j < 3 * (int64_t)sections[2]) return 2;
    return 0;
}

typedef struct rope_job {
    const qvl_node *n;
    const float *freq;
    const int *pos_row;
    const float *gamma; /* NORM_ROPE: gamma as f32; NULL for ROPE */
    float eps;
} rope_job;

/* scratch: cos [half], sin [half], one head [D] */
static void rope_token(void *ctx, int64_t t, float *scratch) {
    rope_job *j = ctx;
    const qvl_tensor *x = j->n->src[0], *pos = j->n->src[1];
    int64_t H = x->desc.shape[1], D = x->desc.shape[2], half = D / 2;
    float *cs = scratch, *sn = scratch + half, *row = scratch + 2 * half;
    for (int64_t k = 0; k < half; k++) {
        int32_t p = qvl_elem_get_i32(pos, j->pos_row[k] * pos->desc.stride[0] + t * pos->desc.stride[1]);
        float angle = (float)p * j->freq[k];
        cs[k] = cosf(angle);
        sn[k] = sinf(angle);
    }
    for (int64_t h = 0; h < H; h++) {
        const float *in = row;
        int64_t off = t * x->desc.stride[0] + h * x->desc.stride[1];
        bool aliased = x->data == j->n->dst->data; /* then read a copy of the head first */
        if (x->desc.dtype == QVL_F32 && x->desc.stride[2] == 1 && !aliased)
            in = (const float *)x->data + off;
        else avx_gather(x, off, x->desc.stride[2], D, row);
        if (j->gamma) {
            avx_rms_norm_row(row, in, j->gamma, D, j->eps);
            in = row;
        }
        float *o = (float *)j->n->dst->data + (t * H + h) * D;
        int64_t k = 0;
        for (; k + 8 <= half; k += 8) {
            __m256 a = _mm256_loadu_ps(in + k), b = _mm256_loadu_ps(in + k + half);
            __m256 c = _mm256_loadu_ps(cs + k), s = _mm256_loadu_ps(sn + k);
            /* a*c - b*s and b*c + a*s, rounded like the reference (no fused multiply-add) */
            _mm256_storeu_ps(o + k, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
            _mm256_storeu_ps(o + k + half, _mm256_add_ps(_mm256_mul_ps(b, c), _mm256_mul_ps(a, s)));
        }
        for (; k < half; k++) {
            float a = in[k], b = in[k + half];
            float ac = a * cs[k], bs = b * sn[k], bc = b * cs[k], as = a * sn[k];
            o[k] = ac - bs;
            o[k + half] = bc + as;
        }
    }
}

static qvl_status run_rope(qvl_backend *be, const qvl_node *n, const qvl_rope_params *p,
                           const qvl_tensor *gamma, float eps, qvl_error *err) {
    qvl_status s;
    int64_t D = n->src[0]->desc.shape[2], half = D / 2;
    float *freq = avx_scratch(half), *g32 = gamma ? avx_scratch(D) : NULL;
    int *pos_row = malloc((size_t)(half > 0 ? half : 1) * sizeof *pos_row);
    if (freq && pos_row && (!gamma || g32)) {
        if (gamma) avx_gather(gamma, 0, gamma->desc.stride[0], D, g32);
        for (int64_t k = 0; k < half; k++) {
            if (p->mode == QVL_ROPE_VISION_2D) {
                int64_t Q = D / 4;
                freq[k] = 1.0f / powf(p->theta, (float)(k % Q) / (float)Q);
                pos_row[k] = k < Q ? 0 : 1;
            } else {
                freq[k] = 1.0f / powf(p->theta, (float)(2 * k) / (float)D);
                pos_row[k] = p->mode == QVL_ROPE_MROPE_INTERLEAVED ? mrope_owner(k, p->sections) : 0;
            }
        }
        rope_job j = {n, freq, pos_row, g32, eps};
        s = avx_for_rows(be, n->src[0]->desc.shape[0], 2 * half + D, rope_token, &j);
    } else {
        s = QVL_E_NOMEM;
    }
    free(freq);
    free(g32);
    free(pos_row);
    if (s != QVL_OK) return avx_fail(n, err, s, "out of memory for head size %lld", (long long)D);
    return QVL_OK;
}

qvl_status avx_rope(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : run_rope(be, n, &n->params.rope, NULL, 0.0f, err);
}

qvl_status avx_norm_rope(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    qvl_rope_params rope = qvl_norm_rope_rope(&n->params.norm_rope);
    return run_rope(be, n, &rope, n->src[2], n->params.norm_rope.eps, err);
}
