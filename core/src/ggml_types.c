/* GGUF tensor types: the table of ggml's ids, dequantisation of every type qvl reads, and the
 * conversion of the types no backend reads into ones they do (qvl/ggml_types.h). */
#include "qvl/ggml_types.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/checked.h"

#define NAT(n, e, b, dt) {n, e, b, QVL_GGML_NATIVE, dt}
#define CONV(n, e, b) {n, e, b, QVL_GGML_CONVERTED, QVL_F32}
#define REF(n, e, b) {n, e, b, QVL_GGML_REFUSED, QVL_F32}
#define GONE(n) {n, 0, 0, QVL_GGML_REMOVED, QVL_F32}

/* Sizes are the format's (block values, block bytes); K = 256. */
static const qvl_ggml_type_info types[] = {
    [QVL_GGML_F32] = NAT("F32", 1, 4, QVL_F32),
    [QVL_GGML_F16] = NAT("F16", 1, 2, QVL_F16),
    [QVL_GGML_Q4_0] = CONV("Q4_0", 32, 18),
    [QVL_GGML_Q4_1] = CONV("Q4_1", 32, 20),
    [4] = GONE("Q4_2"),
    [5] = GONE("Q4_3"),
    [QVL_GGML_Q5_0] = CONV("Q5_0", 32, 22),
    [QVL_GGML_Q5_1] = CONV("Q5_1", 32, 24),
    [QVL_GGML_Q8_0] = NAT("Q8_0", 32, 34, QVL_Q8_0),
    [QVL_GGML_Q8_1] = REF("Q8_1", 32, 40),
    [QVL_GGML_Q2_K] = CONV("Q2_K", 256, 84),
    [QVL_GGML_Q3_K] = CONV("Q3_K", 256, 110),
    [QVL_GGML_Q4_K] = NAT("Q4_K", 256, 144, QVL_Q4_K),
    [QVL_GGML_Q5_K] = CONV("Q5_K", 256, 176),
    [QVL_GGML_Q6_K] = NAT("Q6_K", 256, 210, QVL_Q6_K),
    [QVL_GGML_Q8_K] = REF("Q8_K", 256, 292),
    [QVL_GGML_IQ2_XXS] = REF("IQ2_XXS", 256, 66),
    [QVL_GGML_IQ2_XS] = REF("IQ2_XS", 256, 74),
    [QVL_GGML_IQ3_XXS] = REF("IQ3_XXS", 256, 98),
    [QVL_GGML_IQ1_S] = REF("IQ1_S", 256, 50),
    [QVL_GGML_IQ4_NL] = CONV("IQ4_NL", 32, 18),
    [QVL_GGML_IQ3_S] = REF("IQ3_S", 256, 110),
    [QVL_GGML_IQ2_S] = REF("IQ2_S", 256, 82),
    [QVL_GGML_IQ4_XS] = CONV("IQ4_XS", 256, 136),
    [QVL_GGML_I8] = REF("I8", 1, 1),
    [QVL_GGML_I16] = REF("I16", 1, 2),
    [QVL_GGML_I32] = NAT("I32", 1, 4, QVL_I32),
    [QVL_GGML_I64] = REF("I64", 1, 8),
    [QVL_GGML_F64] = REF("F64", 1, 8),
    [QVL_GGML_IQ1_M] = REF("IQ1_M", 256, 56),
    [QVL_GGML_BF16] = NAT("BF16", 1, 2, QVL_BF16),
    [31] = GONE("Q4_0_4_4"),
    [32] = GONE("Q4_0_4_8"),
    [33] = GONE("Q4_0_8_8"),
    [QVL_GGML_TQ1_0] = REF("TQ1_0", 256, 54),
    [QVL_GGML_TQ2_0] = REF("TQ2_0", 256, 66),
    [36] = GONE("IQ4_NL_4_4"),
    [37] = GONE("IQ4_NL_4_8"),
    [38] = GONE("IQ4_NL_8_8"),
    [QVL_GGML_MXFP4] = REF("MXFP4", 32, 17),
    [QVL_GGML_NVFP4] = REF("NVFP4", 64, 36),
    [QVL_GGML_Q1_0] = REF("Q1_0", 128, 18),
    [QVL_GGML_Q2_0] = REF("Q2_0", 64, 18),
};

const qvl_ggml_type_info *qvl_ggml_type_get(uint32_t type) {
    if (type >= sizeof types / sizeof types[0] || !types[type].name) return NULL;
    return &types[type];
}

bool qvl_ggml_row_bytes(uint32_t type, int64_t n, uint64_t *out) {
    const qvl_ggml_type_info *t = qvl_ggml_type_get(type);
    if (!t || !t->block_elems || n < 0 || (uint64_t)n % t->block_elems) return false;
    uint64_t blocks = (uint64_t)n / t->block_elems;
    if (blocks > UINT64_MAX / t->block_bytes) return false;
    *out = blocks * t->block_bytes;
    return true;
}

/* A native block type at a possibly unaligned address: each block is copied into an aligned
 * one and dequantised by core's own routine. */
static void native_blocks_to_f32(qvl_dtype dt, const uint8_t *src, float *dst, int64_t n) {
    union {
        qvl_block_q8_0 q8;
        qvl_block_q4_k q4;
        qvl_block_q6_k q6;
    } blk;
    const size_t bytes = qvl_dtype_block_bytes(dt), elems = qvl_dtype_block_elems(dt);
    for (int64_t k = 0; k < n / (int64_t)elems; k++) {
        memcpy(&blk, src + (size_t)k * bytes, bytes);
        qvl_to_f32(dt, &blk, dst + (size_t)k * elems, (int64_t)elems);
    }
}

bool qvl_ggml_to_f32(uint32_t type, const void *src, float *dst, int64_t n) {
    const qvl_ggml_type_info *t = qvl_ggml_type_get(type);
    if (!t || !src || !dst || n < 0 || !t->block_elems || (uint64_t)n % t->block_elems) return false;
    const uint8_t *s = src;
    switch ((qvl_ggml_type)type) {
    case QVL_GGML_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return true;
    case QVL_GGML_F16:
    case QVL_GGML_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(s[2 * i] | s[2 * i + 1] << 8);
            dst[i] = type == QVL_GGML_F16 ? qvl_f16_to_f32(h) : qvl_bf16_to_f32(h);
        }
        return true;
    case QVL_GGML_Q8_0:
    case QVL_GGML_Q4_K:
    case QVL_GGML_Q6_K: native_blocks_to_f32(t->native, s, dst, n); return true;
    case QVL_GGML_Q4_0: qvl_dequantize_row_q4_0(src, dst, n); return true;
    case QVL_GGML_Q4_1: qvl_dequantize_row_q4_1(src, dst, n); return true;
    case QVL_GGML_Q5_0: qvl_dequantize_row_q5_0(src, dst, n); return true;
    case QVL_GGML_Q5_1: qvl_dequantize_row_q5_1(src, dst, n); return true;
    case QVL_GGML_Q2_K: qvl_dequantize_row_q2_k(src, dst, n); return true;
    case QVL_GGML_Q3_K: qvl_dequantize_row_q3_k(src, dst, n); return true;
    case QVL_GGML_Q5_K: qvl_dequantize_row_q5_k(src, dst, n); return true;
    case QVL_GGML_IQ4_NL: qvl_dequantize_row_iq4_nl(src, dst, n); return true;
    case QVL_GGML_IQ4_XS: qvl_dequantize_row_iq4_xs(src, dst, n); return true;
    default: return false; /* I32 and the refused types */
    }
}

bool qvl_ggml_convert_target(uint32_t type, int64_t row_elems, qvl_dtype *out) {
    const qvl_ggml_type_info *t = qvl_ggml_type_get(type);
    if (!t || row_elems < 0 || !t->block_elems || (uint64_t)row_elems % t->block_elems) return false;
    if (t->support == QVL_GGML_NATIVE) {
        *out = t->native;
        return true;
    }
    if (t->support != QVL_GGML_CONVERTED) return false;
    switch ((qvl_ggml_type)type) {
    case QVL_GGML_Q4_0:
    case QVL_GGML_Q5_0:
    case QVL_GGML_IQ4_NL:
    case QVL_GGML_Q5_1:
    case QVL_GGML_Q5_K: *out = QVL_Q8_0; return true;
    case QVL_GGML_Q2_K: *out = QVL_Q4_K; return true; /* its rows are whole 256s */
    case QVL_GGML_Q3_K:
    case QVL_GGML_IQ4_XS: *out = QVL_Q6_K; return true;
    case QVL_GGML_Q4_1: *out = row_elems % QVL_QK_K ? QVL_Q8_0 : QVL_Q4_K; return true;
    default: return false;
    }
}

double qvl_ggml_rel_rms(const qvl_ggml_convert_error *e) {
    if (!e || !(e->err_sq > 0)) return 0;
    return e->ref_sq > 0 ? sqrt(e->err_sq / e->ref_sq) : INFINITY;
}

/* The exact path: a 32-value block whose values are its f16 scale times integers in -127..127
 * becomes the q8_0 block with that scale and those integers. The integers come from
 * dequantising the block with scale 1.0 (the f16 0x3C00), which gives them exactly. */
static void exact_to_q8_0(uint32_t type, const uint8_t *src, qvl_block_q8_0 *dst, int64_t n) {
    const size_t bytes = qvl_ggml_type_get(type)->block_bytes;
    uint8_t one[24];
    float ints[32];
    for (int64_t k = 0; k < n / 32; k++, src += bytes) {
        memcpy(one, src, bytes);
        one[0] = 0x00;
        one[1] = 0x3C;
        qvl_ggml_to_f32(type, one, ints, 32);
        dst[k].d = (uint16_t)(src[0] | src[1] << 8);
        for (int i = 0; i < 32; i++) dst[k].qs[i] = (int8_t)ints[i];
    }
}

qvl_status qvl_ggml_convert(const char *name, uint32_t type, const void *src, int64_t rows,
                            int64_t row_elems, qvl_dtype to, void *dst, qvl_ggml_convert_error *e,
                            qvl_error *err) {
    if (!name) name = "?";
    const qvl_ggml_type_info *t = qvl_ggml_type_get(type);
    if (!t) return qvl_fail(err, QVL_E_UNSUPPORTED, "tensor '%.200s': unknown ggml type %u", name, type);
    if (t->support == QVL_GGML_REMOVED)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "tensor '%.200s': type %s (%u) was removed from "
                        "GGUF; convert the model again", name, t->name, type);
    if (t->support == QVL_GGML_REFUSED || type == QVL_GGML_I32)
        return qvl_fail(err, QVL_E_UNSUPPORTED, "tensor '%.200s' is %s, which qvl cannot read "
                        "(docs/QUANT.md lists the GGUF types it reads)", name, t->name);
    if (!qvl_dtype_is_float(to) && !qvl_dtype_is_quant(to))
        return qvl_fail(err, QVL_E_DTYPE, "tensor '%.200s': cannot convert %s to %s", name, t->name,
                        qvl_dtype_name(to));
    size_t dst_row;
    if (rows < 0 || row_elems < 0 || (uint64_t)row_elems % t->block_elems ||
        !qvl_dtype_row_bytes(to, row_elems, &dst_row))
        return qvl_fail(err, QVL_E_SHAPE, "tensor '%.200s': rows of %lld values are not whole "
                        "blocks of %s and %s", name, (long long)row_elems, t->name,
                        qvl_dtype_name(to));
    uint64_t src_row;
    if (!qvl_ggml_row_bytes(type, row_elems, &src_row) || src_row > SIZE_MAX)
        return qvl_fail(err, QVL_E_LIMIT, "tensor '%.200s': rows are too large", name);
    if (rows == 0 || row_elems == 0) return QVL_OK; /* no values: nothing to allocate */
    const bool exact = to == QVL_Q8_0 && (type == QVL_GGML_Q4_0 || type == QVL_GGML_Q5_0 ||
                                          type == QVL_GGML_IQ4_NL);
    size_t nf;
    if (!qvl_mul_size((size_t)row_elems, 2 * sizeof(float), &nf))
        return qvl_fail(err, QVL_E_LIMIT, "tensor '%.200s': rows are too large", name);
    float *ref = malloc(nf ? nf : 1);
    if (!ref) return qvl_fail(err, QVL_E_NOMEM, "tensor '%.200s': out of memory", name);
    float *back = ref + row_elems;
    double err_sq = 0, ref_sq = 0;
    for (int64_t r = 0; r < rows; r++) {
        const uint8_t *s = (const uint8_t *)src + (size_t)r * src_row;
        uint8_t *d = (uint8_t *)dst + (size_t)r * dst_row;
        qvl_ggml_to_f32(type, s, ref, row_elems);
        for (int64_t i = 0; i < row_elems; i++) {
            if (!isfinite(ref[i])) {
                free(ref);
                return qvl_fail(err, QVL_E_INVALID, "tensor '%.200s': value %lld of row %lld is "
                                "not finite (a NaN or Inf scale in its %s block)", name,
                                (long long)i, (long long)r, t->name);
            }
        }
        if (exact) exact_to_q8_0(type, s, (qvl_block_q8_0 *)d, row_elems);
        else qvl_from_f32(to, ref, d, row_elems);
        qvl_to_f32(to, d, back, row_elems);
        for (int64_t i = 0; i < row_elems; i++) {
            double diff = (double)back[i] - (double)ref[i];
            err_sq += diff * diff;
            ref_sq += (double)ref[i] * ref[i];
        }
    }
    free(ref);
    if (e) {
        e->err_sq += err_sq;
        e->ref_sq += ref_sq;
    }
    return QVL_OK;
}
