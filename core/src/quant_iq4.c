/* GGUF's IQ4_NL and IQ4_XS: 4-bit indices into 16 fixed non-uniform levels, dequantised to f32
 * (qvl/ggml_types.h). The levels are part of the file format (every writer and reader uses the
 * same 16 integers); they crowd near zero, where trained weights are dense.
 *
 * Values are computed with the f32 operations, in the order, of gguf-py's dequantiser, so they
 * agree bit for bit. Blocks are read byte by byte: files pack them with no alignment.
 *
 * Block layouts (bytes):
 *   IQ4_NL  (32 values)  d f16 | qs[16]
 *           value i: d * K[nibble i], nibble i the low nibble of qs[i] (i < 16) or the high
 *           nibble of qs[i - 16]
 *   IQ4_XS  (256 values) d f16 | scales_h u16 | scales_l[4] | qs[128]
 *           sub-block j = i/32 has the 6-bit scale (low 4 bits: nibble j%2 of scales_l[j/2];
 *           top 2 bits: bits 2j..2j+1 of scales_h), used as scale - 32; value i = 32j + 16k + l
 *           is (d * (scale - 32)) * K[(qs[16j + l] >> 4k) & 15] */
#include <stdint.h>

#include "qvl/ggml_types.h"

static const int8_t iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                      1,    13,   25,  38,  53,  69,  89,  113};

static float f16_at(const uint8_t *p) { return qvl_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

void qvl_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / 32; k++, b += 18) {
        float d = f16_at(b);
        for (int i = 0; i < 32; i++) {
            int q = i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4;
            dst[k * 32 + i] = d * (float)iq4_levels[q];
        }
    }
}

void qvl_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t k = 0; k < n / QVL_QK_K; k++, b += 136) {
        float d = f16_at(b);
        unsigned scales_h = (unsigned)(b[2] | b[3] << 8);
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        float *y = dst + k * QVL_QK_K;
        for (int j = 0; j < 8; j++) {
            int low = (scales_l[j / 2] >> (4 * (j % 2))) & 15;
            int high = (int)(scales_h >> (2 * j)) & 3;
            float step = d * (float)((low | high << 4) - 32);
            for (int i = 0; i < 32; i++) {
                int q = (qs[16 * j + i % 16] >> (4 * (i / 16))) & 15;
                y[32 * j + i] = step * (float)iq4_levels[q];
            }
        }
    }
}
