/* Fused ATTENTION with an online softmax, so the [N, L] score matrix never exists. Every mask
 * leaves each query one contiguous range of visible keys: causal [0, n_past + i + 1), segments
 * [start, end) of the query's segment, none [0, L).
 *
 * Two paths:
 *  - few queries (decode): per (head, query) a single pass over the visible keys in blocks of
 *    64 (scores, block max, rescale of the running sum and output, exp, accumulate v);
 *  - many queries (prefill, the vision tower): per (head, block of queries: all of them up to
 *    QB_ELEMS / D) the keys go by in chunks of KC; each chunk is packed once (K transposed
 *    into a [D, KC] panel, V as padded rows), shared by all the block's queries. Per tile of
 *    MR = 6 queries both products are register-tiled like the GEMM: scores 6 queries x 8 keys,
 *    then, after the tile's softmax update, outputs 6 queries x 16 columns over the keys that
 *    any of the 6 sees. Keys no query of a tile sees are skipped in whole NR-key groups.
 *
 * Precision. Scores: dot products accumulated in double and rounded once to f32, then scaled
 * in f32, on both paths: what the reference computes (a product of two f32 is exact in
 * double), so a score differs from the reference's by at most 1 ulp of f32 (the double sums
 * are reassociated: 6 query rows x 8 keys per tile, summed in d order). Why not f32 sums: the
 * softmax turns an absolute score error into the same relative error of the probabilities,
 * and with random weights |q.k| * scale reaches hundreds: an f32 sum over D = 64 dimensions
 * then misses by ~3e-5 (|q|, |k| <= 20 in the test), which moved outputs by 1.3e-5-1.4e-5
 * against the tests' 1.1e-5, even with the sums taken in f32 blocks of 8 dimensions and the
 * block sums in double. Softmax and the weighted sum of v: f32, reassociated (f32 sums over
 * keys in key order within a chunk, rescaled per chunk), with avx_exp (1.2e-7 relative): ~1e-6
 * relative versus the reference; tests/test_cpu_avx2_ops.c checks 1e-5 of the output's scale,
 * with scores in the hundreds included. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx_kernels.h"
#include "avx_math.h"

#define KEY_BLOCK 64

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

/* Visible key range [*lo, *hi) of query i: causal [0, n_past + i + 1), segments the query's
 * own segment, none [0, L); empty when hi <= lo. */
static void visible(const attn_job *jb, int64_t i, int64_t *lo, int64_t *hi) {
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
    visible(jb, i, &lo, &hi);
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

/* ---- the blocked path (many queries) ---- */

#define MR 6         /* query rows of a register tile (the #pragma unroll counts say 6 too) */
#define NR 16        /* output columns of a values tile (2 ymm); scores tiles are 8 keys wide */
#define QB_ELEMS 65536 /* queries x head size per work item at most (512 KB of q as doubles,
                          256 KB of outputs: L2); the item's queries share each key panel */
#define KC 256       /* keys per chunk (a multiple of NR) */
#define KT_STRIDE (KC + 8) /* panel row stride in doubles: not a multiple of 4 KiB (cache sets) */
#define MANY_QUERIES 8

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Queries per item: the N queries split evenly into blocks of at most QB_ELEMS / D, rounded up
 * to whole MR-row tiles. */
static int64_t block_rows(int64_t N, int64_t D) {
    int64_t most = QB_ELEMS / D > MR ? QB_ELEMS / D : MR;
    int64_t n_blocks = (N + most - 1) / most;
    return round_up((N + n_blocks - 1) / n_blocks, MR);
}

/* Floats of scratch one blocked item needs (see attn_block_item for the layout). */
static int64_t block_scratch(int64_t N, int64_t D) {
    int64_t Dp = round_up(D, NR), qb = block_rows(N, D);
    return 2 * D * KT_STRIDE /* kt: [D][KC] keys transposed as doubles, rows KT_STRIDE apart */
           + KC * Dp      /* v chunk as f32 rows, padded to whole NR column groups */
           + MR * KC      /* scores, then probabilities, of one tile of MR queries */
           + qb * Dp      /* output accumulators */
           + 2 * qb       /* running max and sum */
           + 2 * qb * D   /* q rows as doubles */
           + 8;           /* slack for the 32-byte alignment */
}

/* c[r][0:16] += sum over t < n of a[r][t] * b[t][0:16] for MR rows r: one f32 FMA chain per
 * output in t order (a rows lda apart, b rows ldb apart, c rows ldc apart). The values
 * product: a = the probabilities, b = the V rows, t = keys. */
static void tile_values(const float *a, int64_t lda, const float *b, int64_t ldb, int64_t n,
                        float *c, int64_t ldc) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = _mm256_loadu_ps(c + r * ldc);
        acc[r][1] = _mm256_loadu_ps(c + r * ldc + 8);
    }
    for (int64_t t = 0; t < n; t++) {
        __m256 b0 = _mm256_loadu_ps(b + t * ldb), b1 = _mm256_loadu_ps(b + t * ldb + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 av = _mm256_broadcast_ss(a + r * lda + t);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

/* s[r][0:8] = scale * (float)(q_r . k_j) for MR query rows qd (doubles, D apart) and the 8
 * keys of the K^T panel kt (doubles, rows KT_STRIDE apart): the products of two f32 are exact
 * in double and the sums are double FMA chains, rounded once to f32 (see the precision note
 * at the top of the file). */
static void tile_scores(const double *qd, int64_t D, const double *kt, float scale, float *s) {
    __m256d acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = _mm256_setzero_pd();
        acc[r][1] = _mm256_setzero_pd();
    }
    for (int64_t d = 0; d < D; d++) {
        __m256d b0 = _mm256_load_pd(kt + d * KT_STRIDE), b1 = _mm256_load_pd(kt + d * KT_STRIDE + 4);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256d av = _mm256_broadcast_sd(qd + r * D + d);
            acc[r][0] = _mm256_fmadd_pd(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_pd(av, b1, acc[r][1]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        __m256 f = _mm256_set_m128(_mm256_cvtpd_ps(acc[r][1]), _mm256_cvtpd_ps(acc[r][0]));
        _mm256_storeu_ps(s + r * KC, _mm256_mul_ps(f, vs));
    }
}

/* One query's scores s[a, b) (chunk-relative, b - a a multiple of 8), of which [lo, hi) are
 * visible: hide the rest, fold them into its running max *mx and sum *sum, turn s[a, b) into
 * probabilities and rescale its output row o (Dp floats). s is left all 0 when nothing in
 * [a, b) is visible, so the values product adds nothing for this query. */
static void softmax_row(float *s, int64_t a, int64_t b, int64_t lo, int64_t hi, int64_t Dp,
                        float *mx, float *sum, float *o) {
    lo = lo < a ? a : lo;
    hi = hi > b ? b : hi;
    if (hi <= lo) {
        memset(s + a, 0, (size_t)(b - a) * sizeof *s);
        return;
    }
    for (int64_t j = a; j < lo; j++) s[j] = -INFINITY;
    for (int64_t j = hi; j < b; j++) s[j] = -INFINITY;
    __m256 vmax = _mm256_set1_ps(-INFINITY);
    for (int64_t j = a; j < b; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
    float bmax = avx_hmax(vmax);
    float new_m = bmax > *mx ? bmax : *mx;
    float corr = *mx == -INFINITY ? 0.0f : _mm256_cvtss_f32(avx_exp(_mm256_set1_ps(*mx - new_m)));
    __m256 vm = _mm256_set1_ps(new_m), vsum = _mm256_setzero_ps();
    for (int64_t j = a; j < b; j += 8) { /* exp(-inf) is 0: hidden keys weigh nothing */
        __m256 e = avx_exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    *sum = *sum * corr + avx_hsum(vsum);
    *mx = new_m;
    if (corr != 1.0f) {
        __m256 vc = _mm256_set1_ps(corr);
        for (int64_t c = 0; c < Dp; c += 8)
            _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_loadu_ps(o + c), vc));
    }
}

/* One item: head h, queries [q0, q0 + nq) of a block of qb rows (qb a multiple of MR).
 * Scratch layout (32-byte aligned): kt [D][KT_STRIDE] doubles, v [KC][Dp], s [MR][KC],
 * o [qb][Dp], mx [qb], sum [qb], q [qb][D] doubles. */
static void attn_block_item(void *ctx, int64_t item, float *scratch) {
    attn_job *jb = ctx;
    const qvl_node *n = jb->n;
    const qvl_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2];
    const int64_t D = jb->D, Dp = round_up(D, NR), qb = block_rows(jb->N, D);
    const int64_t n_blocks = (jb->N + qb - 1) / qb;
    const int64_t h = item / n_blocks, q0 = item % n_blocks * qb, g = h / jb->group;
    const int64_t nq = jb->N - q0 < qb ? jb->N - q0 : qb, nqm = round_up(nq, MR);
    const float scale = n->params.attention.scale;

    double *kt = (double *)(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
    float *vbuf = (float *)(kt + D * KT_STRIDE), *sc = vbuf + KC * Dp, *o = sc + MR * KC;
    float *mx = o + qb * Dp, *sum = mx + qb;
    double *qd = (double *)(sum + qb);

    /* The queries as f32 rows (rows past nq are zero), outputs and running sums cleared. */
    int64_t klo = jb->L, khi = 0;
    for (int64_t r = 0; r < nqm; r++) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
        memset(o + r * Dp, 0, (size_t)Dp * sizeof *o);
        if (r >= nq) {
            memset(qd + r * D, 0, (size_t)D * sizeof *qd);
            continue;
        }
        const float *qr = kv_row(q, q0 + r, h, D, vbuf); /* vbuf is free until the first chunk */
        for (int64_t d = 0; d < D; d++) qd[r * D + d] = qr[d];
        int64_t lo, hi;
        visible(jb, q0 + r, &lo, &hi);
        if (hi > lo) {
            klo = lo < klo ? lo : klo;
            khi = hi > khi ? hi : khi;
        }
    }

    for (int64_t j0 = klo; j0 < khi; j0 += KC) {
        const int64_t kc = khi - j0 < KC ? khi - j0 : KC, kcn = round_up(kc, NR);
        /* The chunk: keys transposed into the panel, values as padded f32 rows; the columns
         * and rows past kc are zero. */
        for (int64_t j = 0; j < kcn; j++) {
            float *vr = vbuf + j * Dp;
            if (j >= kc) {
                for (int64_t d = 0; d < D; d++) kt[d * KT_STRIDE + j] = 0.0;
                memset(vr, 0, (size_t)Dp * sizeof *vr);
                continue;
            }
            const float *kr = kv_row(k, j0 + j, g, D, vr); /* vr as conversion space first */
            for (int64_t d = 0; d < D; d++) kt[d * KT_STRIDE + j] = kr[d];
            const float *vv = kv_row(v, j0 + j, g, D, vr);
            if (vv != vr) memcpy(vr, vv, (size_t)D * sizeof *vr);
            memset(vr + D, 0, (size_t)(Dp - D) * sizeof *vr);
        }
        for (int64_t r0 = 0; r0 < nqm; r0 += MR) {
            /* Keys of this chunk any of the tile's queries sees, as whole NR-column groups. */
            int64_t lo[MR], hi[MR], tlo = kcn, thi = 0;
            for (int r = 0; r < MR; r++) {
                lo[r] = hi[r] = 0;
                if (r0 + r < nq) visible(jb, q0 + r0 + r, &lo[r], &hi[r]);
                lo[r] -= j0;
                hi[r] = (hi[r] - j0 < kc ? hi[r] - j0 : kc);
                if (hi[r] > lo[r] && hi[r] > 0) {
                    tlo = lo[r] < tlo ? lo[r] : tlo;
                    thi = hi[r] > thi ? hi[r] : thi;
                }
            }
            tlo = tlo < 0 ? 0 : tlo / NR * NR;
            thi = round_up(thi, NR);
            if (thi <= tlo) continue; /* no query of the tile sees a key of this chunk */
            for (int64_t c = tlo; c < thi; c += 8)
                tile_scores(qd + r0 * D, D, kt + c, scale, sc + c);
            for (int r = 0; r < MR; r++)
                softmax_row(sc + r * KC, tlo, thi, lo[r], hi[r], Dp, &mx[r0 + r], &sum[r0 + r],
                            o + (r0 + r) * Dp);
            for (int64_t c = 0; c < Dp; c += NR)
                tile_values(sc + tlo, KC, vbuf + tlo * Dp + c, Dp, thi - tlo, o + r0 * Dp + c, Dp);
        }
    }

    for (int64_t r = 0; r < nq; r++) {
        float *dst = (float *)n->dst->data + ((q0 + r) * jb->Hq + h) * D;
        if (!(sum[r] > 0.0f)) { /* no visible key: the row of probabilities is all 0 */
            memset(dst, 0, (size_t)D * sizeof *dst);
            continue;
        }
        float inv = 1.0f / sum[r];
        for (int64_t d = 0; d < D; d++) dst[d] = o[r * Dp + d] * inv;
    }
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
        s = avx_for_rows(be, jb.Hq * ((jb.N + block_rows(jb.N, jb.D) - 1) / block_rows(jb.N, jb.D)),
                         block_scratch(jb.N, jb.D), attn_block_item, &jb);
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
