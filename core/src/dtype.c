/* Element types: names, storage sizes, and the f16/bf16/q8_0 conversions.
 *
 * The half-precision conversions work on bit patterns so that results do not depend on the
 * compiler, the FPU rounding mode or the presence of F16C. */
#include "qvl/dtype.h"

#include <math.h>
#include <string.h>

#include "qvl/checked.h"

static const char *const dtype_names[QVL_DTYPE_COUNT] = {
    [QVL_F32] = "f32", [QVL_F16] = "f16", [QVL_BF16] = "bf16", [QVL_Q8_0] = "q8_0", [QVL_I32] = "i32",
    [QVL_Q4_K] = "q4_k", [QVL_Q6_K] = "q6_k",
};

_Static_assert(sizeof(qvl_block_q8_0) == 2 + QVL_Q8_0_BLOCK, "q8_0 block must be 34 bytes");
_Static_assert(sizeof(qvl_block_q4_k) == 144, "q4_k block must be 144 bytes (GGUF Q4_K)");
_Static_assert(sizeof(qvl_block_q6_k) == 210, "q6_k block must be 210 bytes (GGUF Q6_K)");

bool qvl_dtype_valid(int t) {
    return t >= 0 && t < QVL_DTYPE_COUNT;
}

const char *qvl_dtype_name(qvl_dtype t) {
    return qvl_dtype_valid((int)t) ? dtype_names[t] : "?";
}

bool qvl_dtype_parse(const char *name, qvl_dtype *out) {
    if (!name) return false;
    for (int t = 0; t < QVL_DTYPE_COUNT; t++) {
        if (strcmp(name, dtype_names[t]) == 0) {
            if (out) *out = (qvl_dtype)t;
            return true;
        }
    }
    return false;
}

size_t qvl_dtype_block_elems(qvl_dtype t) {
    if (t == QVL_Q8_0) return QVL_Q8_0_BLOCK;
    return t == QVL_Q4_K || t == QVL_Q6_K ? QVL_QK_K : 1;
}

size_t qvl_dtype_block_bytes(qvl_dtype t) {
    switch (t) {
    case QVL_F32: return 4;
    case QVL_F16: return 2;
    case QVL_BF16: return 2;
    case QVL_Q8_0: return sizeof(qvl_block_q8_0);
    case QVL_I32: return 4;
    case QVL_Q4_K: return sizeof(qvl_block_q4_k);
    case QVL_Q6_K: return sizeof(qvl_block_q6_k);
    case QVL_DTYPE_COUNT: break;
    }
    return 0; /* invalid dtype */
}

bool qvl_dtype_is_float(qvl_dtype t) {
    return t == QVL_F32 || t == QVL_F16 || t == QVL_BF16;
}

bool qvl_dtype_is_quant(qvl_dtype t) {
    return t == QVL_Q8_0 || t == QVL_Q4_K || t == QVL_Q6_K;
}

bool qvl_dtype_row_bytes(qvl_dtype t, int64_t n, size_t *out) {
    if (!qvl_dtype_valid((int)t) || n < 0) return false;
    size_t per = qvl_dtype_block_elems(t);
    if ((uint64_t)n % per != 0) return false;
    size_t bytes;
    if (!qvl_mul_size((size_t)((uint64_t)n / per), qvl_dtype_block_bytes(t), &bytes)) return false;
    if (out) *out = bytes;
    return true;
}

/* ---- f16 / bf16 ------------------------------------------------------------------------- */

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t qvl_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;

    if (ax >= 0x7f800000u) {
        if (ax == 0x7f800000u) return sign | 0x7c00u;
        /* NaN: keep the top payload bits and force the quiet bit so it never becomes Inf. */
        return sign | 0x7e00u | (uint16_t)((ax >> 13) & 0x3ffu);
    }
    /* 65520 is halfway between 65504 (odd mantissa) and 2^16: ties to even go to Inf. */
    if (ax >= 0x477ff000u) return sign | 0x7c00u;

    if (ax < 0x38800000u) {
        /* Below 2^-14: the result is an f16 subnormal (or zero), i.e. a multiple of 2^-24.
         * Up to 2^-25 inclusive rounds to zero (2^-25 itself is a tie with even 0). */
        if (ax <= 0x33000000u) return sign;
        uint32_t exp = ax >> 23; /* 102..112 here */
        uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
        /* value = mant * 2^(exp-150); in units of 2^-24 that is mant >> (126 - exp). */
        uint32_t shift = 126u - exp; /* 14..24 */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q++; /* may carry into the smallest normal */
        return sign | (uint16_t)q;
    }

    /* Normal: round the 13 dropped mantissa bits to nearest even (a carry may bump the
     * exponent, which is still correct), then rebias the exponent from 127 to 15. */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    r -= (uint32_t)(127 - 15) << 23;
    return sign | (uint16_t)(r >> 13);
}

float qvl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;

    if (exp == 0x1f) {
        if (mant == 0) return bits_f32(sign | 0x7f800000u);
        return bits_f32(sign | 0x7fc00000u | (mant << 13)); /* quiet NaN, payload kept */
    }
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        /* Subnormal mant * 2^-24: normalise so the leading 1 sits at bit 10. */
        uint32_t e = 127 - 14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    return bits_f32(sign | ((exp + (127 - 15)) << 23) | (mant << 13));
}

uint16_t qvl_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        /* NaN: truncate and set the quiet bit so the payload cannot vanish into Inf. */
        return (uint16_t)((x >> 16) | 0x0040u);
    }
    /* Round to nearest even on the low 16 bits; overflow carries into Inf naturally. */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float qvl_bf16_to_f32(uint16_t b) {
    return bits_f32((uint32_t)b << 16);
}

/* ---- q8_0 ------------------------------------------------------------------------------- */

/* Largest finite f16, used to saturate a scale that would otherwise overflow to Inf. */
#define F16_MAX 65504.0f

void qvl_quantize_row_q8_0(const float *x, qvl_block_q8_0 *y, int64_t n) {
    if (!x || !y || n <= 0) return;
    int64_t nb = n / QVL_Q8_0_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + b * QVL_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < QVL_Q8_0_BLOCK; i++) {
            float a = fabsf(xb[i]);
            if (a > amax) amax = a; /* NaN never wins the comparison */
        }
        float d = amax / 127.0f;
        if (d > F16_MAX) d = F16_MAX; /* Inf input or huge block: saturate instead of Inf */
        y[b].d = qvl_f32_to_f16(d);
        /* Quantize against the scale actually stored (the f16-rounded d), so the only error
         * beyond d/2 per element is the clamp at +-127 when f16 rounded d down. */
        float dq = qvl_f16_to_f32(y[b].d);
        for (int i = 0; i < QVL_Q8_0_BLOCK; i++) {
            float v = dq > 0.0f ? xb[i] / dq : 0.0f;
            int q;
            if (v != v) q = 0; /* NaN input */
            else if (v >= 127.0f) q = 127;
            else if (v <= -127.0f) q = -127;
            else q = (int)roundf(v); /* nearest, ties away from zero */
            y[b].qs[i] = (int8_t)q;
        }
    }
}

void qvl_dequantize_row_q8_0(const qvl_block_q8_0 *x, float *y, int64_t n) {
    if (!x || !y || n <= 0) return;
    int64_t nb = n / QVL_Q8_0_BLOCK;
    for (int64_t b = 0; b < nb; b++) {
        float d = qvl_f16_to_f32(x[b].d);
        for (int i = 0; i < QVL_Q8_0_BLOCK; i++) y[b * QVL_Q8_0_BLOCK + i] = d * (float)x[b].qs[i];
    }
}

/* ---- bulk conversion --------------------------------------------------------------------- */
/* i32 is not a float dtype: both functions leave dst untouched for it (and for invalid
 * dtypes). Callers that need integer data as floats convert it themselves. */

void qvl_to_f32(qvl_dtype from, const void *src, float *dst, int64_t n) {
    if (!src || !dst || n <= 0) return;
    switch (from) {
    case QVL_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case QVL_F16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = qvl_f16_to_f32(s[i]);
        break;
    }
    case QVL_BF16: {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++) dst[i] = qvl_bf16_to_f32(s[i]);
        break;
    }
    case QVL_Q8_0:
        qvl_dequantize_row_q8_0(src, dst, n);
        break;
    case QVL_Q4_K:
        qvl_dequantize_row_q4_k(src, dst, n);
        break;
    case QVL_Q6_K:
        qvl_dequantize_row_q6_k(src, dst, n);
        break;
    case QVL_I32:
    case QVL_DTYPE_COUNT:
        break;
    }
}

void qvl_from_f32(qvl_dtype to, const float *src, void *dst, int64_t n) {
    if (!src || !dst || n <= 0) return;
    switch (to) {
    case QVL_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case QVL_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = qvl_f32_to_f16(src[i]);
        break;
    }
    case QVL_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = qvl_f32_to_bf16(src[i]);
        break;
    }
    case QVL_Q8_0:
        qvl_quantize_row_q8_0(src, dst, n);
        break;
    case QVL_Q4_K:
        qvl_quantize_row_q4_k(src, dst, n, true);
        break;
    case QVL_Q6_K:
        qvl_quantize_row_q6_k(src, dst, n, true);
        break;
    case QVL_I32:
    case QVL_DTYPE_COUNT:
        break;
    }
}
