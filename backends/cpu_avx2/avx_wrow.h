/* Reading f32 / f16 / bf16 weight rows in place (the GEMVs of avx_linear.c and
 * avx_gemv_rows.c): where row j starts, 8 or 16 elements as f32 vectors, one element as a
 * scalar (tails), and software prefetch ahead of a stream. */
#ifndef QVL_AVX_WROW_H
#define QVL_AVX_WROW_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "avx_linear.h"
#include "qvl/dtype.h"

/* Prefetch `ahead` bytes past p (computed as an integer: the address may lie past the end of
 * the matrix, which a prefetch tolerates but C pointer arithmetic does not). */
static inline __attribute__((always_inline)) void avx_prefetch_ahead(const void *p, int64_t ahead) {
    _mm_prefetch((const char *)((uintptr_t)p + (uintptr_t)ahead), _MM_HINT_T0);
}

/* Bytes of `elems` elements from a block boundary (whole blocks for q8_0, q4_k, q6_k). */
static inline size_t avx_row_bytes_of(qvl_dtype dt, int64_t elems) {
    return (size_t)(elems / (int64_t)qvl_dtype_block_elems(dt)) * qvl_dtype_block_bytes(dt);
}

static inline const unsigned char *avx_w_row(const avx_wmat *w, int64_t j) {
    return w->base + avx_row_bytes_of(w->dt, j * w->row_stride);
}

/* 8 consecutive weights as f32 (f32 or f16 rows). */
static inline __attribute__((always_inline)) __m256 avx_w_load8(qvl_dtype dt, const unsigned char *row,
                                                                int64_t k) {
    if (dt == QVL_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * k)));
    return _mm256_loadu_ps((const float *)row + k);
}

/* One 16-element step of weight row w (k..k+15) as two f32 vectors: bf16 as its even and odd
 * elements (the activations are permuted to match: avx_linear.c's permute_even_odd), f16
 * through F16C, f32 as it is. */
static inline __attribute__((always_inline)) void avx_w_load16(qvl_dtype dt, const unsigned char *w,
                                                               int64_t k, __m256 *w0, __m256 *w1) {
    if (dt == QVL_BF16) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(w + 2 * k));
        *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        *w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
    } else {
        *w0 = avx_w_load8(dt, w, k);
        *w1 = avx_w_load8(dt, w, k + 8);
    }
}

static inline float avx_w_scalar(qvl_dtype dt, const unsigned char *row, int64_t k) {
    uint16_t h;
    switch (dt) {
    case QVL_F16: memcpy(&h, row + 2 * k, 2); return qvl_f16_to_f32(h);
    case QVL_BF16: memcpy(&h, row + 2 * k, 2); return qvl_bf16_to_f32(h);
    default: { float f; memcpy(&f, row + 4 * k, 4); return f; }
    }
}

#endif
