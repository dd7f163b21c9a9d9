/* int8 activation rows and the q4_k / q6_k kernels (see avx_kquant.h). */
#include "avx_kquant.h"

#include <immintrin.h>
#include <string.h>

#include "avx_kqblock.h"
#include "avx_math.h"
#include "qvl/dtype.h"

#define AVX_INLINE static inline __attribute__((always_inline))

/* ---- activations ---- */

void avx_quantize_row_q8(const float *x, int64_t K, int8_t *q, float *d, float *s32,
                         int16_t *s16) {
    const __m256 sign_off = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < K / QVL_Q8_0_BLOCK; b++) {
        const float *xb = x + b * QVL_Q8_0_BLOCK;
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            amax = _mm256_max_ps(amax, _mm256_and_ps(v[i], sign_off));
        }
        float mx = avx_hmax(amax);
        float scale = mx / 127.0f;
        d[b] = scale;
        __m256 inv = _mm256_set1_ps(scale > 0.0f ? 1.0f / scale : 0.0f);
        __m256i qi[4];
        for (int i = 0; i < 4; i++)
            qi[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], inv),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        /* pack 32 int32 -> 32 int8 in order (packs work per 128-bit lane: fix with a permute) */
        __m256i p16a = _mm256_packs_epi32(qi[0], qi[1]), p16b = _mm256_packs_epi32(qi[2], qi[3]);
        __m256i p8 = _mm256_packs_epi16(p16a, p16b);
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        int8_t *qb = q + b * QVL_Q8_0_BLOCK;
        _mm256_storeu_si256((__m256i *)qb, p8);
        if (!s32 && !s16) continue;
        /* sums of the stored (saturated) quants, so that they match what the dots read */
        int sum[2] = {0, 0};
        for (int i = 0; i < QVL_Q8_0_BLOCK; i++) sum[i / 16] += qb[i];
        if (s16) {
            s16[2 * b] = (int16_t)sum[0];
            s16[2 * b + 1] = (int16_t)sum[1];
        }
        if (s32) s32[b] = scale * (float)(sum[0] + sum[1]);
    }
}

/* ---- shared pieces ---- */

/* Prefetch `ahead` bytes past p (computed as an integer: the address may lie past the end of
 * the matrix, which a prefetch tolerates but C pointer arithmetic does not). */
AVX_INLINE void prefetch_ahead(const void *p, int64_t ahead) {
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)ahead), _MM_HINT_T0);
}

/* Lane i of v in every lane (a shuffle-port op: the integer ports are the busy ones). */
AVX_INLINE __m256 lane(__m256 v, int i) {
    return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i));
}

/* 8 bytes (byte j = lane j) as f32. */
AVX_INLINE __m256 bytes8_ps(uint64_t v) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v)));
}

/* The same for two blocks at once on vector bytes: 128-bit lane l holds block bl's
 * [sc_0..7, m_0..7]. Scale bytes s0..s11 of each block are placed as X = [s0-3, s8-11, s4-7,
 * s8-11] and Y = [-, s0-3, -, s4-7]: the low 6 bits of X (sc_0..3, m_0..3), the low nibble
 * (sc_4..7) or high nibble (m_4..7) of s8-11, and bits 6-7 of Y moved to bits 4-5. (16-bit
 * shifts: the masks drop what crosses between bytes.) */
AVX_INLINE __m256i q4k_scales2(const unsigned char *b0, const unsigned char *b1) {
    const __m256i v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b0 + Q4K_SCALES))),
        _mm_loadu_si128((const __m128i *)(b1 + Q4K_SCALES)), 1);
    const __m256i ix = _mm256_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11,
                                        0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
    const __m256i iy = _mm256_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7,
                                        -1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7);
    const __m256i m_lo = _mm256_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0,
                                          63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
    const __m256i m_hn = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15,
                                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15);
    const __m256i x = _mm256_shuffle_epi8(v, ix), y = _mm256_shuffle_epi8(v, iy);
    const __m256i low = _mm256_and_si256(x, m_lo);
    const __m256i hn = _mm256_and_si256(_mm256_srli_epi16(x, 4), m_hn);
    const __m256i top = _mm256_and_si256(_mm256_srli_epi16(y, 2), _mm256_set1_epi8(0x30));
    return _mm256_or_si256(_mm256_or_si256(low, hn), top);
}

/* Bytes 0-7 (lo = 0) or 8-15 (lo = 8) of v as 8 f32. */
AVX_INLINE __m256 bytes8_of(__m128i v, int lo) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo ? _mm_srli_si128(v, 8) : v));
}

/* ---- decode: MR activation rows x NR weight rows ---- */

/* Bytes prefetched ahead on each stream (see avx_linear.c's Q8_PF_AHEAD: the same 4 KB in
 * flight per thread over KQ_STREAMS streams). */
#define KQ_PF_AHEAD 1024
#define KQ_STREAMS 4

/* KQ_PF_AHEAD bytes past each 64-byte line of a block of `bytes` (a constant: the loop unrolls;
 * a q4_k block spans three lines at most, a q6_k block four). */
AVX_INLINE void prefetch_block(const unsigned char *blk, int bytes) {
#pragma GCC unroll 4
    for (int o = 0; o < bytes; o += 64) prefetch_ahead(blk + o, KQ_PF_AHEAD);
}

/* The most activation rows one tile takes (q4k_tilem, q6k_tilem): all of a batched decode
 * step's (AVX_GEMV_MAX_ROWS); kq_tile_run has a case for each count. */
#define KQ_MR_MAX 8

typedef struct kq_tile {
    const avx_qrows *a;
    const avx_wmat *w;
    const avx_cols_out *o;
    int64_t m0, j0, js;
} kq_tile;

/* Output (row, column j) = the dot v, plus the bias and the added rows where given. */
AVX_INLINE void kq_store(const kq_tile *t, int64_t row, int64_t j, float v) {
    if (t->o->bias) v += t->o->bias[j];
    if (t->o->add) v += t->o->add[row * t->o->ldo + j];
    t->o->out[row * t->o->ldo + j] = v;
}

AVX_INLINE const unsigned char *kq_row(const avx_wmat *w, int64_t j, int64_t block_bytes) {
    return w->base + (j * w->row_stride / QVL_QK_K) * block_bytes;
}

/* The one-row tiles' start: weight rows j0, j0 + js, ... (NR of them) and zeroed accumulators. */
AVX_INLINE void kq_rows_begin(const kq_tile *t, int NR, int64_t block_bytes,
                              const unsigned char **wr, __m256 *acc) {
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        wr[r] = kq_row(t->w, t->j0 + r * t->js, block_bytes);
        acc[r] = _mm256_setzero_ps();
    }
}

/* One activation row (decode proper): the sub-blocks' integer dots are gathered into one vector
 * (lane j = sub-block j) and only then converted and scaled by d * sc_j * d_b, with one FMA per
 * super-block and weight row, instead of widened with madd and applied one by one in f32 (cvt +
 * FMA per sub-block, on the multiply ports that maddubs needs too).
 * Chunk c (quant bytes 32c..) holds sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles), so
 * each maddubs result is one sub-block: pair sums of its elements 0-15 in the low 128-bit lane,
 * of 16-31 in the high one. Chunks c and c + 2 (c = 0, 1) are merged lane-wise: one lane
 * exchange, a blend and an add give [2c | 2c + 4] from the low-nibble results and [2c + 1 |
 * 2c + 5] from the high ones, each lane's two halves added; one 16-bit horizontal add of the
 * two gives [4 sums of each of 2c, 2c + 1 | 4 of 2c + 4, 2c + 5], and a last one, of c = 0 and
 * c = 1, 2 sums of each of sub-blocks 0-3 | 4-7 per lane, which madd with ones adds in int32:
 * lane j in order, with no widening or cross-lane step after it. A row thus takes three
 * horizontal adds per block, each several uops (two shuffle uops on Intel, a two-cycle
 * throughput on AMD Zen 4), while the lane merges are single cheap ones; merging with madd
 * and 32-bit blends instead (no horizontal adds at all) takes more instructions and was
 * slower.
 * Bounds (|a_q| <= 128, q <= 15): a maddubs pair is at most 2 * 15 * 128 = 3840 and each
 * 16-bit sum holds at most 16 products, 30720 in magnitude, inside int16; the madd gives the
 * sub-block's exact dot of 32 products. Rows go in pairs so that a pair's partial sums stay in
 * registers (activation vectors are loaded once per pair; the pair's scales unpack together). */
AVX_INLINE void q4k_tile1(const kq_tile *t, int NR) {
    const avx_qrows *a = t->a;
    const int64_t K = a->K, nb = K / QVL_Q8_0_BLOCK;
    const int8_t *aq = a->q + t->m0 * K;
    const float *ad = a->d + t->m0 * nb, *as = a->s32 + t->m0 * nb;
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    const unsigned char *wr[4];
    __m256 acc[4];
    kq_rows_begin(t, NR, Q4K_BYTES, wr, acc);
    for (int64_t b = 0; b < K / QVL_QK_K; b++) {
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const unsigned char *blk = wr[r] + b * Q4K_BYTES;
            prefetch_block(blk, Q4K_BYTES);
        }
#pragma GCC unroll 2
        for (int r0 = 0; r0 < NR; r0 += 2) {
            const int nr = NR - r0 >= 2 ? 2 : 1; /* a single row is its own pair */
            __m256i p[2][2][2]; /* row, chunk 0/1, low / high nibbles: maddubs results */
            __m256i g[2][2];    /* row, chunks 0 + 2 / 1 + 3 merged */
            /* chunks in the order 0, 2, 1, 3: chunk c >= 2 merges with c - 2 at once, so a
             * row holds at most one chunk's results besides its merged ones */
#pragma GCC unroll 4
            for (int ci = 0; ci < 4; ci++) {
                const int c = (ci & 1) << 1 | ci >> 1;
                const __m256i a0 = _mm256_loadu_si256((const __m256i *)(aq + b * QVL_QK_K + 64 * c));
                const __m256i a1 =
                    _mm256_loadu_si256((const __m256i *)(aq + b * QVL_QK_K + 64 * c + 32));
#pragma GCC unroll 2
                for (int i = 0; i < nr; i++) {
                    const __m256i q = _mm256_loadu_si256(
                        (const __m256i *)(wr[r0 + i] + b * Q4K_BYTES + Q4K_QS + 32 * c));
                    const __m256i lo = _mm256_and_si256(q, lo4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), lo4);
                    const __m256i pl = _mm256_maddubs_epi16(lo, a0), ph = _mm256_maddubs_epi16(hi, a1);
                    if (c < 2) {
                        p[i][c][0] = pl;
                        p[i][c][1] = ph;
                        continue;
                    }
                    /* [x lanes added | y lanes added] */
                    const __m256i xl = p[i][c - 2][0], xh = p[i][c - 2][1];
                    const __m256i ml = _mm256_add_epi16(_mm256_permute2x128_si256(xl, pl, 0x21),
                                                        _mm256_blend_epi32(xl, pl, 0xF0));
                    const __m256i mh = _mm256_add_epi16(_mm256_permute2x128_si256(xh, ph, 0x21),
                                                        _mm256_blend_epi32(xh, ph, 0xF0));
                    g[i][c - 2] = _mm256_hadd_epi16(ml, mh);
                }
            }
            const unsigned char *blk0 = wr[r0] + b * Q4K_BYTES;
            const __m256i scm = q4k_scales2(blk0, nr == 2 ? wr[r0 + 1] + b * Q4K_BYTES : blk0);
#pragma GCC unroll 2
            for (int i = 0; i < nr; i++) {
                const int r = r0 + i;
                const unsigned char *blk = wr[r] + b * Q4K_BYTES;
                const __m256i dots =
                    _mm256_madd_epi16(_mm256_hadd_epi16(g[i][0], g[i][1]), _mm256_set1_epi16(1));
                /* d, dmin: the f16 pair in every 32-bit word, as f32 [d, dmin, d, dmin, ...],
                 * spread with in-lane shuffles */
                const __m256 dm =
                    _mm256_cvtph_ps(_mm_castps_si128(_mm_broadcast_ss((const float *)blk)));
                const __m256 d = _mm256_shuffle_ps(dm, dm, 0x00), dmin = _mm256_shuffle_ps(dm, dm, 0x55);
                const __m128i sm = i ? _mm256_extracti128_si256(scm, 1) : _mm256_castsi256_si128(scm);
                const __m256 scd = _mm256_mul_ps(bytes8_of(sm, 0), d);    /* d * sc_j, exact */
                const __m256 mnd = _mm256_mul_ps(bytes8_of(sm, 8), dmin); /* dmin * m_j, exact */
                const __m256 s = _mm256_mul_ps(scd, _mm256_loadu_ps(ad + b * 8));
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), s, acc[r]);
                acc[r] = _mm256_fnmadd_ps(mnd, _mm256_loadu_ps(as + b * 8), acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) kq_store(t, t->m0, t->j0 + r * t->js, avx_hsum(acc[r]));
}

/* Several activation rows (a batched decode step) against one weight row: q4k_tile1's reduction
 * row by row, so each row's f32 work is again one conversion and one FMA per super-block, and
 * its results are bit for bit the one-row tile's (the same exact integer dots, then the same
 * f32 operations in the same order). What the rows share is done once: the nibble unpacking,
 * the scales and the weight loads. Chunks c and c + 2 (pair c = 0, 1) are unpacked together
 * (four vectors), then every activation row takes its four maddubs and the lane merge into g
 * (as in q4k_tile1); pair 0's g waits in a register per row and pair 1 finishes the row at
 * once, so about MR + 4 vectors stay live across the rows (accumulators aside, touched once
 * per super-block). One weight row per tile, not two: with two, the compiler keeps each
 * activation vector for the second row and spills them, where loading them again is cheap. */
AVX_INLINE void q4k_tilem(const kq_tile *t, int MR) {
    const avx_qrows *a = t->a;
    const int64_t K = a->K, nb = K / QVL_Q8_0_BLOCK;
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    const unsigned char *wr = kq_row(t->w, t->j0, Q4K_BYTES);
    __m256 acc[KQ_MR_MAX];
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / QVL_QK_K; b++) {
        const unsigned char *blk = wr + b * Q4K_BYTES;
        prefetch_block(blk, Q4K_BYTES);
        __m256 d, dmin;
        q4k_d(blk, &d, &dmin);
        const __m128i sm = _mm256_castsi256_si128(q4k_scales2(blk, blk));
        const __m256 scd = _mm256_mul_ps(bytes8_of(sm, 0), d);    /* d * sc_j, exact */
        const __m256 mnd = _mm256_mul_ps(bytes8_of(sm, 8), dmin); /* dmin * m_j, exact */
        __m256i g[KQ_MR_MAX];
#pragma GCC unroll 2
        for (int pair = 0; pair < 2; pair++) {
            const __m256i q0 = _mm256_loadu_si256((const __m256i *)(blk + Q4K_QS + 32 * pair));
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)(blk + Q4K_QS + 32 * pair + 64));
            const __m256i l0 = _mm256_and_si256(q0, lo4);
            const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), lo4);
            const __m256i l2 = _mm256_and_si256(q2, lo4);
            const __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(q2, 4), lo4);
#pragma GCC unroll 8
            for (int m = 0; m < MR; m++) {
                const int64_t row = t->m0 + m;
                const int8_t *aq = a->q + row * K + b * QVL_QK_K + 64 * pair;
                const __m256i x0 = _mm256_maddubs_epi16(l0, _mm256_loadu_si256((const __m256i *)aq));
                const __m256i y0 =
                    _mm256_maddubs_epi16(h0, _mm256_loadu_si256((const __m256i *)(aq + 32)));
                const __m256i x2 =
                    _mm256_maddubs_epi16(l2, _mm256_loadu_si256((const __m256i *)(aq + 128)));
                const __m256i y2 =
                    _mm256_maddubs_epi16(h2, _mm256_loadu_si256((const __m256i *)(aq + 160)));
                /* [sub-block 2 pair | 2 pair + 4] and [2 pair + 1 | 2 pair + 5], each lane's
                 * two halves added */
                const __m256i ml = _mm256_add_epi16(_mm256_permute2x128_si256(x0, x2, 0x21),
                                                    _mm256_blend_epi32(x0, x2, 0xF0));
                const __m256i mh = _mm256_add_epi16(_mm256_permute2x128_si256(y0, y2, 0x21),
                                                    _mm256_blend_epi32(y0, y2, 0xF0));
                const __m256i gm = _mm256_hadd_epi16(ml, mh);
                if (pair == 0) {
                    g[m] = gm;
                    continue;
                }
                const __m256i dots =
                    _mm256_madd_epi16(_mm256_hadd_epi16(g[m], gm), _mm256_set1_epi16(1));
                const __m256 s = _mm256_mul_ps(scd, _mm256_loadu_ps(a->d + row * nb + b * 8));
                acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots), s, acc[m]);
                acc[m] = _mm256_fnmadd_ps(mnd, _mm256_loadu_ps(a->s32 + row * nb + b * 8), acc[m]);
            }
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) kq_store(t, t->m0 + m, t->j0, avx_hsum(acc[m]));
}

/* One activation row: as q4k_tile1, the f32 work is one conversion and one FMA per super-block
 * and weight row, the sub-blocks' integer dots gathered by horizontal adds. Group g (elements
 * 32g..32g + 31) of a half gives one maddubs result whose 128-bit lane L holds pair sums of
 * its sub-block 2g + L, so each lane of what follows holds one parity of sub-block, and the
 * reduction never crosses lanes until the scales have been applied. Per half h of a block
 * (groups 4h + r, r = 0..3, sub-blocks 8h..8h + 7):
 *  - one 16-bit horizontal add of groups r and r + 2 (r = 0, 1: the two take their low bits
 *    from the same 32 bytes, ql0 or ql1, so each add waits on two of the half's three loads
 *    rather than all three) gives per lane [4 sums of r, 4 of r + 2], and madd with ones 2
 *    int32 sums of each;
 *  - the 32-bit pair sums of those two vectors (q6k_pairs32) give per lane L the dots of
 *    sub-blocks 2(4h + r) + L in the order r = 0, 2, 1, 3 ("0 2 1 3" order).
 * The -32 offsets (q6k_offsets, shared by all rows) and the scales (q6k_scales32) are laid out
 * alike, so both apply lane by lane in int32; a lane exchange and a blend then sum each group's
 * two sub-blocks (groups 0 2 1 3 | 4 6 5 7) and one in-lane shuffle puts them in group order,
 * lane g = group g, as the f32 multipliers d * d_b are. Per row and block that is four 16-bit
 * horizontal adds; the 32-bit step uses two single-uop shuffles and an add instead of
 * vphaddd, which on Intel cores is those same uops but on AMD Zen 4 a slower instruction (a
 * two-cycle throughput, on a resource the 16-bit adds already keep busy).
 * Bounds (|a_q| <= 128, q <= 63):
 *  - maddubs pairs <= 2 * 63 * 128 = 16128 and one 16-bit hadd of them <= 32256: inside
 *    int16 (a second would not be, hence madd with ones to reach int32);
 *  - the int32 sums hold 8, then 16 products: a sub-block's sum(q a_q) is at most
 *    16 * 63 * 128 = 129024 in magnitude;
 *  - a sub-block's sum(q a_q) - 32 sum(a_q) = sum((q - 32) a_q): at most 16 * 32 * 128 =
 *    65536 in magnitude, times |sc| <= 128 is 2^23, and a group's two sub-blocks 2^24: exact
 *    in int32 and in the f32 conversion (the same value as scaling group by group).
 * Integer sums are exact in any order within these bounds, so the converted values, and all the
 * f32 work after them, do not depend on how the reduction is grouped.
 * Rows go in pairs within each super-block so that each activation vector is loaded once for
 * both. */

/* 32 * (sum of 16 activation quants) for the 16 sub-blocks of a super-block, s16 = its 16
 * sums: off[h] = half h's sub-blocks in the 0 2 1 3 order above. */
AVX_INLINE void q6k_offsets(const int16_t *s16, __m256i off[2]) {
    /* each 128-bit lane of the sums is one half: int16 [0 4 2 6 1 5 3 7] in place */
    const __m256i ix = _mm256_setr_epi8(0, 1, 8, 9, 4, 5, 12, 13, 2, 3, 10, 11, 6, 7, 14, 15,
                                        0, 1, 8, 9, 4, 5, 12, 13, 2, 3, 10, 11, 6, 7, 14, 15);
    const __m256i v = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)s16), ix);
    off[0] = _mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(v)), 5);
    off[1] = _mm256_slli_epi32(_mm256_cvtepi16_epi32(_mm256_extracti128_si256(v, 1)), 5);
}

/* A q6_k block's 16 int8 scales as int32, sc[h] = half h's in the 0 2 1 3 order above. */
AVX_INLINE void q6k_scales32(const unsigned char *blk, __m256i sc[2]) {
    const __m128i ix = _mm_setr_epi8(0, 4, 2, 6, 1, 5, 3, 7, 8, 12, 10, 14, 9, 13, 11, 15);
    const __m128i v = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(blk + Q6K_SCALES)), ix);
    sc[0] = _mm256_cvtepi8_epi32(v);
    sc[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(v, 8));
}

/* Per 128-bit lane [x0 + x1, x2 + x3, y0 + y1, y2 + y3] (int32): the sums vphaddd forms, as
 * two in-lane shuffles and an add. */
AVX_INLINE __m256i q6k_pairs32(__m256i x, __m256i y) {
    const __m256 a = _mm256_castsi256_ps(x), b = _mm256_castsi256_ps(y);
    return _mm256_add_epi32(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)),
                            _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xDD)));
}

/* sum(q a_q) of half h's 8 sub-blocks of one q6_k block (0 2 1 3 order), av = the
 * activation vectors of its 4 groups. */
AVX_INLINE __m256i q6k_half_dots(const unsigned char *blk, int half, const __m256i av[4]) {
    const unsigned char *ql = blk + 64 * half;
    const __m256i ql0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + Q6K_QH + 32 * half));
    const __m256i ones = _mm256_set1_epi16(1);
    /* the half's groups r, r + 2: per 128-bit lane [2 partial sums of r, 2 of r + 2] */
    __m256i quad[2];
#pragma GCC unroll 2
    for (int r = 0; r < 2; r++) {
        const __m256i p0 = _mm256_maddubs_epi16(q6k_group(ql0, ql1, qh, r), av[r]);
        const __m256i p1 = _mm256_maddubs_epi16(q6k_group(ql0, ql1, qh, r + 2), av[r + 2]);
        quad[r] = _mm256_madd_epi16(_mm256_hadd_epi16(p0, p1), ones);
    }
    return q6k_pairs32(quad[0], quad[1]); /* groups 0, 2 from quad[0], then 1, 3 */
}

AVX_INLINE void q6k_tile1(const kq_tile *t, int NR) {
    const avx_qrows *a = t->a;
    const int64_t K = a->K, nb = K / QVL_Q8_0_BLOCK, n16 = K / 16;
    const int8_t *aq = a->q + t->m0 * K;
    const float *ad = a->d + t->m0 * nb;
    const int16_t *as = a->s16 + t->m0 * n16;
    const unsigned char *wr[4];
    __m256 acc[4];
    kq_rows_begin(t, NR, Q6K_BYTES, wr, acc);
    for (int64_t b = 0; b < K / QVL_QK_K; b++) {
        const __m256 adv = _mm256_loadu_ps(ad + b * 8);
        __m256i off[2];
        q6k_offsets(as + b * 16, off);
#pragma GCC unroll 2
        for (int r0 = 0; r0 < NR; r0 += 2) {
            const int nr = NR - r0 >= 2 ? 2 : 1;
            const unsigned char *blk[2];
            __m256i dots[2][2]; /* per row and half: sum(q a_q) - 32 sum(a_q), 0 2 1 3 order */
#pragma GCC unroll 2
            for (int i = 0; i < nr; i++) {
                blk[i] = wr[r0 + i] + b * Q6K_BYTES;
                prefetch_block(blk[i], Q6K_BYTES);
            }
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
                __m256i av[4];
#pragma GCC unroll 4
                for (int r4 = 0; r4 < 4; r4++)
                    av[r4] = _mm256_loadu_si256(
                        (const __m256i *)(aq + b * QVL_QK_K + 32 * (4 * half + r4)));
#pragma GCC unroll 2
                for (int i = 0; i < nr; i++)
                    dots[i][half] = _mm256_sub_epi32(q6k_half_dots(blk[i], half, av), off[half]);
            }
#pragma GCC unroll 2
            for (int i = 0; i < nr; i++) {
                __m256i sc[2];
                q6k_scales32(blk[i], sc);
                const __m256i s0 = _mm256_mullo_epi32(dots[i][0], sc[0]);
                const __m256i s1 = _mm256_mullo_epi32(dots[i][1], sc[1]);
                /* [s0's two lanes added | s1's]: groups 0 2 1 3 | 4 6 5 7, each sub-block 2g
                 * (low lanes) + 2g + 1 (high lanes); then lanes 1 and 2 of each half swapped */
                const __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(s0, s1, 0x21),
                                                     _mm256_blend_epi32(s0, s1, 0xF0));
                const __m256i grp = _mm256_shuffle_epi32(sum, 0xD8);
                uint16_t h;
                memcpy(&h, blk[i] + Q6K_D, 2);
                const __m256 dd = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(h)), adv);
                acc[r0 + i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(grp), dd, acc[r0 + i]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) kq_store(t, t->m0, t->j0 + r * t->js, avx_hsum(acc[r]));
}

/* Several activation rows against one weight row, as q4k_tilem: q6k_tile1's reduction row by
 * row, the 6-bit unpacking (a half's four groups at a time) and the scales once for all rows.
 * The -32 offsets are taken in int32 after the scales, per group: madd of 32 sc_s with the
 * activation sums s16 pairs sub-blocks 2g, 2g + 1 into lane g, the same sum
 * sum_s sc_s * 32 sum(a_q) that q6k_tile1 takes before its scales, so the group sums, exact
 * in int32 either way (|32 sc_s| <= 4096 and |s16| <= 2048 fit int16; a group's
 * sum(sc q a_q) is at most 2 * 16 * 63 * 128 * 128 < 2^25), are the same integers and the
 * results bit for bit the one-row tile's. */
AVX_INLINE void q6k_tilem(const kq_tile *t, int MR) {
    const avx_qrows *a = t->a;
    const int64_t K = a->K, nb = K / QVL_Q8_0_BLOCK, n16 = K / 16;
    const __m256i ones = _mm256_set1_epi16(1);
    const unsigned char *wr = kq_row(t->w, t->j0, Q6K_BYTES);
    __m256 acc[KQ_MR_MAX];
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) acc[m] = _mm256_setzero_ps();
    for (int64_t b = 0; b < K / QVL_QK_K; b++) {
        const unsigned char *blk = wr + b * Q6K_BYTES;
        prefetch_block(blk, Q6K_BYTES);
        __m256i sc[2];
        q6k_scales32(blk, sc);
        const __m256i sc32 = _mm256_slli_epi16(
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(blk + Q6K_SCALES))), 5);
        uint16_t h;
        memcpy(&h, blk + Q6K_D, 2);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
        __m256i dots[KQ_MR_MAX]; /* half 0's sum(q a_q), 0 2 1 3 order */
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            const unsigned char *ql = blk + 64 * half;
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)ql);
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + Q6K_QH + 32 * half));
            __m256i q[4];
#pragma GCC unroll 4
            for (int r4 = 0; r4 < 4; r4++) q[r4] = q6k_group(ql0, ql1, qh, r4);
#pragma GCC unroll 8
            for (int m = 0; m < MR; m++) {
                const int64_t row = t->m0 + m;
                const int8_t *aq = a->q + row * K + b * QVL_QK_K + 128 * half;
                __m256i quad[2];
#pragma GCC unroll 2
                for (int r = 0; r < 2; r++) {
                    const __m256i p0 = _mm256_maddubs_epi16(
                        q[r], _mm256_loadu_si256((const __m256i *)(aq + 32 * r)));
                    const __m256i p1 = _mm256_maddubs_epi16(
                        q[r + 2], _mm256_loadu_si256((const __m256i *)(aq + 32 * (r + 2))));
                    quad[r] = _mm256_madd_epi16(_mm256_hadd_epi16(p0, p1), ones);
                }
                const __m256i hd = q6k_pairs32(quad[0], quad[1]);
                if (half == 0) {
                    dots[m] = hd;
                    continue;
                }
                const __m256i s0 = _mm256_mullo_epi32(dots[m], sc[0]);
                const __m256i s1 = _mm256_mullo_epi32(hd, sc[1]);
                /* as q6k_tile1: groups 0 2 1 3 | 4 6 5 7, then in group order */
                const __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(s0, s1, 0x21),
                                                     _mm256_blend_epi32(s0, s1, 0xF0));
                const __m256i off = _mm256_madd_epi16(
                    sc32, _mm256_loadu_si256((const __m256i *)(a->s16 + row * n16 + b * 16)));
                const __m256i grp = _mm256_sub_epi32(_mm256_shuffle_epi32(sum, 0xD8), off);
                const __m256 dd = _mm256_mul_ps(d, _mm256_loadu_ps(a->d + row * nb + b * 8));
                acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(grp), dd, acc[m]);
            }
        }
    }
#pragma GCC unroll 8
    for (int m = 0; m < MR; m++) kq_store(t, t->m0 + m, t->j0, avx_hsum(acc[m]));
}

static void kq_tile_run(qvl_dtype dt, const kq_tile *t, int MR, int NR) {
    if (MR > 1) {
        /* the weight rows one at a time (see q4k_tilem), still alternating between streams */
        kq_tile tr = *t;
        for (int r = 0; r < NR; r++, tr.j0 += t->js) {
#define KQ_TILEM(mr)                                      \
    case mr:                                              \
        if (dt == QVL_Q4_K) q4k_tilem(&tr, mr);           \
        else q6k_tilem(&tr, mr);                          \
        break;
            switch (MR) {
            KQ_TILEM(2)
            KQ_TILEM(3)
            KQ_TILEM(4)
            KQ_TILEM(5)
            KQ_TILEM(6)
            KQ_TILEM(7)
            default: KQ_TILEM(8)
            }
#undef KQ_TILEM
        }
        return;
    }
    /* one activation row: KQ_STREAMS weight rows, or the rows left over one by one */
    if (dt == QVL_Q4_K && NR == KQ_STREAMS) q4k_tile1(t, KQ_STREAMS);
    else if (dt == QVL_Q4_K) q4k_tile1(t, 1);
    else if (NR == KQ_STREAMS) q6k_tile1(t, KQ_STREAMS);
    else q6k_tile1(t, 1);
}

/* Rows [j_lo, j_hi) as `streams` sequential streams read side by side (as avx_linear.c's
 * q8_range, for the same reason: the L2 streamer follows one stream per page, and a core needs
 * several in flight): tile t takes row t of each stream, rows j_lo + t + s * len, then the
 * rows left over one by one. One activation row takes 4 streams (its tile reads them side by
 * side); more take 2, each tile reading one weight row and the next tile the other stream's. */
void avx_kq_gemv(const avx_qrows *a, int64_t M, const avx_wmat *w, const avx_cols_out *o,
                 int64_t j_lo, int64_t j_hi) {
    const int mr_max = KQ_MR_MAX;
    for (int64_t m0 = 0; m0 < M;) {
        const int mr = M - m0 >= mr_max ? mr_max : (int)(M - m0);
        const int ns = mr == 1 ? KQ_STREAMS : 2;
        const int64_t len = (j_hi - j_lo) / ns;
        kq_tile t = {a, w, o, m0, j_lo, len};
        for (int64_t s = 0; s < len; s++) {
            t.j0 = j_lo + s;
            kq_tile_run(w->dt, &t, mr, ns);
        }
        t.js = 1;
        for (int64_t j = j_lo + len * ns; j < j_hi; j++) {
            t.j0 = j;
            kq_tile_run(w->dt, &t, mr, 1);
        }
        m0 += mr;
    }
}

/* ---- dequantisation ---- */

/* One q4_k block: value = (d*sc_j) * q - dmin*m_j, both products exact, one rounding in the
 * fused subtraction, as in the scalar d*sc*q - dmin*m. */
static void dequant_q4k_block(const unsigned char *blk, float *out) {
    __m256 d, dmin;
    q4k_d(blk, &d, &dmin);
    uint64_t sc8, mn8;
    q4k_scales(blk + Q4K_SCALES, &sc8, &mn8);
    const __m256 scd = _mm256_mul_ps(bytes8_ps(sc8), d), mnd = _mm256_mul_ps(bytes8_ps(mn8), dmin);
    for (int c = 0; c < 4; c++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(blk + Q4K_QS + 32 * c));
        __m256i nib[2] = {_mm256_and_si256(q, _mm256_set1_epi8(0x0F)),
                          _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F))};
        for (int h = 0; h < 2; h++) {
            const int j = 2 * c + h;
            const __m256 step = lane(scd, j), offset = lane(mnd, j);
            float *o = out + 32 * j;
            __m128i n0 = _mm256_castsi256_si128(nib[h]), n1 = _mm256_extracti128_si256(nib[h], 1);
            __m128i parts[4] = {n0, _mm_srli_si128(n0, 8), n1, _mm_srli_si128(n1, 8)};
            for (int i = 0; i < 4; i++) {
                __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i]));
                _mm256_storeu_ps(o + 8 * i, _mm256_fmsub_ps(step, qf, offset));
            }
        }
    }
}

/* One q6_k block: value = d * sc_s * (q - 32), exact in f32 (docs/QUANT.md). */
static void dequant_q6k_block(const unsigned char *blk, float *out) {
    uint16_t h;
    memcpy(&h, blk + Q6K_D, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(h));
    for (int half = 0; half < 2; half++) {
        const unsigned char *ql = blk + 64 * half, *qh = blk + Q6K_QH + 32 * half;
        __m256i ql0 = _mm256_loadu_si256((const __m256i *)ql);
        __m256i ql1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        __m256i qhv = _mm256_loadu_si256((const __m256i *)qh);
        for (int r4 = 0; r4 < 4; r4++) {
            const int g = 4 * half + r4;
            __m256i q = _mm256_sub_epi8(q6k_group(ql0, ql1, qhv, r4), _mm256_set1_epi8(32));
            __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
            __m128i parts[4] = {q0, _mm_srli_si128(q0, 8), q1, _mm_srli_si128(q1, 8)};
            for (int i = 0; i < 4; i++) {
                const int8_t sc = (int8_t)blk[Q6K_SCALES + 2 * g + i / 2];
                const __m256 step = _mm256_mul_ps(d, _mm256_set1_ps((float)sc));
                __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[i]));
                _mm256_storeu_ps(out + 32 * g + 8 * i, _mm256_mul_ps(step, qf));
            }
        }
    }
}

void avx_dequant_kq(qvl_dtype dt, const unsigned char *src, float *out, int64_t n) {
    for (int64_t b = 0; b < n / QVL_QK_K; b++) {
        if (dt == QVL_Q4_K) dequant_q4k_block(src + b * Q4K_BYTES, out + b * QVL_QK_K);
        else dequant_q6k_block(src + b * Q6K_BYTES, out + b * QVL_QK_K);
    }
}
