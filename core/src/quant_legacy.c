/* GGUF's 32-value "legacy" types Q4_0, Q4_1, Q5_0 and Q5_1: dequantisation to f32
 * (qvl/ggml_types.h). Blocks are read byte by byte (files pack them with no alignment) and each
 * value is computed with the f32 operations, in the order, that gguf-py's dequantiser uses, so
 * the results agree bit for bit: one product for the symmetric types, a product then a sum for
 * the ones with a min (kept as two statements so the compiler cannot fuse them).
 *
 * Block layouts (bytes):
 *   Q4_0  d f16 | qs[16]                     value i: nibble i of the block, minus 8
 *   Q4_1  d f16 | m f16 | qs[16]
 *   Q5_0  d f16 | qh u32 | qs[16]            value i: nibble i | (bit i of qh) << 4, minus 16
 *   Q5_1  d f16 | m f16 | qh u32 | qs[16]
 * "Nibble i": values 0..15 are the low nibbles of qs[0..15], values 16..31 the high nibbles. */
#include <stdint.h>

#include "qvl/ggml_types.h"

#define QK 32

static float f16_at(const uint8_t *p) { return qvl_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static int nibble(const uint8_t *qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }

static uint32_t u32_at(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void qvl_dequantize_row_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK; k++, b += 18) {
        float d = f16_at(b);
        for (int i = 0; i < QK; i++) dst[k * QK + i] = d * (float)(nibble(b + 2, i) - 8);
    }
}

void qvl_dequantize_row_q4_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK; k++, b += 20) {
        float d = f16_at(b), m = f16_at(b + 2);
        for (int i = 0; i < QK; i++) {
            float scaled = d * (float)nibble(b + 4, i);
            dst[k * QK + i] = scaled + m;
        }
    }
}

void qvl_dequantize_row_q5_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK; k++, b += 22) {
        float d = f16_at(b);
        uint32_t qh = u32_at(b + 2);
        for (int i = 0; i < QK; i++) {
            int q = nibble(b + 6, i) | (int)((qh >> i) & 1) << 4;
            dst[k * QK + i] = d * (float)(q - 16);
        }
    }
}

void qvl_dequantize_row_q5_1(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QK; k++, b += 24) {
        float d = f16_at(b), m = f16_at(b + 2);
        uint32_t qh = u32_at(b + 4);
        for (int i = 0; i < QK; i++) {
            int q = nibble(b + 8, i) | (int)((qh >> i) & 1) << 4;
            float scaled = d * (float)q;
            dst[k * QK + i] = scaled + m;
        }
    }
}
