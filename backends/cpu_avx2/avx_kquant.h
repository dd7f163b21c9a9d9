/* int8 activation rows, and the q4_k / q6_k weight kernels (block layouts: docs/QUANT.md).
 *
 * Decode (up to AVX_GEMV_MAX_ROWS activation rows) runs on integers, as the q8_0 path does: each
 * activation row is quantised once per op to int8 blocks of 32 (scale d = max|a_block|/127, kept
 * in f32), and each weight sub-block's dot product with it is exact in int32 (maddubs/madd:
 * unsigned 4- or 6-bit quants times signed int8). Only the scales are applied in f32:
 *  - q4_k, sub-block j of 32 (one activation block b): value = d*sc_j*q - dmin*m_j, so
 *      sum_k w_k a'_k = d*sc_j * d_b * sum(q a_q) - dmin*m_j * d_b * sum(a_q),
 *    with d_b * sum(a_q) (s32) computed once per activation block;
 *  - q6_k, sub-blocks s of 16 (two per activation block): value = d*sc_s*(q - 32), so
 *      sum_k w_k a'_k = d * d_b * sum_s sc_s * (sum(q a_q) - 32 * sum(a_q)),
 *    the int16 sums of 16 quants (s16) computed once; sc_s is folded into the madd.
 * a'_k = d_b * a_q is the quantised activation, so the result is the exact product of the
 * stored weights with a', rounded in f32: the only error beyond the reference's is the
 * activation rounding, at most max|a_block|/254 per element (the q8_0 path's bound).
 * For each activation row of a decode step (one row, or the 2 to 8 of a batched step, all in
 * one tile that unpacks each weight block once) the per-sub-block integer dots of a super-block are
 * gathered into one vector (lane j = sub-block j) by horizontal adds, still exact (q4_k in
 * int16, q6_k in int32; the bounds are in avx_kquant.c), so the f32 work is one conversion and
 * one FMA per super-block and weight row rather than one per sub-block: on the Intel cores the
 * backend targets, maddubs, madd, the conversion and the FMA all share two ports, while the
 * horizontal adds run mostly on the otherwise idle shuffle port.
 *
 * Prefill (more rows) uses the int8 GEMM (avx_qgemm.h) on the same activation blocks. The f32
 * GEMM (avx_gemm.h), for weights converted to f32 or mixed into a call with float weights, is
 * also able to dequantise them per K block with avx_dequant_kq: the values are exact (docs/QUANT.md: d*sc*q and dmin*m are exact in
 * f32, so q4_k's value is one correctly rounded subtraction and q6_k's is exact), the same
 * bits qvl_to_f32 gives. */
#ifndef QVL_AVX_KQUANT_H
#define QVL_AVX_KQUANT_H

#include <stdint.h>

#include "avx_linear.h"

/* Activation rows quantised to int8 blocks of 32: a[m][k] ~ d[m][k/32] * q[m][k]. */
typedef struct avx_qrows {
    const int8_t *q;     /* [M, K] */
    const float *d;      /* [M, K/32] block scales */
    const float *s32;    /* [M, K/32] d * (sum of the block's 32 quants): q4_k's min term */
    const int16_t *s16;  /* [M, K/16] sums of 16 consecutive quants: q6_k's -32 offset */
    int64_t K;
} avx_qrows;

/* One row of K (a multiple of 32) values: quants q[K] and scales d[K/32]; when s32 / s16 are
 * not NULL also the block sums above (s32[K/32], s16[K/16]). */
void avx_quantize_row_q8(const float *x, int64_t K, int8_t *q, float *d, float *s32,
                         int16_t *s16);

/* Weight rows [j_lo, j_hi) of w (q4_k or q6_k, in place: whole super-blocks per row) against
 * M activation rows (a few: decode, a batched decode step; any M works), into o. */
void avx_kq_gemv(const avx_qrows *a, int64_t M, const avx_wmat *w, const avx_cols_out *o,
                 int64_t j_lo, int64_t j_hi);

/* n values (a multiple of 256) of q4_k or q6_k data starting at super-block src, as f32,
 * bit for bit what qvl_to_f32 gives. */
void avx_dequant_kq(qvl_dtype dt, const unsigned char *src, float *out, int64_t n);

#endif
