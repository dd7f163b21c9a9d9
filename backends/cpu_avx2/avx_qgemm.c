/* The int8 GEMM for q4_k / q6_k weights (see avx_qgemm.h). */
#include "avx_qgemm.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "avx_kqblock.h"
#include "qvl/dtype.h"

#define QG_MR 4   /* activation rows per micro-tile */
#define QG_KB 32  /* 32-blocks per K block (QG_KC = 1024 values): 8 KB of panel quants */
#define QG_MC 64  /* activation rows per row block: 64 x 1024 bytes of quants per K block */
#define QB 32     /* values per activation block */
/* The step loops unrolled by 2: fully unrolled, GCC hoisted all eight steps' loads and kept
 * the 4-row tile's sums on the stack. */
#define QG_PRAGMA(x) _Pragma(#x)
#define QG_UNROLL_(n) QG_PRAGMA(GCC unroll n)
#define QG_UNROLL(n) QG_UNROLL_(n)
#define QG_STEP_UNROLL 2
#define QG_PAIR_UNROLL 2

/* ---- panels ---- */

/* One panel: quants K * 8 bytes, then f32 scales (at most K / 2: q4_k's two per row and
 * block), then int16 scale pairs (q6_k: 16 per block), rounded to cache lines. */
static int64_t panel_bytes(int64_t K) { return (11 * K + 63) / 64 * 64; }

int64_t avx_qgemm_scratch_bytes(int64_t K) { return QG_COLS / QG_NR * panel_bytes(K); }

typedef struct qg_panel {
    unsigned char *q; /* [K/4][8][4] */
    float *f;         /* q4_k: [K/32][2][8]; q6_k: [K/256][8] */
    int16_t *s;       /* q6_k: [K/32][8][2] */
} qg_panel;

static qg_panel panel_at(unsigned char *base, int64_t K) {
    return (qg_panel){base, (float *)(base + 8 * K), (int16_t *)(base + 10 * K)};
}

static const unsigned char *w_row(const avx_wmat *w, int64_t j) {
    const int64_t be = (int64_t)qvl_dtype_block_elems(w->dt);
    return w->base + (j * w->row_stride / be) * (int64_t)qvl_dtype_block_bytes(w->dt);
}

/* 32 quants v of weight row c for 32-block b: 4-byte group s goes to step b * 8 + s, lane c. */
AVX_INLINE void put32(unsigned char *pq, int64_t b, int c, __m256i v) {
    uint32_t u[8];
    _mm256_storeu_si256((__m256i *)u, v);
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) memcpy(pq + (b * 8 + s) * 32 + 4 * c, &u[s], 4);
}

static float f16_at(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* q4_k: the nibbles as bytes; per block j of a super-block d * sc_j and dmin * m_j, both
 * exact in f32 (an f16 times a 6-bit integer), the products the decode kernels form. */
static void repack_q4k(const avx_wmat *w, int64_t j0, int nc, int64_t K, qg_panel p) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < nc; c++) {
        const unsigned char *row = w_row(w, j0 + c);
        for (int64_t sb = 0; sb < K / QVL_QK_K; sb++) {
            const unsigned char *blk = row + sb * Q4K_BYTES;
            const float d = f16_at(blk), dmin = f16_at(blk + 2);
            uint64_t sc8, mn8;
            q4k_scales(blk + Q4K_SCALES, &sc8, &mn8);
            for (int j = 0; j < 8; j++) {
                const int64_t b = sb * 8 + j;
                p.f[b * 16 + c] = d * (float)((sc8 >> (8 * j)) & 0xFF);
                p.f[b * 16 + 8 + c] = dmin * (float)((mn8 >> (8 * j)) & 0xFF);
            }
            for (int cc = 0; cc < 4; cc++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + Q4K_QS + 32 * cc));
                put32(p.q, sb * 8 + 2 * cc, c, _mm256_and_si256(q, lo4));
                put32(p.q, sb * 8 + 2 * cc + 1, c, _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4));
            }
        }
    }
}

/* q6_k: the 6-bit quants (0..63) as bytes; per block the two sub-block scales as an int16
 * pair, and d per super-block. */
static void repack_q6k(const avx_wmat *w, int64_t j0, int nc, int64_t K, qg_panel p) {
    for (int c = 0; c < nc; c++) {
        const unsigned char *row = w_row(w, j0 + c);
        for (int64_t sb = 0; sb < K / QVL_QK_K; sb++) {
            const unsigned char *blk = row + sb * Q6K_BYTES;
            p.f[sb * 8 + c] = f16_at(blk + Q6K_D);
            for (int half = 0; half < 2; half++) {
                const unsigned char *ql = blk + 64 * half, *qh = blk + Q6K_QH + 32 * half;
                const __m256i ql0 = _mm256_loadu_si256((const __m256i *)ql);
                const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
                const __m256i qhv = _mm256_loadu_si256((const __m256i *)qh);
                for (int r = 0; r < 4; r++)
                    put32(p.q, sb * 8 + 4 * half + r, c, q6k_group(ql0, ql1, qhv, r));
            }
            for (int g = 0; g < 8; g++) {
                const int64_t b = sb * 8 + g;
                p.s[b * 16 + 2 * c] = (int8_t)blk[Q6K_SCALES + 2 * g];
                p.s[b * 16 + 2 * c + 1] = (int8_t)blk[Q6K_SCALES + 2 * g + 1];
            }
        }
    }
}

/* Weight rows [j0, j0 + nc) (nc <= 8) into the panel at base; lanes past nc are zero (scales
 * too), so they add nothing and are never stored. */
static void repack(const avx_wmat *w, int64_t j0, int nc, int64_t K, unsigned char *base) {
    if (nc < QG_NR) memset(base, 0, (size_t)panel_bytes(K));
    const qg_panel p = panel_at(base, K);
    if (w->dt == QVL_Q4_K) repack_q4k(w, j0, nc, K, p);
    else repack_q6k(w, j0, nc, K, p);
}

/* ---- micro-kernels: MR activation rows x 8 weight rows, 32-blocks [b_lo, b_hi) ---- */

typedef struct qg_ctx {
    const avx_qrows *a;
    const float *bias, *add;
    float *out;
    int64_t ldo;
} qg_ctx;

/* Activation row m's quants k .. k + 3 in every 32-bit lane. */
AVX_INLINE __m256i a4(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

/* q4_k. Per 4 values: a maddubs pair is at most 2 * 15 * 128 = 3840 in magnitude, so the eight
 * steps of a block add up in int16 (at most 16 products per lane, 30720) before one madd
 * with ones gives the block's exact dot per weight row (at most 32 * 15 * 128 = 61440: exact
 * in f32). Then acc += dot * (d*sc * d_b) and acc -= dmin*m * (d_b * sum a_q). */
AVX_INLINE void kern_q4k(const avx_qrows *a, qg_panel p, int MR, int64_t m0, int64_t b_lo,
                         int64_t b_hi, __m256 *acc) {
    const int64_t K = a->K, nb = K / QB;
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = b_lo; b < b_hi; b++) {
        const unsigned char *wq = p.q + b * 256;
        __m256i s16[QG_MR];
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) s16[m] = _mm256_setzero_si256();
    QG_UNROLL(QG_STEP_UNROLL)
        for (int s = 0; s < 8; s++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)(wq + 32 * s));
#pragma GCC unroll 4
            for (int m = 0; m < MR; m++)
                s16[m] = _mm256_add_epi16(
                    s16[m], _mm256_maddubs_epi16(wv, a4(a->q + (m0 + m) * K + b * QB + 4 * s)));
        }
        const __m256 scd = _mm256_load_ps(p.f + b * 16), mnd = _mm256_load_ps(p.f + b * 16 + 8);
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            const int64_t ab = (m0 + m) * nb + b;
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[m], ones));
            acc[m] = _mm256_fmadd_ps(dot, _mm256_mul_ps(scd, _mm256_set1_ps(a->d[ab])), acc[m]);
            acc[m] = _mm256_fnmadd_ps(mnd, _mm256_set1_ps(a->s32[ab]), acc[m]);
        }
    }
}

/* q6_k. A maddubs pair is at most 2 * 63 * 128 = 16128, so two steps add in int16 (32256);
 * madd with the sub-block's scale (|sc| <= 128) takes them to int32, 8 products per pair
 * and lane. A block's sum(sc * q * a_q) is at most 32 * 63 * 128 * 128 < 2^25, inside int32;
 * the -32 offset, 32 * (sc_0 * S_0 + sc_1 * S_1) with S the activation sums of the two
 * halves (one madd of the scale pair with the sum pair), is taken off in int32, leaving
 * sum(sc * (q - 32) * a_q), at most 32 * 32 * 128 * 128 = 2^24: exact in f32. */
AVX_INLINE void kern_q6k(const avx_qrows *a, qg_panel p, int MR, int64_t m0, int64_t b_lo,
                         int64_t b_hi, __m256 *acc) {
    const int64_t K = a->K, nb = K / QB, n16 = K / 16;
    const __m256i lo_ix = _mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13,
                                           0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13);
    const __m256i hi_ix = _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15,
                                           2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15);
    for (int64_t b = b_lo; b < b_hi; b++) {
        const unsigned char *wq = p.q + b * 256;
        const __m256i pair = _mm256_load_si256((const __m256i *)(p.s + b * 16));
        const __m256i sc[2] = {_mm256_shuffle_epi8(pair, lo_ix), _mm256_shuffle_epi8(pair, hi_ix)};
        __m256i s32[QG_MR];
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) s32[m] = _mm256_setzero_si256();
    QG_UNROLL(QG_PAIR_UNROLL)
        for (int h = 0; h < 4; h++) { /* steps 2h, 2h + 1: sub-block h / 2 */
            const __m256i w0 = _mm256_load_si256((const __m256i *)(wq + 64 * h));
            const __m256i w1 = _mm256_load_si256((const __m256i *)(wq + 64 * h + 32));
#pragma GCC unroll 4
            for (int m = 0; m < MR; m++) {
                const int8_t *q = a->q + (m0 + m) * K + b * QB + 8 * h;
                const __m256i t = _mm256_add_epi16(_mm256_maddubs_epi16(w0, a4(q)),
                                                   _mm256_maddubs_epi16(w1, a4(q + 4)));
                s32[m] = _mm256_add_epi32(s32[m], _mm256_madd_epi16(t, sc[h / 2]));
            }
        }
        const __m256 d = _mm256_load_ps(p.f + b / 8 * 8);
#pragma GCC unroll 4
        for (int m = 0; m < MR; m++) {
            int32_t sums;
            memcpy(&sums, a->s16 + (m0 + m) * n16 + 2 * b, 4);
            const __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(pair, _mm256_set1_epi32(sums)), 5);
            const __m256 dot = _mm256_cvtepi32_ps(_mm256_sub_epi32(s32[m], off));
            acc[m] = _mm256_fmadd_ps(dot, _mm256_mul_ps(d, _mm256_set1_ps(a->d[(m0 + m) * nb + b])),
                                     acc[m]);
        }
    }
}

/* The tile's sums into columns [j0, j0 + nc): the first K block sets sum + bias + add (the
 * decode kernels' order), later ones add to it. */
AVX_INLINE void tile_out(const qg_ctx *x, int MR, int64_t m0, int64_t j0, int nc,
                         const __m256 *acc, bool first) {
#pragma GCC unroll 4
    for (int m = 0; m < MR; m++) {
        float v[8];
        _mm256_storeu_ps(v, acc[m]);
        float *o = x->out + (m0 + m) * x->ldo + j0;
        if (!first) {
            for (int c = 0; c < nc; c++) o[c] += v[c];
            continue;
        }
        const float *ad = x->add ? x->add + (m0 + m) * x->ldo + j0 : NULL;
        for (int c = 0; c < nc; c++) {
            float t = v[c];
            if (x->bias) t += x->bias[j0 + c];
            if (ad) t += ad[c];
            o[c] = t;
        }
    }
}

/* One tile per dtype and row count: noinline, so that each keeps its accumulators in
 * registers on its own. */
#define QG_TILE(NAME, KERN, MR)                                                                \
    static __attribute__((noinline)) void NAME##_##MR(const qg_ctx *x, qg_panel p, int64_t m0, \
                                                      int64_t b_lo, int64_t b_hi, int64_t j0,  \
                                                      int nc) {                                \
        __m256 acc[QG_MR];                                                                     \
        for (int m = 0; m < (MR); m++) acc[m] = _mm256_setzero_ps();                           \
        KERN(x->a, p, MR, m0, b_lo, b_hi, acc);                                                \
        tile_out(x, MR, m0, j0, nc, acc, b_lo == 0);                                           \
    }
#define QG_TILES(NAME, KERN) \
    QG_TILE(NAME, KERN, 1) QG_TILE(NAME, KERN, 2) QG_TILE(NAME, KERN, 3) QG_TILE(NAME, KERN, 4)
QG_TILES(tile_q4k, kern_q4k)
QG_TILES(tile_q6k, kern_q6k)

typedef void (*qg_tile_fn)(const qg_ctx *, qg_panel, int64_t, int64_t, int64_t, int64_t, int);
_Static_assert(QG_MR == 4, "a tile function for each row count up to QG_MR");
static const qg_tile_fn tiles_q4k[QG_MR] = {tile_q4k_1, tile_q4k_2, tile_q4k_3, tile_q4k_4};
static const qg_tile_fn tiles_q6k[QG_MR] = {tile_q6k_1, tile_q6k_2, tile_q6k_3, tile_q6k_4};

void avx_qgemm_cols(const avx_qrows *a, int64_t M, const avx_wmat *w, const float *bias,
                    const float *add, float *out, int64_t ldo, int64_t j_lo, int64_t j_hi,
                    unsigned char *scratch) {
    const int64_t K = w->cols, nb = K / QB, pb = panel_bytes(K);
    const qg_tile_fn *tiles = w->dt == QVL_Q4_K ? tiles_q4k : tiles_q6k;
    const qg_ctx x = {a, bias, add, out, ldo};
    for (int64_t j = j_lo; j < j_hi; j += QG_COLS) {
        const int64_t ncols = j_hi - j < QG_COLS ? j_hi - j : QG_COLS;
        const int np = (int)((ncols + QG_NR - 1) / QG_NR);
        for (int p = 0; p < np; p++) {
            const int64_t left = ncols - (int64_t)p * QG_NR;
            repack(w, j + p * QG_NR, left < QG_NR ? (int)left : QG_NR, K, scratch + p * pb);
        }
        for (int64_t mb = 0; mb < M; mb += QG_MC) {
            const int64_t me = M - mb < QG_MC ? M : mb + QG_MC;
            for (int64_t kb = 0; kb < nb; kb += QG_KB) {
                const int64_t ke = nb - kb < QG_KB ? nb : kb + QG_KB;
                for (int p = 0; p < np; p++) {
                    const qg_panel pn = panel_at(scratch + p * pb, K);
                    const int64_t left = ncols - (int64_t)p * QG_NR;
                    const int nc = left < QG_NR ? (int)left : QG_NR;
                    for (int64_t m = mb; m < me; m += QG_MR) {
                        const int mr = me - m < QG_MR ? (int)(me - m) : QG_MR;
                        tiles[mr - 1](&x, pn, m, kb, ke, j + p * QG_NR, nc);
                    }
                }
            }
        }
    }
}
