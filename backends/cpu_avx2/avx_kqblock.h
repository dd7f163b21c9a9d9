/* The q4_k / q6_k block layouts (docs/QUANT.md) as AVX2 helpers, shared by the in-place
 * kernels (avx_kquant.c) and the panel repacking of the int8 GEMM (avx_qgemm.c). */
#ifndef QVL_AVX_KQBLOCK_H
#define QVL_AVX_KQBLOCK_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "qvl/dtype.h"

#ifndef AVX_INLINE
#define AVX_INLINE static inline __attribute__((always_inline))
#endif

#define Q4K_BYTES ((int64_t)sizeof(qvl_block_q4_k)) /* 144 */
#define Q6K_BYTES ((int64_t)sizeof(qvl_block_q6_k)) /* 210 */
/* Byte offsets inside the blocks (dtype.h's structs, no padding). */
#define Q4K_SCALES 4
#define Q4K_QS 16
#define Q6K_QH 128
#define Q6K_SCALES 192
#define Q6K_D 208

/* A q4_k block's 8 six-bit scales and 8 six-bit mins (docs/QUANT.md), byte j = sub-block j:
 * sc_0..3 and m_0..3 are the low 6 bits of scale bytes 0-3 and 4-7; sc_4..7 and m_4..7 take
 * their low 4 bits from the nibbles of bytes 8-11 and their top 2 from the top bits of bytes
 * 0-3 and 4-7. Done on 32-bit words, four sub-blocks at once. */
AVX_INLINE void q4k_scales(const unsigned char *s, uint64_t *sc, uint64_t *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_hi = (u2 & 0x0F0F0F0Fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t mn_hi = ((u2 >> 4) & 0x0F0F0F0Fu) | ((u1 >> 2) & 0x30303030u);
    *sc = (u0 & 0x3F3F3F3Fu) | (uint64_t)sc_hi << 32;
    *mn = (u1 & 0x3F3F3F3Fu) | (uint64_t)mn_hi << 32;
}

/* d and dmin of a q4_k block, each in all lanes. */
AVX_INLINE void q4k_d(const unsigned char *blk, __m256 *d, __m256 *dmin) {
    uint32_t h;
    memcpy(&h, blk, 4);
    __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128((int)h));
    *d = _mm256_broadcastss_ps(v);
    *dmin = _mm256_broadcastss_ps(_mm_movehdup_ps(v));
}

/* The 6-bit quants of group g (elements 32g .. 32g + 31) of a q6_k block, from the low-bit
 * bytes ql0 = ql[64h ..], ql1 = ql[64h + 32 ..] and qh[32h ..] of its half h = g / 4: quarter
 * r = g % 4 takes the low (r < 2) or high nibble of ql0 (r even) or ql1 (r odd), and bits
 * 2r..2r+1 of qh as bits 4-5. (16-bit shifts: the masks drop what crosses between bytes.) */
AVX_INLINE __m256i q6k_group(__m256i ql0, __m256i ql1, __m256i qh, int r) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F), hi2 = _mm256_set1_epi8(0x30);
    __m256i l = r & 1 ? ql1 : ql0;
    if (r >= 2) l = _mm256_srli_epi16(l, 4);
    __m256i h = r == 0 ? _mm256_slli_epi16(qh, 4) : r == 1 ? _mm256_slli_epi16(qh, 2)
              : r == 2 ? qh : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(_mm256_and_si256(l, lo4), _mm256_and_si256(h, hi2));
}

#endif
