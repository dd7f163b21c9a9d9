/* The int8 GEMM behind avx_linear for q4_k and q6_k weights with more activation rows than
 * the GEMVs take (prefill, vision, a batched decode step of many sequences):
 * out[m, j] = add[m, j] + bias[j] + a[m] . w[j].
 *
 *  - a is quantised once per op to int8 blocks of 32 (avx_quantize_row_q8: scale
 *    d_b = max|a_block|/127 in f32, with the block sums q4_k's min term and q6_k's -32 offset
 *    need), exactly as the decode GEMVs do.
 *  - Each call computes a range of output columns. Weight rows are repacked QG_NR = 8 at a time
 *    into a panel: their quants as bytes (q4_k / q6_k unsigned 0..15 / 0..63), four
 *    consecutive k of one row per 32-bit lane, lane c = weight row c, [K/4][8 rows][4 bytes]; and
 *    per 32-element block the rows' scales side by side (f32 d*sc and dmin*m for q4_k; q6_k: its
 *    int8 sub-block scales as int16 pairs, and its f32 d per super-block).
 *  - The micro-kernel holds QG_MR activation rows x 8 weight rows: per 4 values of k it
 *    broadcasts each row's 4 activation bytes to all lanes and runs one maddubs per row against
 *    the panel vector, so each weight vector loaded serves all QG_MR rows and every lane's sum
 *    stays in its own output column (no horizontal reductions). The integer sums of a 32-block
 *    are exact (bounds in avx_qgemm.c), converted once per block and scaled in f32.
 *  - Panels of QG_COLS columns are repacked together and reused for every row of a; the K loop
 *    is blocked by QG_KC values (a panel's slice stays in L1) and the rows by QG_MC (their
 *    activation slice stays in L2). Partial sums of a K block are added into the output, which
 *    the first block sets to its sum + bias + add, so `add` may be the output itself.
 * Numerics: as the decode GEMVs, the only error beyond f32 rounding is the activation rounding
 * (at most max|a_block|/254 per element); per output the f32 operations are, per 32-block,
 * one product of scales (d*sc*d_b, after the exact d*sc), one FMA of it with the exact integer
 * dot (and for q4_k one FNMADD of dmin*m with d_b*sum(a_q)); blocks are added in k order within
 * a K block, and K blocks in order into the output. Every element's operations are the same
 * whatever the thread count or the column range a thread is given. */
#ifndef QVL_AVX_QGEMM_H
#define QVL_AVX_QGEMM_H

#include <stdint.h>

#include "avx_kquant.h"

#define QG_NR 8    /* weight rows per panel: one 32-bit lane each */
#define QG_COLS 32 /* columns repacked together (4 panels) */

/* Bytes of panel scratch avx_qgemm_cols needs (K = w->cols). */
int64_t avx_qgemm_scratch_bytes(int64_t K);

/* Columns [j_lo, j_hi) of out for all M rows of a (quantised, with its block sums), against w
 * (q4_k or q6_k in place), with scratch (64-byte aligned, avx_qgemm_scratch_bytes(K) bytes). bias and add may be NULL; add may equal out. */
void avx_qgemm_cols(const avx_qrows *a, int64_t M, const avx_wmat *w, const float *bias,
                    const float *add, float *out, int64_t ldo, int64_t j_lo, int64_t j_hi,
                    unsigned char *scratch);

#endif
