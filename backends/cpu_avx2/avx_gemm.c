/* The blocked GEMM of every weight dtype (see avx_gemm.h). */
#include "avx_gemm.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/dtype.h"

#define AVX_INLINE static inline __attribute__((always_inline))

#define GEMM_NR 16  /* panel width: two ymm of output columns */
#define GEMM_KC 256 /* K block: a panel is 16 KB, a 6-row tile of a 6 KB (L1 holds both) */
#define GEMM_NC 512 /* columns per packed weight block: 512 KB in L2 */


/* ---- weights: 16 rows x kn values -> panel [kn][16] f32 ---- */

static const unsigned char *row_ptr(const avx_wmat *w, int64_t j) {
    /* block dtypes: rows start on whole blocks (avx_wmat_of) */
    return w->base + (size_t)(j * w->row_stride / (int64_t)qvl_dtype_block_elems(w->dt)) *
                         qvl_dtype_block_bytes(w->dt);
}

/* 8 consecutive values of a row from index k (q8_0: k a multiple of 8), as f32. q8_0 values
 * d * q are exact in f32 (11-bit d times 8-bit q). */
AVX_INLINE __m256 load8_f32(qvl_dtype dt, const unsigned char *row, int64_t k) {
    if (dt == QVL_Q8_0) {
        const unsigned char *blk = row + (k / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
        uint16_t h;
        memcpy(&h, blk, 2);
        __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 2 + k % QVL_Q8_0_BLOCK)));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(_cvtsh_ss(h)));
    }
    if (dt == QVL_BF16) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
    if (dt == QVL_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
    return _mm256_loadu_ps((const float *)row + k);
}

static float scalar_f32(qvl_dtype dt, const unsigned char *row, int64_t k) {
    uint16_t h;
    float f;
    switch (dt) {
    case QVL_Q8_0: {
        const unsigned char *blk = row + (k / QVL_Q8_0_BLOCK) * (int64_t)sizeof(qvl_block_q8_0);
        memcpy(&h, blk, 2);
        return qvl_f16_to_f32(h) * (float)(int8_t)blk[2 + k % QVL_Q8_0_BLOCK];
    }
    case QVL_BF16: memcpy(&h, row + 2 * k, 2); return qvl_bf16_to_f32(h);
    case QVL_F16: memcpy(&h, row + 2 * k, 2); return qvl_f16_to_f32(h);
    default: memcpy(&f, row + 4 * k, 4); return f;
    }
}

/* r[i] <- column i of the 8x8 matrix whose rows are r[0..7]. */
AVX_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], s[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], 0x44);
        s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], 0xEE);
        s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(s[i], s[4 + i], 0x31);
    }
}

/* Rows [j0, j0 + jn) (jn <= 16; the rest zero), values [k0, k0 + kn), into panel [kn][16]. */
AVX_INLINE void pack_panel_dt(qvl_dtype dt, const avx_wmat *w, int64_t j0, int64_t jn,
                              int64_t k0, int64_t kn, float *panel) {
    const unsigned char *rows[GEMM_NR];
    for (int c = 0; c < GEMM_NR; c++) rows[c] = c < jn ? row_ptr(w, j0 + c) : NULL;
    int64_t k = 0;
    for (; k + 8 <= kn; k += 8)
        for (int h = 0; h < GEMM_NR; h += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = rows[h + i] ? load8_f32(dt, rows[h + i], k0 + k) : _mm256_setzero_ps();
            transpose8(r);
            for (int i = 0; i < 8; i++) _mm256_store_ps(panel + (k + i) * GEMM_NR + h, r[i]);
        }
    for (; k < kn; k++)
        for (int c = 0; c < GEMM_NR; c++)
            panel[k * GEMM_NR + c] = rows[c] ? scalar_f32(dt, rows[c], k0 + k) : 0.0f;
}

static void pack_panel(const avx_wmat *w, int64_t j0, int64_t jn, int64_t k0, int64_t kn,
                       float *panel) {
    switch (w->dt) {
    case QVL_BF16: pack_panel_dt(QVL_BF16, w, j0, jn, k0, kn, panel); break;
    case QVL_F16: pack_panel_dt(QVL_F16, w, j0, jn, k0, kn, panel); break;
    case QVL_Q8_0: pack_panel_dt(QVL_Q8_0, w, j0, jn, k0, kn, panel); break;
    default: pack_panel_dt(QVL_F32, w, j0, jn, k0, kn, panel); break;
    }
}

/* ---- the MR x 16 micro-kernel: c[MR][16] (row stride ldc) += a[MR][kc] (rows lda apart) x
 * bp[kc][16] ---- */

/* MR (1..6, a constant after inlining) rows of sums in 2*MR ymm registers for the whole K
 * block: per k, two panel loads and MR broadcasts feed 2*MR FMAs. a's rows are read where
 * they lie, MR sequential streams: packing them first into one stream cost a pass over all
 * of a per op (50 MB for the vision MLP's down projection), more than the streams cost.
 * Tiles of fewer than 6 rows (the last of M) do only their own rows' work; the sums are the
 * same whatever MR. */
AVX_INLINE void kernel_mx16(int MR, int64_t kc, const float *a, int64_t lda, const float *bp,
                            float *c, int64_t ldc) {
    __m256 acc[GEMM_MR][2];
    const float *ar[GEMM_MR];
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        ar[r] = a + r * lda;
        acc[r][0] = _mm256_loadu_ps(c + r * ldc);
        acc[r][1] = _mm256_loadu_ps(c + r * ldc + 8);
    }
    /* unrolled: the loop's own instructions would otherwise take issue slots from the FMAs
     * (docs/BENCHMARKS.md) */
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8); /* the panel stays in L1 */
#pragma GCC unroll 6
        for (int r = 0; r < MR; r++) {
            __m256 av = _mm256_broadcast_ss(ar[r] + k);
            acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
        }
        bp += GEMM_NR;
    }
#pragma GCC unroll 6
    for (int r = 0; r < MR; r++) {
        _mm256_storeu_ps(c + r * ldc, acc[r][0]);
        _mm256_storeu_ps(c + r * ldc + 8, acc[r][1]);
    }
}

static void kernel_6x16(int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
                        int64_t ldc) {
    kernel_mx16(6, kc, a, lda, bp, c, ldc);
}

/* mr (1..6) rows of 16 columns. */
static void kernel_rows(int64_t mr, int64_t kc, const float *a, int64_t lda, const float *bp,
                        float *c, int64_t ldc) {
    switch (mr) {
    case 1: kernel_mx16(1, kc, a, lda, bp, c, ldc); break;
    case 2: kernel_mx16(2, kc, a, lda, bp, c, ldc); break;
    case 3: kernel_mx16(3, kc, a, lda, bp, c, ldc); break;
    case 4: kernel_mx16(4, kc, a, lda, bp, c, ldc); break;
    case 5: kernel_mx16(5, kc, a, lda, bp, c, ldc); break;
    default: kernel_6x16(kc, a, lda, bp, c, ldc); break;
    }
}

/* A tile at the edge: mr < 6 rows straight into c, fewer than 16 columns through a copy. */
static void kernel_edge(int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
                        int64_t ldc, int64_t mr, int64_t nc) {
    if (nc == GEMM_NR) {
        kernel_rows(mr, kc, a, lda, bp, c, ldc);
        return;
    }
    float tmp[GEMM_MR * GEMM_NR] = {0};
    for (int64_t r = 0; r < mr; r++) memcpy(tmp + r * GEMM_NR, c + r * ldc, (size_t)nc * sizeof(float));
    kernel_rows(mr, kc, a, lda, bp, tmp, GEMM_NR);
    for (int64_t r = 0; r < mr; r++) memcpy(c + r * ldc, tmp + r * GEMM_NR, (size_t)nc * sizeof(float));
}

/* ---- one thread's columns ---- */

/* out[m, j] = add[m, j] + bias[j] (or 0) for the thread's rows and columns: the sums start
 * there. */
static void init_out(int64_t m_lo, int64_t m_hi, const float *bias, const float *add, float *out,
                     int64_t ldo, int64_t j_lo, int64_t j_hi) {
    for (int64_t m = m_lo; m < m_hi; m++) {
        float *o = out + m * ldo;
        const float *ad = add ? add + m * ldo : NULL;
        for (int64_t j = j_lo; j < j_hi; j++) o[j] = (ad ? ad[j] : 0.0f) + (bias ? bias[j] : 0.0f);
    }
}

int64_t avx_gemm_bpack_len(int64_t K, int64_t ncols) {
    int64_t nc = ncols < GEMM_NC ? ncols : GEMM_NC, kc = K < GEMM_KC ? K : GEMM_KC;
    return ((nc + GEMM_NR - 1) / GEMM_NR) * (kc > 0 ? kc : 1) * GEMM_NR;
}

/* Bytes of row storage that hold values [k0, k0 + kn) of a row (block dtypes: whole blocks,
 * k0 a multiple of the block), and the offset of the first. */
static int64_t span_bytes(qvl_dtype dt, int64_t k0, int64_t kn, int64_t *off) {
    const int64_t be = (int64_t)qvl_dtype_block_elems(dt), bb = (int64_t)qvl_dtype_block_bytes(dt);
    *off = k0 / be * bb;
    return (kn + be - 1) / be * bb;
}

/* Into L2: rows [r_lo, r_hi) of panel rows j0.. (at most jn of them), values [k0, k0 + kn).
 * The next K block's weights, fetched while the current block's tiles compute, so that the
 * packing finds them in cache instead of waiting on 16 short streams of a few hundred bytes
 * each. */
static void prefetch_rows(const avx_wmat *w, int64_t j0, int64_t jn, int r_lo, int r_hi,
                          int64_t k0, int64_t kn) {
    int64_t off, bytes = span_bytes(w->dt, k0, kn, &off);
    for (int r = r_lo; r < r_hi && r < jn; r++) {
        const unsigned char *p = row_ptr(w, j0 + r) + off;
        for (int64_t b = 0; b < bytes; b += 64) _mm_prefetch((const char *)(p + b), _MM_HINT_T1);
        _mm_prefetch((const char *)(p + bytes - 1), _MM_HINT_T1);
    }
}

/* Into L1: the 6 x 16 output tile at c (rows ldc apart), which the micro-kernel loads first:
 * fetched one tile ahead, so it does not wait on rows that the last K block left in L2. */
AVX_INLINE void prefetch_tile(const float *c, int64_t ldc, int64_t mr) {
    /* (addresses as integers: a partial last panel's may lie past the output's end, which a
     * prefetch tolerates but pointer arithmetic does not) */
    for (int64_t r = 0; r < mr; r++) {
        uintptr_t row = (uintptr_t)c + (uintptr_t)(r * ldc) * sizeof(float);
        _mm_prefetch((const char *)row, _MM_HINT_T0);
        _mm_prefetch((const char *)(row + (GEMM_NR - 1) * sizeof(float)), _MM_HINT_T0);
    }
}

void avx_gemm_cols(const float *a, int64_t M, int64_t m_lo, int64_t m_hi,
                   const avx_wmat *w, const float *bias, const float *add, float *out,
                   int64_t ldo, int64_t j_lo, int64_t j_hi, float *bpack) {
    const int64_t K = w->cols;
    init_out(m_lo, m_hi, bias, add, out, ldo, j_lo, j_hi);
    for (int64_t jc = j_lo; jc < j_hi; jc += GEMM_NC) {
        int64_t nc = j_hi - jc < GEMM_NC ? j_hi - jc : GEMM_NC;
        int64_t panels = (nc + GEMM_NR - 1) / GEMM_NR;
        for (int64_t k0 = 0; k0 < K; k0 += GEMM_KC) {
            int64_t kc = K - k0 < GEMM_KC ? K - k0 : GEMM_KC;
            int64_t k1 = k0 + kc, kc1 = K - k1 < GEMM_KC ? K - k1 : GEMM_KC; /* next block */
            for (int64_t p = 0; p < panels; p++) {
                int64_t jn = nc - p * GEMM_NR < GEMM_NR ? nc - p * GEMM_NR : GEMM_NR;
                pack_panel(w, jc + p * GEMM_NR, jn, k0, kc, bpack + p * kc * GEMM_NR);
            }
            for (int64_t m0 = m_lo; m0 < m_hi; m0 += GEMM_MC) {
                int64_t mc = m_hi - m0 < GEMM_MC ? m_hi - m0 : GEMM_MC;
                int64_t tiles = (mc + GEMM_MR - 1) / GEMM_MR;
                /* the next block's weight rows, spread over the last row block's tiles */
                int rows_per_tile = kc1 > 0 && m0 + mc >= m_hi ? (int)((GEMM_NR + tiles - 1) / tiles) : 0;
                for (int64_t p = 0; p < panels; p++) {
                    int64_t jn = nc - p * GEMM_NR < GEMM_NR ? nc - p * GEMM_NR : GEMM_NR;
                    const float *bp = bpack + p * kc * GEMM_NR;
                    for (int64_t m = m0; m < m0 + mc; m += GEMM_MR) {
                        const float *ap = a + m * K + k0;
                        float *c = out + m * ldo + jc + p * GEMM_NR;
                        int64_t mr = M - m < GEMM_MR ? M - m : GEMM_MR;
                        /* the tile after this one: next rows, or the next panel's first */
                        int64_t mn = m + GEMM_MR < m0 + mc ? m + GEMM_MR : m0;
                        if (mn != m0 || p + 1 < panels)
                            prefetch_tile(out + mn * ldo + jc + (mn == m0 ? p + 1 : p) * GEMM_NR,
                                          ldo, M - mn < GEMM_MR ? M - mn : GEMM_MR);
                        if (rows_per_tile) {
                            int t = (int)((m - m0) / GEMM_MR);
                            prefetch_rows(w, jc + p * GEMM_NR, jn, t * rows_per_tile,
                                          (t + 1) * rows_per_tile, k1, kc1);
                        }
                        if (mr == GEMM_MR && jn == GEMM_NR) kernel_6x16(kc, ap, K, bp, c, ldo);
                        else kernel_edge(kc, ap, K, bp, c, ldo, mr, jn);
                    }
                }
            }
        }
    }
}
