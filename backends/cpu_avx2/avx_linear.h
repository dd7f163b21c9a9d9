/* The nn.Linear product every matmul-like op runs on: out = a . w^T (+ bias) (+ add).
 *
 * Weights are read in place in their stored dtype (f32, f16, bf16, q8_0, q4_k, q6_k) with fp32
 * accumulation, at any 2-byte alignment (unaligned loads throughout):
 *  - M <= AVX_GEMV_MAX_ROWS rows (decode, a batched decode step of a few sequences): GEMV
 *    straight from the weights, the weight rows split across threads; bf16 is widened into
 *    the high half of f32 lanes (one row: by a shift and a mask, the even/odd elements of a
 *    16-element load; 2 to 8 rows: by unpacking against zero, avx_gemv_rows.c), against
 *    activations permuted to match once per op; f16 with F16C.
 *  - more rows (prefill, vision, a batched decode step of 9 or more sequences): q4_k and q6_k
 *    take the int8 GEMM of avx_qgemm.h (activations quantised as below, weights repacked into
 *    8-row int8 panels); every other dtype, q8_0 included, the blocked f32 GEMM of avx_gemm.h
 *    (weights converted to f32 panels once per op, 6x16 register tiles).
 *  - q8_0 with few rows (decode): a is quantised to int8 blocks of 32 per row (scale
 *    max|x|/127, kept in f32) and dot products run on int8 with maddubs/madd, exact in int32
 *    per block. The only error added beyond the reference's is the activation rounding: each
 *    a element moves by at most half a step, d_a/2 = max|a_block|/254, so per block the dot
 *    product moves by at most sum|w| * max|a_block| / 254 (in practice ~ sqrt(32) * rms|w| *
 *    max|a_block|/254/sqrt(3) as the rounding errors are independent).
 *  - q4_k and q6_k with few rows: the same int8 activation blocks, with per-block sums for the
 *    formats' min / offset terms, and int8 dot products per sub-block (avx_kquant.h); the
 *    same activation-rounding bound holds.
 * Output columns are handed to threads in chunks that are multiples of 16 floats (64 bytes),
 * so two threads never write one cache line of a row when the row starts on a cache line.
 * One-row decode GEMVs read each chunk's weight rows as side-by-side streams (avx_linear.c: 8
 * for f32/f16/bf16, 4 for q8_0, q4_k, q6_k); 2 to 8 rows of f32/f16/bf16 weights take register
 * tiles of 2 weight rows (avx_gemv_rows.c). */
#ifndef QVL_AVX_LINEAR_H
#define QVL_AVX_LINEAR_H

#include <stdint.h>

#include "avx_common.h"

typedef struct avx_wmat {
    const unsigned char *base; /* row 0 */
    qvl_dtype dt;              /* f32, f16, bf16, or q8_0 / q4_k / q6_k (then cols and
                                  row_stride are whole blocks: 32 / 256 / 256) */
    int64_t rows, cols;
    int64_t row_stride;        /* elements between rows; elements within a row are adjacent */
} avx_wmat;

/* Where a weight row's results go: out[m*ldo + j] = dot + bias[j] + add[m*ldo + j]. */
typedef struct avx_cols_out {
    const float *bias; /* [rows] or NULL */
    const float *add;  /* or NULL; may equal out */
    float *out;
    int64_t ldo;
} avx_cols_out;

/* Matrix `batch` (3-D) or the matrix itself (2-D) of tensor t, usable in place when its rows
 * are contiguous (and, for a block dtype, whole blocks); otherwise converted to an f32 copy
 * that is returned in *owned (free() it). QVL_E_NOMEM on allocation failure. */
qvl_status avx_wmat_of(const qvl_tensor *t, int64_t batch, avx_wmat *out, float **owned);

/* out[m*ldo + j] = a[m*K ..] . w[j] + bias[j] + add[m*ldo + j] for m < M, j < w->rows, where
 * a is contiguous f32 [M, K = w->cols]; bias and add may be NULL; add may equal out. */
qvl_status avx_linear(qvl_backend *be, const float *a, int64_t M, const avx_wmat *w,
                      const float *bias, const float *add, float *out, int64_t ldo);

/* Several products of the same a in one pass over the threads (NORM_LINEAR's projections):
 * part p writes output columns [col, col + w->rows) as avx_linear would with out + col and
 * add + col. Rows of all parts are handed out together, so the threads wait for each other
 * once, not once per part, and a is prepared (quantised, permuted or packed) once. Every
 * part's w->cols must be the same K; at most AVX_LINEAR_MAX_PARTS parts (QVL_E_INVALID
 * otherwise). */
#define AVX_LINEAR_MAX_PARTS 4
/* The most activation rows the GEMV path takes. It reads each chunk of weight rows once per
 * tile of activation rows (q8_0: up to 3; the others: all of them), from cache after the first
 * tile, so up to 8 rows (a server's batched decode step) it stays bound by reading the
 * weights once; the f32 GEMM converts the weights to panels and pays off only for many rows. */
#define AVX_GEMV_MAX_ROWS 8
/* From this many rows q4_k / q6_k products (every part of the call) take the int8 GEMM
 * instead. Past AVX_GEMV_MAX_ROWS: with the GEMV's tiles taking all 8 rows of a batched
 * decode step at once, it beat repacking the weights into the GEMM's panels at 8 rows
 * (docs/BENCHMARKS.md). */
#define AVX_QGEMM_MIN_ROWS 9
typedef struct avx_linear_part {
    const avx_wmat *w;
    const float *bias; /* [w->rows] or NULL */
    int64_t col;
    /* qvl_act applied to each finished element (after bias and add): QVL_ACT_NONE (0),
     * GELU_TANH or GELU_ERF, with the GELU kernels' row functions, so a fused activation
     * gives the bits the separate op gives */
    int32_t act;
} avx_linear_part;
qvl_status avx_linear_parts(qvl_backend *be, const float *a, int64_t M,
                            const avx_linear_part *parts, int n_parts, const float *add,
                            float *out, int64_t ldo);

#endif
