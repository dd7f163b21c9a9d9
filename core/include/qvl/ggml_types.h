/* The tensor types of GGUF files (ggml's type ids and block layouts) and how qvl reads them.
 *
 * Every type is stored in blocks along the innermost dimension: block_elems values in
 * block_bytes bytes, little-endian. qvl sorts the types in three groups (docs/QUANT.md, "GGUF
 * tensor types"):
 *
 *   native      F32, F16, BF16, Q8_0, Q4_K, Q6_K, I32: the bytes are a qvl dtype's bytes
 *               (qvl's q8_0/q4_k/q6_k have GGUF's block layout), used as they are;
 *   converted   Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS: dequantised to f32
 *               here (bit for bit what gguf-py's dequantiser gives) and re-stored in a dtype a
 *               backend takes, qvl_ggml_convert_target();
 *   refused     everything else (the IQ1/IQ2/IQ3 grids, TQ1_0, MXFP4, integer tensors but
 *               I32, ...): known by name and size, so a file holding them opens and the one
 *               tensor that needs them is refused in one line naming the type.
 *
 * Dequantisation formulas, value per element (q the stored quant; d, dmin, m f16 scales; the
 * products are rounded in f32 in the order written, as gguf-py computes them):
 *   Q4_0  32/18   d * (q - 8)                 Q4_1  32/20   d * q + m
 *   Q5_0  32/22   d * (q - 16)                Q5_1  32/24   d * q + m
 *   IQ4_NL 32/18  d * K[q] (K: 16 fixed non-uniform levels, -127..113)
 *   Q2_K 256/84   (d * sc) * q - (dmin * mn)  16 sub-blocks of 16, 4-bit sc and mn, q 0..3
 *   Q3_K 256/110  (d * (sc - 32)) * q         16 sub-blocks of 16, 6-bit sc, q -4..3
 *   Q5_K 256/176  (d * sc) * q - (dmin * mn)  8 sub-blocks of 32, 6-bit sc and mn as Q4_K,
 *                                             q 0..31
 *   IQ4_XS 256/136 (d * (sc - 32)) * K[q]     8 sub-blocks of 32, 6-bit sc
 * The bit positions are documented where each is read (quant_legacy.c, quant_k_extra.c,
 * quant_iq4.c). */
#ifndef QVL_GGML_TYPES_H
#define QVL_GGML_TYPES_H

#include <stdbool.h>
#include <stdint.h>

#include "qvl/dtype.h"
#include "qvl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ggml's type ids as GGUF stores them (a tensor info's u32 type). Ids missing here (4, 5, 31-33,
 * 36-38) were removed from the format; qvl_ggml_type_info names them so. */
typedef enum qvl_ggml_type {
    QVL_GGML_F32 = 0,
    QVL_GGML_F16 = 1,
    QVL_GGML_Q4_0 = 2,
    QVL_GGML_Q4_1 = 3,
    QVL_GGML_Q5_0 = 6,
    QVL_GGML_Q5_1 = 7,
    QVL_GGML_Q8_0 = 8,
    QVL_GGML_Q8_1 = 9,
    QVL_GGML_Q2_K = 10,
    QVL_GGML_Q3_K = 11,
    QVL_GGML_Q4_K = 12,
    QVL_GGML_Q5_K = 13,
    QVL_GGML_Q6_K = 14,
    QVL_GGML_Q8_K = 15,
    QVL_GGML_IQ2_XXS = 16,
    QVL_GGML_IQ2_XS = 17,
    QVL_GGML_IQ3_XXS = 18,
    QVL_GGML_IQ1_S = 19,
    QVL_GGML_IQ4_NL = 20,
    QVL_GGML_IQ3_S = 21,
    QVL_GGML_IQ2_S = 22,
    QVL_GGML_IQ4_XS = 23,
    QVL_GGML_I8 = 24,
    QVL_GGML_I16 = 25,
    QVL_GGML_I32 = 26,
    QVL_GGML_I64 = 27,
    QVL_GGML_F64 = 28,
    QVL_GGML_IQ1_M = 29,
    QVL_GGML_BF16 = 30,
    QVL_GGML_TQ1_0 = 34,
    QVL_GGML_TQ2_0 = 35,
    QVL_GGML_MXFP4 = 39,
    QVL_GGML_NVFP4 = 40,
    QVL_GGML_Q1_0 = 41,
    QVL_GGML_Q2_0 = 42,
} qvl_ggml_type;

typedef enum qvl_ggml_support {
    QVL_GGML_REMOVED = 0, /* an id ggml retired: no layout, no data can have it */
    QVL_GGML_NATIVE,      /* read in place as a qvl dtype */
    QVL_GGML_CONVERTED,   /* dequantised here, re-stored as a backend dtype */
    QVL_GGML_REFUSED,     /* known layout, no reader in qvl */
} qvl_ggml_support;

typedef struct qvl_ggml_type_info {
    const char *name;     /* ggml's name: "Q4_K", "IQ4_XS", "BF16" */
    uint32_t block_elems; /* values per block (1 for plain types; 0 when removed) */
    uint32_t block_bytes; /* bytes per block (0 when removed) */
    qvl_ggml_support support;
    qvl_dtype native;     /* the qvl dtype, when support is QVL_GGML_NATIVE */
} qvl_ggml_type_info;

/* The type's description; NULL for an id ggml never had. */
const qvl_ggml_type_info *qvl_ggml_type_get(uint32_t type);

/* Bytes of n consecutive values (n a whole number of blocks); false if the type is unknown or
 * removed, n is not whole blocks, or the size overflows. */
bool qvl_ggml_row_bytes(uint32_t type, int64_t n, uint64_t *out);

/* Dequantises n values (whole blocks) of any native or converted type but I32 to f32: exactly
 * qvl_to_f32 for the native ones. src may be unaligned. Returns false (dst untouched) for
 * other types or n not whole blocks. */
bool qvl_ggml_to_f32(uint32_t type, const void *src, float *dst, int64_t n);

/* The per-family dequantisers behind qvl_ggml_to_f32; n is a multiple of the block (32 or
 * 256), src holds n / block_elems blocks and may be unaligned. */
void qvl_dequantize_row_q4_0(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_q4_1(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_q5_0(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_q5_1(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_q2_k(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_q3_k(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_q5_k(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_iq4_nl(const void *src, float *dst, int64_t n);
void qvl_dequantize_row_iq4_xs(const void *src, float *dst, int64_t n);

/* The backend dtype a converted type becomes, for rows of row_elems values: q8_0 where it holds
 * the values exactly, otherwise the smallest of q4_k, q6_k, q8_0 that adds at most 3% to the
 * RMS error the source type already carries (measured on normal data: docs/QUANT.md):
 *   Q4_0, Q5_0, IQ4_NL -> q8_0, exactly: each value is the block's f16 scale times an integer
 *                        in -127..127 (q - 8, q - 16, a level of K), which is a q8_0 block
 *                        with the same scale, so nothing is lost;
 *   Q2_K, Q4_1 -> q4_k   (Q4_1's scale and min per 32 values are a q4_k sub-block's, kept to 6
 *                        bits of the super-block scales; Q2_K's 4 levels fit q4_k's 16);
 *   Q3_K, IQ4_XS -> q6_k (symmetric sub-blocks, as q6_k's);
 *   Q5_1, Q5_K -> q8_0   (q6_k would add about 9% to their error, q8_0 1%).
 * q4_k and q6_k need rows of whole 256-value super-blocks: a Q4_1 tensor with other rows
 * becomes q8_0. Native types return their own dtype. false for refused, removed or unknown
 * types and rows that are not whole blocks of the source. */
bool qvl_ggml_convert_target(uint32_t type, int64_t row_elems, qvl_dtype *out);

/* What a conversion changed: sums over the converted values of (converted - source)^2 and
 * source^2, the source being the dequantised values. Added to, so one tensor converted in
 * several calls (rows split between threads) gives one figure. */
typedef struct qvl_ggml_convert_error {
    double err_sq;
    double ref_sq;
} qvl_ggml_convert_error;

/* RMS(converted - source) / RMS(source); 0 when nothing changed (also for an all-zero
 * source). */
double qvl_ggml_rel_rms(const qvl_ggml_convert_error *e);

/* Converts rows x row_elems values of type `type` at src (may be unaligned) to dtype `to` (f32,
 * f16, bf16, q8_0, q4_k or q6_k; rows whole blocks of both) at dst, which holds rows *
 * qvl_dtype_row_bytes(to, row_elems) bytes aligned for that dtype. The exact Q4_0/Q5_0/IQ4_NL
 * -> q8_0 path copies each block's scale and integers; every other path dequantises a row to
 * f32 and quantises it with qvl_from_f32. When e is not NULL the error is added to it.
 * Errors are one line naming `name` and the types: a refused, removed or unknown type, rows
 * that are not whole blocks, a target that is not a float or block dtype, a source value that
 * is not finite (a NaN or Inf scale), out of memory. */
qvl_status qvl_ggml_convert(const char *name, uint32_t type, const void *src, int64_t rows,
                            int64_t row_elems, qvl_dtype to, void *dst, qvl_ggml_convert_error *e,
                            qvl_error *err);

#ifdef __cplusplus
}
#endif
#endif
