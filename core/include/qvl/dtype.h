/* Element types and exact conversions between them.
 *
 * f16 and bf16 conversions from f32 round to nearest, ties to even; NaN stays NaN (quiet),
 * +-Inf stays +-Inf, overflow becomes Inf, f16 subnormals are produced and read exactly.
 * q8_0 stores blocks of 32 values as one f16 scale d and 32 int8 q, value = d * q. */
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
    QVL_DTYPE_COUNT
} qvl_dtype;

#define QVL_Q8_0_BLOCK 32

typedef struct qvl_block_q8_0 {
    uint16_t d;                 /* f16 scale */
    int8_t qs[QVL_Q8_0_BLOCK];  /* quants */
} qvl_block_q8_0;               /* 34 bytes, no padding */

/* "f32", "f16", "bf16", "q8_0", "i32"; "?" for an invalid value. */
const char *qvl_dtype_name(qvl_dtype t);
/* Parses the names above; returns false if unknown. */
bool qvl_dtype_parse(const char *name, qvl_dtype *out);
bool qvl_dtype_valid(int t);
/* Elements per storage block (32 for q8_0, else 1) and bytes per block. */
size_t qvl_dtype_block_elems(qvl_dtype t);
size_t qvl_dtype_block_bytes(qvl_dtype t);
bool qvl_dtype_is_float(qvl_dtype t); /* f32, f16, bf16 */
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

/* Convert n contiguous elements between any float dtype (f32/f16/bf16/q8_0) and f32.
 * For q8_0 n must be a multiple of 32. */
void qvl_to_f32(qvl_dtype from, const void *src, float *dst, int64_t n);
void qvl_from_f32(qvl_dtype to, const float *src, void *dst, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
