/* The f32 / f16 / bf16 GEMV of a batched decode step (2 to AVX_GEMV_MAX_ROWS activation rows),
 * each weight element read from memory once for all rows (avx_gemv_rows.c says how). */
#ifndef QVL_AVX_GEMV_ROWS_H
#define QVL_AVX_GEMV_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#include "avx_linear.h"

/* The activations a [M, K] as the kernel reads them: the 16 values of block b (elements 16 b ..
 * 16 b + 15) of row m at out + (b * M + m) * 16, for the K / 16 whole blocks (M * (K / 16) * 16
 * floats); in order for f32 / f16 weights, for bf16 weights as elements 0-3, 8-11, 4-7,
 * 12-15 of the block. */
void avx_gemv_rows_pack(const float *a, int64_t M, int64_t K, bool bf16, float *out);

/* Weight rows [j_lo, j_hi) of w (f32, f16 or bf16, in place) against the M activation rows
 * a [M, K = w->cols] (2 <= M <= AVX_GEMV_MAX_ROWS), into o. a_blocks: a packed by
 * avx_gemv_rows_pack (bf16 set for bf16 weights); a itself is read only past the last whole
 * 16-block. */
void avx_gemv_rows(const float *a_blocks, const float *a, int64_t M, const avx_wmat *w,
                   const avx_cols_out *o, int64_t j_lo, int64_t j_hi);

#endif
