/* ATTENTION for many queries (prefill, the vision tower): online softmax over chunks of keys
 * in register tiles, so the [N, L] score matrix never exists.
 *
 * A work item is one head and one block of queries (all of them up to QB_ELEMS / D). The keys
 * go by in chunks of KC; each chunk is packed once per item (K transposed into an f32 panel
 * [D][KC], V as f32 rows padded to whole NR-column groups) and shared by all the block's
 * queries. Per tile of MR = 6 queries both products are register-tiled like the GEMM's
 * micro-kernel (12 ymm sums, per step two panel loads and six broadcasts feed 12 FMAs):
 *  - scores: 6 queries x 16 keys over d;
 *  - the tile's softmax update per query (running max and sum, rescaling its output row);
 *  - values: 6 queries x 16 output columns over the keys any of the 6 sees.
 * Keys no query of a tile sees are skipped in whole NR-key groups; a tile with some visible
 * keys in a group hides the others with -inf before the exponentials.
 *
 * Precision. A score is one f32 FMA chain over d in order, then times scale in f32: it differs
 * from the reference's (a double dot product rounded once to f32) by the chain's D roundings,
 * each at most half an ulp of a partial sum. They add like a random walk, a few u T in
 * practice (T = |scale| sum_d |q_d k_d|, u = 2^-24; the worst case, D u T / 2, needs all of
 * them in one direction). The softmax turns an absolute score error into the same relative
 * error of a probability, so the output moves by at most 2 max|v| times it; the conformance
 * bound for ATTENTION allows 4 u T per score, and its cases with scores in the hundreds test
 * exactly this. Why not double sums as on the decode path: they run at half the f32 rate,
 * and the two products are nearly all of this path's work. Softmax and the weighted sum of v:
 * f32, keys in order within a chunk and chunks rescaled in order, with avx_exp_nonpos
 * (avx_exp's values for s - max <= 0, 1.2e-7 relative). Every item's arithmetic is the same
 * whatever the thread that runs it. */
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "avx_attention.h"
#include "avx_math.h"

#define MR 6           /* query rows of a register tile (the #pragma unroll counts say 6 too) */
#define NR 16          /* keys of a scores tile, output columns of a values tile (2 ymm) */
#define QB_ELEMS 65536 /* queries x head size per work item at most (256 KB of q, 256 KB of
                          outputs: L2); the item's queries share each key chunk */
#define KC 256         /* keys per chunk (a multiple of NR) */
#define KT_STRIDE (KC + 16) /* K^T panel row stride in floats: rows 1088 bytes apart, so the
                               panel's rows do not fall on a few L1 sets */

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/* Queries per item: the N queries split evenly into blocks of at most QB_ELEMS / D, rounded up
 * to whole MR-row tiles. */
static int64_t block_rows(int64_t N, int64_t D) {
    int64_t most = QB_ELEMS / D > MR ? QB_ELEMS / D : MR;
    int64_t n_blocks = (N + most - 1) / most;
    return round_up((N + n_blocks - 1) / n_blocks, MR);
}

int64_t avx_attn_tiled_items(const attn_job *jb) {
    int64_t qb = block_rows(jb->N, jb->D);
    return jb->Hq * ((jb->N + qb - 1) / qb);
}

/* Floats of scratch one item needs (layout in avx_attn_tiled_item). */
int64_t avx_attn_tiled_scratch(const attn_job *jb) {
    int64_t D = jb->D, Dp = round_up(D, NR), qb = block_rows(jb->N, D);
    return D * KT_STRIDE /* kt: [D][KT_STRIDE] keys transposed */
           + KC * Dp     /* v chunk as rows padded to whole NR column groups */
           + MR * KC     /* scores, then probabilities, of one tile of MR queries */
           + qb * Dp     /* output accumulators */
           + 2 * qb      /* running max and sum */
           + qb * D      /* q rows */
           + 8;          /* slack for the 32-byte alignment */
}

/* s[r][0:16] = scale * (q_r . k_c) for MR query rows q (D apart) and the 16 keys of the K^T
 * panel kt (rows KT_STRIDE apart): one FMA chain per score over d in order. vmax[r] takes the
 * elementwise max with row r's scores (softmax_row's max when every key is visible). */
static void tile_scores(const float *q, int64_t D, const float *kt, float scale, float *s,
                        __m256 *vmax) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = _mm256_setzero_ps();
        acc[r][1] = _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (int64_t d = 0; d < D; d++) {
        __m256 b0 = _mm256_load_ps(kt + d * KT_STRIDE), b1 = _mm256_load_ps(kt + d * KT_STRIDE + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 av = _mm256_broadcast_ss(q + r * D + d);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        __m256 s0 = _mm256_mul_ps(acc[r][0], vs), s1 = _mm256_mul_ps(acc[r][1], vs);
        _mm256_store_ps(s + r * KC, s0);
        _mm256_store_ps(s + r * KC + 8, s1);
        vmax[r] = _mm256_max_ps(vmax[r], _mm256_max_ps(s0, s1));
    }
}

/* c[r][0:16] += sum over t < n of a[r][t] * b[t][0:16] for MR rows r: one f32 FMA chain per
 * output in t order (a rows KC apart, b rows ldb apart, c rows ldc apart). a = the
 * probabilities, b = the V rows, t = keys. */
static void tile_values(const float *a, const float *b, int64_t ldb, int64_t n, float *c,
                        int64_t ldc) {
    __m256 acc[MR][2];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        acc[r][0] = _mm256_load_ps(c + r * ldc);
        acc[r][1] = _mm256_load_ps(c + r * ldc + 8);
    }
#pragma GCC unroll 4
    for (int64_t t = 0; t < n; t++) {
        __m256 b0 = _mm256_load_ps(b + t * ldb), b1 = _mm256_load_ps(b + t * ldb + 8);
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 av = _mm256_broadcast_ss(a + r * KC + t);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_store_ps(c + r * ldc, acc[r][0]);
        _mm256_store_ps(c + r * ldc + 8, acc[r][1]);
    }
}

/* One query's scores s[a, b) (chunk-relative, multiples of 8), of which [lo, hi) are visible:
 * hide the rest, fold them into its running max *mx and sum *sum, turn s[a, b) into
 * probabilities and rescale its output row o (Dp floats). s is left all 0 when nothing in
 * [a, b) is visible, so the values product adds nothing for this query. all_max: the max of
 * s[a, b) (tile_scores'), used when every key there is visible: the same max as a pass over
 * them, without the pass. */
static void softmax_row(float *s, int64_t a, int64_t b, int64_t lo, int64_t hi, int64_t Dp,
                        float all_max, float *mx, float *sum, float *o) {
    float bmax = all_max;
    if (lo > a || hi < b) {
        lo = lo < a ? a : lo;
        hi = hi > b ? b : hi;
        if (hi <= lo) {
            memset(s + a, 0, (size_t)(b - a) * sizeof *s);
            return;
        }
        for (int64_t j = a; j < lo; j++) s[j] = -INFINITY;
        for (int64_t j = hi; j < b; j++) s[j] = -INFINITY;
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        for (int64_t j = a; j < b; j += 8) vmax = _mm256_max_ps(vmax, _mm256_load_ps(s + j));
        bmax = avx_hmax(vmax);
    }
    float new_m = bmax > *mx ? bmax : *mx;
    /* both exponents are <= 0: s <= new_m, *mx <= new_m */
    float corr = *mx == -INFINITY ? 0.0f
                                  : _mm256_cvtss_f32(avx_exp_nonpos(_mm256_set1_ps(*mx - new_m)));
    __m256 vm = _mm256_set1_ps(new_m), vsum = _mm256_setzero_ps();
    for (int64_t j = a; j < b; j += 8) { /* exp(-inf) is 0: hidden keys weigh nothing */
        __m256 e = avx_exp_nonpos(_mm256_sub_ps(_mm256_load_ps(s + j), vm));
        _mm256_store_ps(s + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    *sum = *sum * corr + avx_hsum(vsum);
    *mx = new_m;
    if (corr != 1.0f) {
        __m256 vc = _mm256_set1_ps(corr);
        for (int64_t c = 0; c < Dp; c += 8)
            _mm256_store_ps(o + c, _mm256_mul_ps(_mm256_load_ps(o + c), vc));
    }
}

/* Keys [j0, j0 + kc) of head g into the panels: K transposed into kt, V as padded rows; the
 * columns and rows up to the next multiple of NR are zero. */
static void pack_chunk(const attn_job *jb, int64_t g, int64_t j0, int64_t kc, float *kt,
                       float *vbuf) {
    const qvl_tensor *k = jb->n->src[1], *v = jb->n->src[2];
    const int64_t D = jb->D, Dp = round_up(D, NR), kcn = round_up(kc, NR);
    for (int64_t j = 0; j < kcn; j++) {
        float *vr = vbuf + j * Dp;
        if (j >= kc) {
            for (int64_t d = 0; d < D; d++) kt[d * KT_STRIDE + j] = 0.0f;
            memset(vr, 0, (size_t)Dp * sizeof *vr);
            continue;
        }
        const float *kr = avx_attn_row(k, j0 + j, g, D, vr); /* vr as conversion space first */
        for (int64_t d = 0; d < D; d++) kt[d * KT_STRIDE + j] = kr[d];
        const float *vv = avx_attn_row(v, j0 + j, g, D, vr);
        if (vv != vr) memcpy(vr, vv, (size_t)D * sizeof *vr);
        memset(vr + D, 0, (size_t)(Dp - D) * sizeof *vr);
    }
}

/* One item: head h, queries [q0, q0 + nq) of a block of qb rows (qb a multiple of MR).
 * Scratch layout (32-byte aligned; Dp and KT_STRIDE are multiples of 8 floats, so every part
 * is): kt [D][KT_STRIDE], v [KC][Dp], s [MR][KC], o [qb][Dp], mx [qb], sum [qb], q [qb][D]. */
void avx_attn_tiled_item(void *ctx, int64_t item, float *scratch) {
    const attn_job *jb = ctx;
    const qvl_node *n = jb->n;
    const int64_t D = jb->D, Dp = round_up(D, NR), qb = block_rows(jb->N, D);
    const int64_t n_blocks = (jb->N + qb - 1) / qb;
    const int64_t h = item / n_blocks, q0 = item % n_blocks * qb, g = h / jb->group;
    const int64_t nq = jb->N - q0 < qb ? jb->N - q0 : qb, nqm = round_up(nq, MR);
    const float scale = n->params.attention.scale;

    float *kt = (float *)(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
    float *vbuf = kt + D * KT_STRIDE, *sc = vbuf + KC * Dp, *o = sc + MR * KC;
    float *mx = o + qb * Dp, *sum = mx + qb, *qf = sum + qb;

    /* The queries as f32 rows (rows past nq are zero), outputs and running sums cleared, and
     * the keys any query of the block sees. */
    int64_t klo = jb->L, khi = 0;
    for (int64_t r = 0; r < nqm; r++) {
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
        memset(o + r * Dp, 0, (size_t)Dp * sizeof *o);
        if (r >= nq) {
            memset(qf + r * D, 0, (size_t)D * sizeof *qf);
            continue;
        }
        const float *qr = avx_attn_row(n->src[0], q0 + r, h, D, qf + r * D);
        if (qr != qf + r * D) memcpy(qf + r * D, qr, (size_t)D * sizeof *qf);
        int64_t lo, hi;
        avx_attn_visible(jb, q0 + r, &lo, &hi);
        if (hi > lo) {
            klo = lo < klo ? lo : klo;
            khi = hi > khi ? hi : khi;
        }
    }

    for (int64_t j0 = klo; j0 < khi; j0 += KC) {
        const int64_t kc = khi - j0 < KC ? khi - j0 : KC, kcn = round_up(kc, NR);
        pack_chunk(jb, g, j0, kc, kt, vbuf);
        for (int64_t r0 = 0; r0 < nqm; r0 += MR) {
            /* Keys of this chunk any of the tile's queries sees, as whole NR-key groups. */
            int64_t lo[MR], hi[MR], tlo = kcn, thi = 0;
            for (int r = 0; r < MR; r++) {
                lo[r] = hi[r] = 0;
                if (r0 + r < nq) avx_attn_visible(jb, q0 + r0 + r, &lo[r], &hi[r]);
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
            __m256 vmax[MR];
            for (int r = 0; r < MR; r++) vmax[r] = _mm256_set1_ps(-INFINITY);
            for (int64_t c = tlo; c < thi; c += NR)
                tile_scores(qf + r0 * D, D, kt + c, scale, sc + c, vmax);
            for (int r = 0; r < MR; r++)
                softmax_row(sc + r * KC, tlo, thi, lo[r], hi[r], Dp, avx_hmax(vmax[r]),
                            &mx[r0 + r], &sum[r0 + r], o + (r0 + r) * Dp);
            for (int64_t c = 0; c < Dp; c += NR)
                tile_values(sc + tlo, vbuf + tlo * Dp + c, Dp, thi - tlo, o + r0 * Dp + c, Dp);
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
