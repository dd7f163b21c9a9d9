/* q4_k and q6_k: the super-block layouts of GGUF's Q4_K and Q6_K (docs/QUANT.md), their exact
 * dequantisation, and quantisers that search the sub-block scales.
 *
 * Both formats have two levels of scale: each sub-block has a small integer scale (and, for
 * q4_k, a min) that multiplies one f16 scale per super-block. The quantiser therefore works
 * in three steps per super-block: (1) the best real-valued scale (and min) for each sub-block,
 * (2) the f16 super-block scale and the integer sub-block scales, searched against the f16
 * value actually stored, (3) every quant rounded against the final scales. Step 3 alone is
 * what makes the stored block exact for its own scales; steps 1 and 2 choose the scales. */
#include <math.h>
#include <string.h>

#include "qvl/dtype.h"

#define F16_MAX 65504.0f
#define Q4_SUB 32  /* q4_k sub-block: 8 per super-block */
#define Q6_SUB 16  /* q6_k sub-block: 16 per super-block */
#define N_CANDIDATES 10 /* scale candidates tried either side of the plain range, step 0.1 */

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

/* v rounded half away from zero (lroundf's rule) into lo..hi. Inline: the quantisers round
 * millions of times per tensor and a libm call per value dominated their time. |v| + 0.5 is
 * exact in double for any float below 2^29, so truncating it rounds exactly as lroundf. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo; /* also NaN */
    if (v >= (float)hi) return hi;
    return v >= 0 ? (int)((double)v + 0.5) : -(int)((double)-v + 0.5);
}

/* f16 of a non-negative scale, saturated instead of Inf. */
static uint16_t f16_scale(float s) { return qvl_f32_to_f16(clampf(s, 0.0f, F16_MAX)); }

/* The super-block's values with non-finite ones as 0, and the importance weights
 * w_i = rms + |x_i|: larger values weigh more, yet small ones still count. */
static void prepare(const float *x, float *xs, float *w) {
    double sum2 = 0;
    for (int i = 0; i < QVL_QK_K; i++) {
        xs[i] = isfinite(x[i]) ? x[i] : 0.0f;
        sum2 += (double)xs[i] * xs[i];
    }
    float rms = (float)sqrt(sum2 / QVL_QK_K);
    for (int i = 0; i < QVL_QK_K; i++) w[i] = rms + fabsf(xs[i]);
}

/* ---- q4_k ---------------------------------------------------------------------------------- */

/* 12 bytes hold 8 6-bit scales sc_j and 8 6-bit mins m_j: bytes 0-3 carry sc_0..3 in their low
 * 6 bits and the top 2 bits of sc_4..7 above; bytes 4-7 the same for the mins; bytes 8-11 the
 * low 4 bits of sc_4..7 (low nibble) and of m_4..7 (high nibble). */
static void q4k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void q4k_pack_scales(uint8_t *s, const int sc[8], const int m[8]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* Sub-block j's step and offset: value = step * q - offset. */
static void q4k_sub(const qvl_block_q4_k *b, int j, float *step, float *offset) {
    int sc, m;
    q4k_scale_min(b->scales, j, &sc, &m);
    *step = qvl_f16_to_f32(b->d) * (float)sc;
    *offset = qvl_f16_to_f32(b->dmin) * (float)m;
}

static int q4k_quant(const qvl_block_q4_k *b, int i) {
    uint8_t byte = b->qs[i / 64 * 32 + i % 32];
    return i % 64 < 32 ? byte & 0xF : byte >> 4;
}

float qvl_q4_k_elem(const qvl_block_q4_k *b, int i) {
    float step, offset;
    q4k_sub(b, i / Q4_SUB, &step, &offset);
    return step * (float)q4k_quant(b, i) - offset;
}

void qvl_dequantize_row_q4_k(const qvl_block_q4_k *x, float *y, int64_t n) {
    if (!x || !y || n <= 0) return;
    for (int64_t b = 0; b < n / QVL_QK_K; b++) {
        for (int j = 0; j < QVL_QK_K / Q4_SUB; j++) {
            float step, offset;
            q4k_sub(&x[b], j, &step, &offset);
            for (int i = j * Q4_SUB; i < (j + 1) * Q4_SUB; i++)
                y[b * QVL_QK_K + i] = step * (float)q4k_quant(&x[b], i) - offset;
        }
    }
}

/* Weighted squared error of n values as step * q - offset, q rounded into 0..nmax. */
static double affine_error(const float *x, const float *w, int n, float step, float offset, int nmax) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        int q = step > 0 ? round_clamp((x[i] + offset) / step, 0, nmax) : 0;
        double d = (double)step * q - offset - x[i];
        e += w[i] * d * d;
    }
    return e;
}

/* Step 1 for q4_k: a step > 0 and an offset >= 0 (value = step * q - offset, q in 0..nmax).
 * Plain: the range [min(x, 0), max x] split into nmax steps. Search: for inverse steps around
 * the plain one, round, then refit step and offset by weighted least squares for those quants
 * (offset kept >= 0), and keep whatever has the least weighted error. */
static void fit_affine(const float *x, const float *w, int n, int nmax, bool search, float *step,
                       float *offset) {
    float lo = 0.0f, hi = x[0];
    for (int i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    *offset = -lo;
    *step = hi > lo ? (hi - lo) / (float)nmax : 0.0f;
    if (!search || !(*step > 0)) return;
    double best = affine_error(x, w, n, *step, *offset, nmax);
    double sw = 0, sx = 0; /* the same for every candidate */
    for (int i = 0; i < n; i++) {
        sw += w[i];
        sx += w[i] * x[i];
    }
    for (int k = -N_CANDIDATES; k <= N_CANDIDATES; k++) {
        float inv = ((float)nmax + 0.1f * (float)k) / (hi - lo);
        double sq = 0, sqq = 0, sqx = 0;
        for (int i = 0; i < n; i++) {
            int q = round_clamp(inv * (x[i] - lo), 0, nmax);
            sq += w[i] * q;
            sqq += w[i] * q * q;
            sqx += w[i] * q * x[i];
        }
        double det = sw * sqq - sq * sq, s, b; /* value = s * q + b */
        if (!(det > 0)) continue;
        s = (sw * sqx - sq * sx) / det;
        b = (sqq * sx - sq * sqx) / det;
        if (b > 0) { /* the offset must be >= 0: refit the step alone through 0 */
            b = 0;
            s = sqq > 0 ? sqx / sqq : 0;
        }
        if (!(s > 0)) continue;
        double e = affine_error(x, w, n, (float)s, (float)-b, nmax);
        if (e < best) {
            best = e;
            *step = (float)s;
            *offset = (float)-b;
        }
    }
}

static void quantize_block_q4_k(const float *x, qvl_block_q4_k *y, bool search) {
    float xs[QVL_QK_K], w[QVL_QK_K], step[8], offset[8];
    prepare(x, xs, w);
    float max_step = 0, max_offset = 0;
    for (int j = 0; j < 8; j++) {
        fit_affine(xs + j * Q4_SUB, w + j * Q4_SUB, Q4_SUB, 15, search, &step[j], &offset[j]);
        max_step = step[j] > max_step ? step[j] : max_step;
        max_offset = offset[j] > max_offset ? offset[j] : max_offset;
    }
    /* Step 2: 6-bit multiples of the stored f16 super-block scales. */
    y->d = f16_scale(max_step / 63.0f);
    y->dmin = f16_scale(max_offset / 63.0f);
    const float d = qvl_f16_to_f32(y->d), dmin = qvl_f16_to_f32(y->dmin);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = d > 0 ? round_clamp(step[j] / d, 0, 63) : 0;
        m[j] = dmin > 0 ? round_clamp(offset[j] / dmin, 0, 63) : 0;
        if (!search) continue;
        /* the neighbouring 6-bit values may fit this sub-block better once rounded */
        const float *xj = xs + j * Q4_SUB, *wj = w + j * Q4_SUB;
        int bs = sc[j], bm = m[j];
        double best = affine_error(xj, wj, Q4_SUB, d * (float)bs, dmin * (float)bm, 15);
        for (int ds = -1; ds <= 1; ds++)
            for (int dm = -1; dm <= 1; dm++) {
                int cs = sc[j] + ds, cm = m[j] + dm;
                if (cs < 0 || cs > 63 || cm < 0 || cm > 63) continue;
                double e = affine_error(xj, wj, Q4_SUB, d * (float)cs, dmin * (float)cm, 15);
                if (e < best) best = e, bs = cs, bm = cm;
            }
        sc[j] = bs;
        m[j] = bm;
    }
    q4k_pack_scales(y->scales, sc, m);
    /* Step 3: every quant against the final scales. */
    memset(y->qs, 0, sizeof y->qs);
    for (int j = 0; j < 8; j++) {
        float st, off;
        q4k_sub(y, j, &st, &off);
        for (int i = j * Q4_SUB; i < (j + 1) * Q4_SUB; i++) {
            int q = st > 0 ? round_clamp((xs[i] + off) / st, 0, 15) : 0;
            y->qs[i / 64 * 32 + i % 32] |= (uint8_t)(i % 64 < 32 ? q : q << 4);
        }
    }
}

void qvl_quantize_row_q4_k(const float *x, qvl_block_q4_k *y, int64_t n, bool search) {
    if (!x || !y || n <= 0) return;
    for (int64_t b = 0; b < n / QVL_QK_K; b++) quantize_block_q4_k(x + b * QVL_QK_K, &y[b], search);
}

/* ---- q6_k ---------------------------------------------------------------------------------- */

/* Element i: quarter r/32 of its 128-element half picks the low-nibble byte (ql, +32 for odd
 * quarters; high nibble for quarters 2 and 3) and the 2-bit field of qh. */
static int q6k_quant(const qvl_block_q6_k *b, int i) {
    int half = i / 128, quarter = i % 128 / 32, l = i % 32;
    uint8_t lo = b->ql[half * 64 + (quarter & 1) * 32 + l];
    int low4 = quarter >= 2 ? lo >> 4 : lo & 0xF;
    int high2 = (b->qh[half * 32 + l] >> (2 * quarter)) & 3;
    return (low4 | high2 << 4) - 32;
}

float qvl_q6_k_elem(const qvl_block_q6_k *b, int i) {
    return qvl_f16_to_f32(b->d) * (float)b->scales[i / Q6_SUB] * (float)q6k_quant(b, i);
}

void qvl_dequantize_row_q6_k(const qvl_block_q6_k *x, float *y, int64_t n) {
    if (!x || !y || n <= 0) return;
    for (int64_t b = 0; b < n / QVL_QK_K; b++)
        for (int i = 0; i < QVL_QK_K; i++) y[b * QVL_QK_K + i] = qvl_q6_k_elem(&x[b], i);
}

/* Weighted squared error of n values as step * q, q rounded into -32..31. */
static double linear_error(const float *x, const float *w, int n, float step) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        int q = step != 0 ? round_clamp(x[i] / step, -32, 31) : 0;
        double d = (double)step * q - x[i];
        e += w[i] * d * d;
    }
    return e;
}

/* Step 1 for q6_k: a signed step (value = step * q, q in -32..31). Plain: max|x| / 31. Search:
 * the largest value mapped near -32 or +31 (the range is one step longer on the negative
 * side), each candidate refitted by weighted least squares for its quants. */
static float fit_linear(const float *x, const float *w, int n, bool search) {
    float xm = 0;
    for (int i = 0; i < n; i++) xm = fabsf(x[i]) > fabsf(xm) ? x[i] : xm;
    float step = fabsf(xm) / 31.0f;
    if (!search || xm == 0) return step;
    double best = linear_error(x, w, n, step);
    for (int side = 0; side < 2; side++) {
        for (int k = -N_CANDIDATES; k <= N_CANDIDATES; k++) {
            float inv = (side ? -32.0f : 31.0f) + 0.1f * (float)k;
            inv /= xm;
            double sqq = 0, sqx = 0;
            for (int i = 0; i < n; i++) {
                int q = round_clamp(inv * x[i], -32, 31);
                sqq += w[i] * q * q;
                sqx += w[i] * q * x[i];
            }
            if (!(sqq > 0)) continue;
            float s = (float)(sqx / sqq);
            double e = linear_error(x, w, n, s);
            if (e < best) best = e, step = s;
        }
    }
    return step;
}

static void quantize_block_q6_k(const float *x, qvl_block_q6_k *y, bool search) {
    float xs[QVL_QK_K], w[QVL_QK_K], step[16], max_abs = 0;
    prepare(x, xs, w);
    for (int j = 0; j < 16; j++) {
        step[j] = fit_linear(xs + j * Q6_SUB, w + j * Q6_SUB, Q6_SUB, search);
        max_abs = fabsf(step[j]) > max_abs ? fabsf(step[j]) : max_abs;
    }
    /* Step 2: int8 multiples of the stored f16 super-block scale (-128 unused: symmetric). */
    y->d = f16_scale(max_abs / 127.0f);
    const float d = qvl_f16_to_f32(y->d);
    for (int j = 0; j < 16; j++) {
        int sc = d > 0 ? round_clamp(step[j] / d, -127, 127) : 0;
        if (search) {
            const float *xj = xs + j * Q6_SUB, *wj = w + j * Q6_SUB;
            int bs = sc;
            double best = linear_error(xj, wj, Q6_SUB, d * (float)sc);
            for (int c = sc - 1; c <= sc + 1; c += 2) {
                if (c < -127 || c > 127) continue;
                double e = linear_error(xj, wj, Q6_SUB, d * (float)c);
                if (e < best) best = e, bs = c;
            }
            sc = bs;
        }
        y->scales[j] = (int8_t)sc;
    }
    /* Step 3: every quant against the final scales, then the bit planes. */
    uint8_t q[QVL_QK_K];
    for (int i = 0; i < QVL_QK_K; i++) {
        float st = d * (float)y->scales[i / Q6_SUB];
        q[i] = (uint8_t)((st != 0 ? round_clamp(xs[i] / st, -32, 31) : 0) + 32);
    }
    for (int half = 0; half < 2; half++) {
        const uint8_t *h = q + half * 128;
        for (int l = 0; l < 32; l++) {
            y->ql[half * 64 + l] = (uint8_t)((h[l] & 0xF) | (h[l + 64] & 0xF) << 4);
            y->ql[half * 64 + 32 + l] = (uint8_t)((h[l + 32] & 0xF) | (h[l + 96] & 0xF) << 4);
            y->qh[half * 32 + l] = (uint8_t)(h[l] >> 4 | (h[l + 32] >> 4) << 2 |
                                             (h[l + 64] >> 4) << 4 | (h[l + 96] >> 4) << 6);
        }
    }
}

void qvl_quantize_row_q6_k(const float *x, qvl_block_q6_k *y, int64_t n, bool search) {
    if (!x || !y || n <= 0) return;
    for (int64_t b = 0; b < n / QVL_QK_K; b++) quantize_block_q6_k(x + b * QVL_QK_K, &y[b], search);
}
