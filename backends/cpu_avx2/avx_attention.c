/* Fused ATTENTION with an online softmax: per (head, query) a single pass over the visible
 * keys in blocks of 64 (scores, block max, rescale of the running sum and output, exp,
 * accumulate v), so the [N, L] score matrix never exists. Every mask leaves each query one
 * contiguous range of visible keys: causal [0, n_past + i + 1), segments [start, end) of the
 * query's segment, none [0, L). (head, query) pairs are split across threads.
 *
 * Versus the reference (scores for all keys, softmax with a double sum, then the products):
 * scores are computed the same way (double dot, see dot_d); the softmax and the weighted sum
 * of v are reassociated, with f32 sums and avx_exp (1.2e-7 relative): ~1e-6 relative. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx_kernels.h"
#include "avx_math.h"
#include "ref_access.h"

#define KEY_BLOCK 64

qvl_status avx_segment_ids(const qvl_node *n, const qvl_tensor *seg, int64_t len, int32_t *id,
                           qvl_error *err) {
    int64_t bounds = seg->desc.shape[0], step = seg->desc.stride[0];
    if (ref_get_i32(seg, 0) != 0 || ref_get_i32(seg, (bounds - 1) * step) != len)
        return avx_fail(n, err, QVL_E_INVALID, "segments must start at 0 and end at %lld",
                        (long long)len);
    for (int64_t g = 0; g + 1 < bounds; g++)
        if (ref_get_i32(seg, (g + 1) * step) < ref_get_i32(seg, g * step))
            return avx_fail(n, err, QVL_E_INVALID, "segment bounds decrease at %lld",
                            (long long)g + 1);
    for (int64_t g = 0; g + 1 < bounds; g++)
        for (int32_t i = ref_get_i32(seg, g * step); i < ref_get_i32(seg, (g + 1) * step); i++)
            id[i] = (int32_t)g;
    return QVL_OK;
}

/* sum x[i] * y[i] accumulated in double: attention scores can be large (hundreds, with
 * random weights thousands), and softmax turns an absolute score error into the same
 * relative error of the probabilities, so scores are computed as the reference computes
 * them (a double dot product rounded once to f32) and agree with it to the last bit or so. */
static inline double dot_d(const float *x, const float *y, int64_t n) {
    __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i), yv = _mm256_loadu_ps(y + i);
        a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(xv)),
                             _mm256_cvtps_pd(_mm256_castps256_ps128(yv)), a0);
        a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(xv, 1)),
                             _mm256_cvtps_pd(_mm256_extractf128_ps(yv, 1)), a1);
    }
    __m256d s4 = _mm256_add_pd(a0, a1);
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
    for (; i < n; i++) sum += (double)x[i] * (double)y[i];
    return sum;
}

/* acc = acc * c + p * v over n */
static inline void scale_add(float *acc, float c, float p, const float *v, int64_t n) {
    __m256 vc = _mm256_set1_ps(c), vp = _mm256_set1_ps(p);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, _mm256_loadu_ps(v + i),
                                                  _mm256_mul_ps(vc, _mm256_loadu_ps(acc + i))));
    for (; i < n; i++) acc[i] = acc[i] * c + p * v[i];
}

typedef struct attn_job {
    const qvl_node *n;
    int64_t N, Hq, D, L, group;
    int64_t n_past;                 /* causal masks: from params, or read from `at` */
    const int32_t *seg_lo, *seg_hi; /* per query, for segment masks */
} attn_job;

/* Head g of key/value row j as f32: in place when possible, else converted into buf. */
static const float *kv_row(const qvl_tensor *t, int64_t j, int64_t g, int64_t D, float *buf) {
    const qvl_tensor_desc *d = &t->desc;
    int64_t off = j * d->stride[0] + g * d->stride[1];
    if (d->dtype == QVL_F32 && (d->stride[2] == 1 || D == 1)) return (const float *)t->data + off;
    avx_gather(t, off, d->stride[2], D, buf);
    return buf;
}

/* scratch: q [D], k [D], v [D], acc [D], scores [KEY_BLOCK] */
static void attn_item(void *ctx, int64_t item, float *scratch) {
    attn_job *jb = ctx;
    const qvl_node *n = jb->n;
    const qvl_attention_params *p = &n->params.attention;
    const qvl_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const int64_t D = jb->D, h = item / jb->N, i = item % jb->N, g = h / jb->group;
    float *qbuf = scratch, *kbuf = scratch + D, *vbuf = scratch + 2 * D, *acc = scratch + 3 * D;
    float *sc = scratch + 4 * D;
    float *o = (float *)n->dst->data + (i * jb->Hq + h) * D;

    int64_t lo = 0, hi = jb->L;
    if (p->mask == QVL_MASK_CAUSAL || p->mask == QVL_MASK_CAUSAL_AT) {
        int64_t last = jb->n_past + i; /* keys j <= n_past + i are visible */
        hi = last + 1 < hi ? last + 1 : hi;
        if (hi < 0) hi = 0;
    } else if (p->mask == QVL_MASK_SEGMENTS) {
        lo = jb->seg_lo[i];
        hi = jb->seg_hi[i];
    }
    if (hi <= lo) { /* nothing visible: the row of probabilities is all 0 */
        memset(o, 0, (size_t)D * sizeof *o);
        return;
    }
    const float *qr = kv_row(q, i, h, D, qbuf);
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)D * sizeof *acc);
    for (int64_t j0 = lo; j0 < hi; j0 += KEY_BLOCK) {
        int64_t nb = hi - j0 < KEY_BLOCK ? hi - j0 : KEY_BLOCK;
        float bmax = -INFINITY;
        for (int64_t t = 0; t < nb; t++) {
            sc[t] = (float)dot_d(qr, kv_row(k, j0 + t, g, D, kbuf), D) * p->scale;
            bmax = sc[t] > bmax ? sc[t] : bmax;
        }
        float new_m = bmax > m ? bmax : m;
        if (new_m == -INFINITY) continue; /* every score so far is -inf */
        float corr = m == -INFINITY ? 0.0f : _mm256_cvtss_f32(avx_exp(_mm256_set1_ps(m - new_m)));
        int64_t t = 0;
        for (; t + 8 <= nb; t += 8)
            _mm256_storeu_ps(sc + t, avx_exp(_mm256_sub_ps(_mm256_loadu_ps(sc + t), _mm256_set1_ps(new_m))));
        for (; t < nb; t++) sc[t] = _mm256_cvtss_f32(avx_exp(_mm256_set1_ps(sc[t] - new_m)));
        float bsum = 0.0f;
        for (t = 0; t < nb; t++) bsum += sc[t];
        l = l * corr + bsum;
        for (t = 0; t < nb; t++) {
            scale_add(acc, t == 0 ? corr : 1.0f, sc[t], kv_row(v, j0 + t, g, D, vbuf), D);
        }
        m = new_m;
    }
    if (!(l > 0.0f)) {
        memset(o, 0, (size_t)D * sizeof *o);
        return;
    }
    float inv = 1.0f / l;
    for (int64_t d = 0; d < D; d++) o[d] = acc[d] * inv;
}

qvl_status avx_attention(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(n, ref_check_attention, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *q = n->src[0], *k = n->src[1];
    attn_job jb = {.n = n, .N = q->desc.shape[0], .Hq = q->desc.shape[1], .D = q->desc.shape[2],
                   .L = k->desc.shape[0]};
    jb.group = jb.Hq / k->desc.shape[1];
    jb.n_past = n->params.attention.n_past;
    if (n->params.attention.mask == QVL_MASK_CAUSAL_AT) {
        /* rows past at + N of the cache are not written yet: hi never goes past them */
        jb.n_past = ref_get_i32(n->src[3], 0);
        if (jb.n_past < 0 || jb.n_past > jb.L - jb.N)
            return avx_fail(n, err, QVL_E_INVALID, "at = %lld: %lld + %lld queries exceed %lld keys",
                            (long long)jb.n_past, (long long)jb.n_past, (long long)jb.N,
                            (long long)jb.L);
    }
    int32_t *ids = NULL, *seg_lo = NULL, *seg_hi = NULL;
    if (n->params.attention.mask == QVL_MASK_SEGMENTS) {
        ids = malloc((size_t)jb.N * sizeof *ids);
        seg_lo = malloc((size_t)jb.N * sizeof *seg_lo);
        seg_hi = malloc((size_t)jb.N * sizeof *seg_hi);
        if (!ids || !seg_lo || !seg_hi) {
            s = avx_fail(n, err, QVL_E_NOMEM, "out of memory for %lld segment ids", (long long)jb.N);
            goto done;
        }
        if ((s = avx_segment_ids(n, n->src[3], jb.N, ids, err)) != QVL_OK) goto done;
        /* segments are contiguous runs of equal ids */
        for (int64_t i = 0; i < jb.N; i++)
            seg_lo[i] = i > 0 && ids[i - 1] == ids[i] ? seg_lo[i - 1] : (int32_t)i;
        for (int64_t i = jb.N - 1; i >= 0; i--)
            seg_hi[i] = i + 1 < jb.N && ids[i + 1] == ids[i] ? seg_hi[i + 1] : (int32_t)(i + 1);
        jb.seg_lo = seg_lo;
        jb.seg_hi = seg_hi;
    }
    s = avx_for_rows(be, jb.Hq * jb.N, 4 * jb.D + KEY_BLOCK, attn_item, &jb);
    if (s != QVL_OK) s = avx_fail(n, err, s, "out of memory for head size %lld", (long long)jb.D);
done:
    free(ids);
    free(seg_lo);
    free(seg_hi);
    return s;
}
