/* Fused ATTENTION with an online softmax, so the [N, L] score matrix never exists. Every mask
 * leaves each query one contiguous range of visible keys: causal [0, n_past + i + 1), segments
 * [start, end) of the query's segment, none [0, L).
 *
 * Two paths:
 *  - few queries (decode, here): per (head, query) a single pass over the visible keys in
 *    blocks of 64 (scores, block max, rescale of the running sum and output, exp, accumulate
 *    v);
 *  - many queries (prefill, the vision tower): register tiles over chunks of keys
 *    (avx_attention_tiled.c).
 *
 * Precision of this path. Scores: dot products accumulated in double and rounded once to f32,
 * then scaled in f32: what the reference computes (a product of two f32 is exact in double),
 * so a score differs from the reference's by at most 1 ulp of f32. Few queries do little
 * arithmetic per key read, so the double sums cost little here; the tiled path, where the
 * arithmetic is the cost, sums in f32 (see there). Softmax and the weighted sum of v: f32,
 * with avx_exp_nonpos (avx_exp's values for s - max <= 0, 1.2e-7 relative). */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx_attention.h"
#include "avx_kernels.h"
#include "avx_math.h"

#define KEY_BLOCK 64
#define MANY_QUERIES 8 /* from this many queries the tiled path */

qvl_status avx_segment_ids(const qvl_node *n, const qvl_tensor *seg, int64_t len, int32_t *id,
                           qvl_error *err) {
    return qvl_check_segments(AVX_NAME, n, seg->data, seg->desc.shape[0], seg->desc.stride[0],
                              len, id, err);
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

const float *avx_attn_row(const qvl_tensor *t, int64_t j, int64_t g, int64_t D, float *buf) {
    const qvl_tensor_desc *d = &t->desc;
    int64_t off = j * d->stride[0] + g * d->stride[1];
    if (d->dtype == QVL_F32 && (d->stride[2] == 1 || D == 1)) return (const float *)t->data + off;
    avx_gather(t, off, d->stride[2], D, buf);
    return buf;
}

void avx_attn_visible(const attn_job *jb, int64_t i, int64_t *lo, int64_t *hi) {
    const qvl_attention_params *p = &jb->n->params.attention;
    *lo = 0;
    *hi = jb->L;
    if (p->mask == QVL_MASK_CAUSAL || p->mask == QVL_MASK_CAUSAL_AT) {
        int64_t last = jb->n_past + i + 1;
        *hi = last < *hi ? (last < 0 ? 0 : last) : *hi;
    } else if (p->mask == QVL_MASK_SEGMENTS) {
        *lo = jb->seg_lo[i];
        *hi = jb->seg_hi[i];
    }
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

    int64_t lo, hi;
    avx_attn_visible(jb, i, &lo, &hi);
    if (hi <= lo) { /* nothing visible: the row of probabilities is all 0 */
        memset(o, 0, (size_t)D * sizeof *o);
        return;
    }
    const float *qr = avx_attn_row(q, i, h, D, qbuf);
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)D * sizeof *acc);
    for (int64_t j0 = lo; j0 < hi; j0 += KEY_BLOCK) {
        int64_t nb = hi - j0 < KEY_BLOCK ? hi - j0 : KEY_BLOCK;
        float bmax = -INFINITY;
        for (int64_t t = 0; t < nb; t++) {
            sc[t] = (float)dot_d(qr, avx_attn_row(k, j0 + t, g, D, kbuf), D) * p->scale;
            bmax = sc[t] > bmax ? sc[t] : bmax;
        }
        float new_m = bmax > m ? bmax : m;
        if (new_m == -INFINITY) continue; /* every score so far is -inf */
        float corr =
            m == -INFINITY ? 0.0f : _mm256_cvtss_f32(avx_exp_nonpos(_mm256_set1_ps(m - new_m)));
        int64_t t = 0;
        for (; t + 8 <= nb; t += 8)
            _mm256_storeu_ps(sc + t, avx_exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(sc + t),
                                                                   _mm256_set1_ps(new_m))));
        for (; t < nb; t++) sc[t] = _mm256_cvtss_f32(avx_exp_nonpos(_mm256_set1_ps(sc[t] - new_m)));
        float bsum = 0.0f;
        for (t = 0; t < nb; t++) bsum += sc[t];
        l = l * corr + bsum;
        for (t = 0; t < nb; t++) {
            scale_add(acc, t == 0 ? corr : 1.0f, sc[t], avx_attn_row(v, j0 + t, g, D, vbuf), D);
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
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *q = n->src[0], *k = n->src[1];
    attn_job jb = {.n = n, .N = q->desc.shape[0], .Hq = q->desc.shape[1], .D = q->desc.shape[2],
                   .L = k->desc.shape[0]};
    jb.group = jb.Hq / k->desc.shape[1];
    jb.n_past = n->params.attention.n_past;
    if (n->params.attention.mask == QVL_MASK_CAUSAL_AT) {
        /* rows past at + N of the cache are not written yet: hi never goes past them */
        jb.n_past = qvl_elem_get_i32(n->src[3], 0);
        if ((s = qvl_check_at(AVX_NAME, n, jb.n_past, jb.N, jb.L, "queries", err)) != QVL_OK)
            return s;
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
    if (jb.N >= MANY_QUERIES)
        s = avx_for_rows(be, avx_attn_tiled_items(&jb), avx_attn_tiled_scratch(&jb),
                         avx_attn_tiled_item, &jb);
    else
        s = avx_for_rows(be, jb.Hq * jb.N, 4 * jb.D + KEY_BLOCK, attn_item, &jb);
    if (s != QVL_OK) s = avx_fail(n, err, s, "out of memory for head size %lld", (long long)jb.D);
done:
    free(ids);
    free(seg_lo);
    free(seg_hi);
    return s;
}

/* ---- ATTENTION_SLOTS: one query per sequence, each over its own slot of the pooled cache ---- */

typedef struct slots_job {
    attn_job *rows; /* per row: the single-query job over its slot (N = 1) */
    int64_t Hq;
} slots_job;

static void slots_item(void *ctx, int64_t item, float *scratch) {
    const slots_job *sj = ctx;
    attn_item(&sj->rows[item / sj->Hq], item % sj->Hq, scratch);
}

/* All rows' heads in one parallel pass (not a pass per row): a decode step of N sequences
 * has only N x Hq (query, head) items to share out between the threads. */
qvl_status avx_attention_slots(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    if (s != QVL_OK) return s;
    const qvl_tensor *q = n->src[0];
    const int64_t N = q->desc.shape[0], Hq = q->desc.shape[1], D = q->desc.shape[2];
    qvl_slot_row *rows = malloc((size_t)N * sizeof *rows);
    attn_job *jobs = malloc((size_t)N * sizeof *jobs);
    if (!rows || !jobs) {
        s = avx_fail(n, err, QVL_E_NOMEM, "out of memory for %lld rows", (long long)N);
        goto done;
    }
    for (int64_t i = 0; i < N && s == QVL_OK; i++) {
        if ((s = qvl_slot_row_node(AVX_NAME, n, i, &rows[i], err)) != QVL_OK) break;
        const qvl_tensor *k = rows[i].node.src[1];
        jobs[i] = (attn_job){.n = &rows[i].node, .N = 1, .Hq = Hq, .D = D, .L = k->desc.shape[0],
                             .group = Hq / k->desc.shape[1], .n_past = rows[i].at_value};
    }
    if (s == QVL_OK) {
        slots_job sj = {jobs, Hq};
        s = avx_for_rows(be, N * Hq, 4 * D + KEY_BLOCK, slots_item, &sj);
        if (s != QVL_OK) s = avx_fail(n, err, s, "out of memory for head size %lld", (long long)D);
    }
done:
    free(rows);
    free(jobs);
    return s;
}

qvl_status avx_store_slot_rows(qvl_backend *be, const qvl_node *n, qvl_error *err) {
    qvl_status s = avx_begin(be, n, err);
    return s != QVL_OK ? s : qvl_run_slot_rows(AVX_NAME, be, n, avx_store_rows_at, err);
}
