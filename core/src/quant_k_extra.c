/* GGUF's Q2_K, Q3_K and Q5_K super-blocks (256 values): dequantisation to f32
 * (qvl/ggml_types.h). Q4_K and Q6_K, which qvl stores natively, are in quant_k.c.
 *
 * Each value is the sub-block's scale (an f32 product of the f16 super-block scale and a small
 * integer), times the quant, minus the sub-block's offset where the type has mins: rounded in
 * f32 in that order, one operation per statement, as gguf-py computes it, so the results agree
 * bit for bit. Blocks are read byte by byte: files pack them with no alignment.
 *
 * Block layouts (bytes) and where value i's bits sit:
 *   Q2_K  scales[16] | qs[64] | d f16 | dmin f16
 *         sub-block j = i/16: scale = scales[j] & 15, min = scales[j] >> 4;
 *         i = 128h + 32s + l: q = (qs[32h + l] >> 2s) & 3
 *   Q3_K  hmask[32] | qs[64] | scales[12] | d f16
 *         sub-block j = i/16: 6-bit scale, low 4 bits in scales[j] (j < 8) or the high nibble
 *         of scales[j - 8], top 2 bits at bit 2(j/4) of scales[8 + j%4]; used as scale - 32;
 *         i = 128h + 32s + l: q = ((qs[32h + l] >> 2s) & 3) - 4, plus 4 when bit i/32 of
 *         hmask[l] is set (the high bit is stored inverted: set means no -4)
 *   Q5_K  d f16 | dmin f16 | scales[12] | qh[32] | qs[128]
 *         sub-block j = i/32: 6-bit scale and min packed as in Q4_K (docs/QUANT.md);
 *         i = 64c + 32k + l: q = ((qs[32c + l] >> 4k) & 15) | ((qh[l] >> (i/32)) & 1) << 4 */
#include <stdint.h>

#include "qvl/ggml_types.h"

static float f16_at(const uint8_t *p) { return qvl_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

void qvl_dequantize_row_q2_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QVL_QK_K; k++, b += 84) {
        const uint8_t *scales = b, *qs = b + 16;
        float d = f16_at(b + 80), dmin = f16_at(b + 82);
        float *y = dst + k * QVL_QK_K;
        for (int i = 0; i < QVL_QK_K; i++) {
            int j = i / 16, h = i / 128, s = i % 128 / 32, l = i % 32;
            float step = d * (float)(scales[j] & 15);
            float offset = dmin * (float)(scales[j] >> 4);
            float scaled = step * (float)((qs[32 * h + l] >> (2 * s)) & 3);
            y[i] = scaled - offset;
        }
    }
}

static int q3k_scale(const uint8_t *sc, int j) {
    int low = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4;
    int high = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (low | high << 4) - 32;
}

void qvl_dequantize_row_q3_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QVL_QK_K; k++, b += 110) {
        const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
        float d = f16_at(b + 108);
        float *y = dst + k * QVL_QK_K;
        for (int i = 0; i < QVL_QK_K; i++) {
            int h = i / 128, s = i % 128 / 32, l = i % 32;
            int q = (qs[32 * h + l] >> (2 * s)) & 3;
            if (!((hmask[l] >> (i / 32)) & 1)) q -= 4;
            float step = d * (float)q3k_scale(sc, i / 16);
            y[i] = step * (float)q;
        }
    }
}

/* The 6-bit scale and min of sub-block j (0..7) from Q4_K's and Q5_K's 12 packed bytes: bytes
 * 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; scales and mins 4-7 have
 * their low 4 bits in the nibbles of bytes 8-11 and their top 2 bits in the top bits of bytes
 * 0-3 (scales) and 4-7 (mins). */
static void k_scale_min(const uint8_t *s, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = s[j] & 63;
        *mn = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

void qvl_dequantize_row_q5_k(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QVL_QK_K; k++, b += 176) {
        float d = f16_at(b), dmin = f16_at(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *qs = b + 48;
        float *y = dst + k * QVL_QK_K;
        for (int j = 0; j < 8; j++) {
            int sc, mn;
            k_scale_min(scales, j, &sc, &mn);
            float step = d * (float)sc, offset = dmin * (float)mn;
            for (int i = 32 * j; i < 32 * j + 32; i++) {
                int c = i / 64, half = i % 64 / 32, l = i % 32;
                int q = ((qs[32 * c + l] >> (4 * half)) & 15) | ((qh[l] >> j) & 1) << 4;
                float scaled = step * (float)q;
                y[i] = scaled - offset;
            }
        }
    }
}
