/* The f32 GEMM behind avx_linear for more than AVX_GEMV_MAX_ROWS rows (prefill, vision), every
 * weight dtype but q4_k and q6_k (those take the int8 GEMM, avx_qgemm.h):
 * out[m, j] = add[m, j] + bias[j] + a[m] . w[j], blocked the way the caches want it.
 *
 *  - a's rows are read where they lie, a tile of 6 rows as 6 sequential streams (packing a
 *    into one stream first cost a pass over all of it per op: more than the streams do).
 *  - Each call computes a range of output columns. For each block of GEMM_NC columns and
 *    GEMM_KC values of K it converts the weights to f32 once (q8_0 dequantised to
 *    values exact in f32, so no activation rounding either), transposed into panels of 16
 *    columns, [panel][k][16] (GEMM_KC * 64 bytes each: one panel stays in L1 while every
 *    6-row tile of a block of GEMM_MC rows streams past).
 *  - The micro-kernel keeps a 6 x 16 tile of fp32 sums in 12 ymm registers for GEMM_KC steps:
 *    per k, two panel loads and six broadcasts feed 12 FMAs. Tiles are added into the output,
 *    which is first set to add + bias, so `add` may be the output itself.
 * Every element's sum runs over the same K blocks in the same order whatever the thread count,
 * so results do not depend on it. */
#ifndef QVL_AVX_GEMM_H
#define QVL_AVX_GEMM_H

#include <stdint.h>

#include "avx_linear.h"

#define GEMM_MR 6
#define GEMM_MC 144 /* rows per block: 24 tiles, 144 KB of a's K block in L2 */

/* Floats of weight-panel scratch avx_gemm_cols needs for up to ncols columns. */
int64_t avx_gemm_bpack_len(int64_t K, int64_t ncols);

/* Columns [j_lo, j_hi) of out for rows [m_lo, m_hi) of a [M, K] (contiguous f32; m_lo a
 * multiple of GEMM_MR; m_hi one too, or M), from w (any dtype; w->cols = K), with bpack
 * (64-byte aligned, avx_gemm_bpack_len(K, j_hi - j_lo) floats) as scratch. bias and add may
 * be NULL; add may equal out. */
void avx_gemm_cols(const float *a, int64_t M, int64_t m_lo, int64_t m_hi,
                   const avx_wmat *w, const float *bias, const float *add, float *out,
                   int64_t ldo, int64_t j_lo, int64_t j_hi, float *bpack);

#endif
