/* Element types and exact conversions between them.
 *
 * f16 and bf16 conversions from f32 round to nearest, ties to even; NaN stays NaN (quiet),
 * +-Inf stays +-Inf, overflow becomes Inf, f16 subnormals are produced and read exactly.
 * q8_0 stores blocks of 32 values as one f16 scale d and 32 int8 q, value = d * q.
 * q4_k and q6_k store super-blocks of 256 values with the bit layout of GGUF's Q4_K and Q6_K
 * (docs/QUANT.md): q4_k value = d * sc_j * q - dmin * m_j (8 sub-blocks of 32, 6-bit sc_j and
 * m_j, q in 0..15); q6_k value = d * sc_j * (q - 32) (16 sub-blocks of 16, int8 sc_j, q in
 * 0..63). */
#ifndef QVL_DTYPE_H
#define QVL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qvl_dtype {
    QVL_F32 = 0,
    QVL_F16 = 1,
    QVL_BF16 = 2,
    QVL_Q8_0 = 3,
    QVL_I32 = 4, /* token ids, positions, segment bounds */
    QVL_Q4_K = 5,
    QVL_Q6_K = 6,
    QVL_DTYPE_COUNT
} qvl_dtype;

#define QVL_Q8_0_BLOCK 32

typedef struct qvl_block_q8_0 {
    uint16_t d;                 /* f16 scale */
    int8_t qs[QVL_Q8_0_BLOCK];  /* quants */
} qvl_block_q8_0;               /* 34 bytes, no padding */

#define QVL_QK_K 256 /* elements of a q4_k / q6_k super-block */

typedef struct qvl_block_q4_k {
    uint16_t d;                  /* f16 scale of the sub-block scales */
    uint16_t dmin;               /* f16 scale of the sub-block mins */
    uint8_t scales[12];          /* 8 6-bit scales and 8 6-bit mins, packed (docs/QUANT.md) */
    uint8_t qs[QVL_QK_K / 2];    /* 4-bit quants: byte c*32+l holds elements 64c+l (low nibble)
                                    and 64c+32+l (high nibble) */
} qvl_block_q4_k;                /* 144 bytes */

typedef struct qvl_block_q6_k {
    uint8_t ql[QVL_QK_K / 2];    /* low 4 bits of the quants */
    uint8_t qh[QVL_QK_K / 4];    /* high 2 bits of the quants */
    int8_t scales[QVL_QK_K / 16];/* 16 8-bit sub-block scales */
    uint16_t d;                  /* f16 scale of the sub-block scales */
} qvl_block_q6_k;                /* 210 bytes */

/* "f32", "f16", "bf16", "q8_0", "i32", "q4_k", "q6_k"; "?" for an invalid value. */
const char *qvl_dtype_name(qvl_dtype t);
/* Parses the names above; returns false if unknown. */
bool qvl_dtype_parse(const char *name, qvl_dtype *out);
bool qvl_dtype_valid(int t);
/* Elements per storage block (32 for q8_0, 256 for q4_k and q6_k, else 1) and bytes per
 * block. */
size_t qvl_dtype_block_elems(qvl_dtype t);
size_t qvl_dtype_block_bytes(qvl_dtype t);
bool qvl_dtype_is_float(qvl_dtype t); /* f32, f16, bf16 */
bool qvl_dtype_is_quant(qvl_dtype t); /* q8_0, q4_k, q6_k: blocks of several elements */
/* Bytes taken by n consecutive elements; false if n is not a whole number of blocks or the
 * size overflows. */
bool qvl_dtype_row_bytes(qvl_dtype t, int64_t n, size_t *out);

uint16_t qvl_f32_to_f16(float f);
float qvl_f16_to_f32(uint16_t h);
uint16_t qvl_f32_to_bf16(float f);
float qvl_bf16_to_f32(uint16_t b);

/* n must be a multiple of 32. Scale d = max|x| / 127 (stored as f16), q = round(x / d). */
void qvl_quantize_row_q8_0(const float *x, qvl_block_q8_0 *y, int64_t n);
void qvl_dequantize_row_q8_0(const qvl_block_q8_0 *x, float *y, int64_t n);

/* n must be a multiple of 256. The quantisers search each sub-block's scale (and min) for the
 * least squared error weighted by importance w_i = rms(super-block) + |x_i|, then choose the
 * 6- or 8-bit sub-block scales against the f16 super-block scale actually stored and round
 * every quant against the final scales (docs/QUANT.md). With search false they use the plain
 * range (min..max for q4_k, max|x| for q6_k) and round to nearest: the baseline the search is
 * tested against. Non-finite inputs are treated as 0. */
void qvl_quantize_row_q4_k(const float *x, qvl_block_q4_k *y, int64_t n, bool search);
void qvl_quantize_row_q6_k(const float *x, qvl_block_q6_k *y, int64_t n, bool search);
void qvl_dequantize_row_q4_k(const qvl_block_q4_k *x, float *y, int64_t n);
void qvl_dequantize_row_q6_k(const qvl_block_q6_k *x, float *y, int64_t n);
/* Element i (0..255) of one super-block, exactly as the row dequantisation gives it. */
float qvl_q4_k_elem(const qvl_block_q4_k *b, int i);
float qvl_q6_k_elem(const qvl_block_q6_k *b, int i);

/* Convert n contiguous elements between any float dtype (f32/f16/bf16/q8_0/q4_k/q6_k) and
 * f32. For a block dtype n must be a multiple of its block (32 or 256). */
void qvl_to_f32(qvl_dtype from, const void *src, float *dst, int64_t n);
void qvl_from_f32(qvl_dtype to, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
