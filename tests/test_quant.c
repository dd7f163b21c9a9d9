/* q4_k and q6_k: the GGUF bit layout (blocks built byte by byte from the format's description
 * must decode to the values it defines), element access equal to row dequantisation, layout
 * rules of descriptors, error bounds of the quantisers, odd inputs, and the scale search
 * beating plain round-to-nearest on the same layout. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/dtype.h"
#include "qvl/tensor.h"
#include "qvl/tensor_access.h"

#define QK 256

/* Deterministic normal-ish values: sum of 4 uniforms (xorshift), scaled. */
static uint32_t rng = 12345;
static float urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return (float)(rng >> 8) / 16777216.0f;
}
static float nrand(void) { return (urand() + urand() + urand() + urand() - 2.0f) * 1.7f; }

static void test_sizes_and_names(void **state) {
    (void)state;
    assert_int_equal(sizeof(qvl_block_q4_k), 144);
    assert_int_equal(sizeof(qvl_block_q6_k), 210);
    assert_int_equal(offsetof(qvl_block_q6_k, d), 208);
    assert_int_equal(qvl_dtype_block_elems(QVL_Q4_K), QK);
    assert_int_equal(qvl_dtype_block_bytes(QVL_Q6_K), 210);
    assert_true(qvl_dtype_is_quant(QVL_Q4_K) && qvl_dtype_is_quant(QVL_Q8_0));
    assert_false(qvl_dtype_is_quant(QVL_F16) || qvl_dtype_is_float(QVL_Q6_K));
    size_t bytes = 0;
    assert_true(qvl_dtype_row_bytes(QVL_Q4_K, 512, &bytes));
    assert_int_equal(bytes, 288);
    assert_false(qvl_dtype_row_bytes(QVL_Q6_K, 128, &bytes)); /* half a super-block */
    qvl_dtype t;
    assert_true(qvl_dtype_parse("q6_k", &t) && t == QVL_Q6_K);
}

/* Q4_K: value = d * sc_j * q - dmin * m_j for sub-block j = i / 32. Scales and mins use all 6
 * bits (values >= 16 exercise the 2 high bits stored apart). */
static void test_q4_k_layout(void **state) {
    (void)state;
    const int sc[8] = {1, 2, 15, 16, 17, 33, 48, 63}, m[8] = {0, 5, 63, 31, 32, 1, 47, 20};
    qvl_block_q4_k b;
    memset(&b, 0, sizeof b);
    b.d = qvl_f32_to_f16(0.5f);
    b.dmin = qvl_f32_to_f16(0.25f);
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        b.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    /* byte 32c + l: element 64c + l in the low nibble, 64c + 32 + l in the high one */
    int q[QK];
    for (int i = 0; i < QK; i++) q[i] = (i * 7 + 3) % 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b.qs[32 * c + l] = (uint8_t)(q[64 * c + l] | q[64 * c + 32 + l] << 4);
    float row[QK];
    qvl_dequantize_row_q4_k(&b, row, QK);
    for (int i = 0; i < QK; i++) {
        int j = i / 32;
        float want = 0.5f * (float)sc[j] * (float)q[i] - 0.25f * (float)m[j];
        if (row[i] != want) fail_msg("q4_k element %d: %g, want %g", i, row[i], want);
        assert_true(qvl_q4_k_elem(&b, i) == row[i]);
    }
}

/* Q6_K: value = d * sc_j * (q - 32), sub-block j = i / 16; q's low 4 bits in ql, high 2 in qh,
 * by quarters of each 128-element half. */
static void test_q6_k_layout(void **state) {
    (void)state;
    qvl_block_q6_k b;
    memset(&b, 0, sizeof b);
    b.d = qvl_f32_to_f16(0.125f);
    for (int j = 0; j < 16; j++) b.scales[j] = (int8_t)(j * 17 - 128 + (j == 0));
    int q[QK];
    for (int i = 0; i < QK; i++) q[i] = (i * 13 + 5) % 64;
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int *p = q + 128 * h;
            b.ql[64 * h + l] = (uint8_t)((p[l] & 15) | (p[l + 64] & 15) << 4);
            b.ql[64 * h + 32 + l] = (uint8_t)((p[l + 32] & 15) | (p[l + 96] & 15) << 4);
            b.qh[32 * h + l] = (uint8_t)(p[l] >> 4 | (p[l + 32] >> 4) << 2 | (p[l + 64] >> 4) << 4 |
                                         (p[l + 96] >> 4) << 6);
        }
    float row[QK];
    qvl_dequantize_row_q6_k(&b, row, QK);
    for (int i = 0; i < QK; i++) {
        float want = 0.125f * (float)b.scales[i / 16] * (float)(q[i] - 32);
        if (row[i] != want) fail_msg("q6_k element %d: %g, want %g", i, row[i], want);
        assert_true(qvl_q6_k_elem(&b, i) == row[i]);
    }
}

/* Descriptors: rows of whole super-blocks, byte offsets block by block, element access
 * through a tensor (a row view at a block boundary). */
static void test_desc_and_access(void **state) {
    (void)state;
    const int64_t shape[2] = {3, 512};
    qvl_tensor_desc d;
    assert_true(qvl_desc_init(&d, QVL_Q4_K, 2, shape));
    size_t span = 0;
    assert_true(qvl_desc_span_bytes(&d, &span));
    assert_int_equal(span, 6 * 144);
    assert_int_equal(qvl_dtype_offset_bytes(QVL_Q6_K, 256 * 3 + 5), 3 * 210 + 5);
    qvl_tensor_desc bad = d;
    bad.stride[0] = 300; /* not whole blocks */
    assert_false(qvl_desc_span_bytes(&bad, NULL));
    bad = d;
    bad.stride[1] = 2;
    assert_false(qvl_desc_span_bytes(&bad, NULL));

    float x[3 * 512], got[512];
    for (int i = 0; i < 3 * 512; i++) x[i] = nrand();
    qvl_block_q6_k blocks[6];
    qvl_from_f32(QVL_Q6_K, x, blocks, 3 * 512);
    float all[3 * 512];
    qvl_to_f32(QVL_Q6_K, blocks, all, 3 * 512);
    qvl_tensor t = {d, blocks};
    t.desc.dtype = QVL_Q6_K;
    for (int64_t r = 0; r < 3; r++) {
        qvl_tensor_read_row(&t, r, got);
        for (int i = 0; i < 512; i++) assert_true(got[i] == all[r * 512 + i]);
        for (int i = 0; i < 512; i += 37) assert_true(qvl_elem_get(&t, r * 512 + i) == all[r * 512 + i]);
    }
    float col[3];
    qvl_elem_gather(&t, 7, 512, 3, col); /* a strided gather element by element */
    for (int r = 0; r < 3; r++) assert_true(col[r] == all[r * 512 + 7]);
}

typedef struct errs { double plain, weighted; } errs;

/* Squared error of the dequantised row against x: plain and weighted as the quantiser weighs
 * (rms of the super-block + |x|). */
static errs row_error(qvl_dtype t, const float *x, int64_t n, bool search) {
    void *buf = malloc((size_t)(n / QK) * qvl_dtype_block_bytes(t));
    float *y = malloc((size_t)n * sizeof *y);
    if (t == QVL_Q4_K) qvl_quantize_row_q4_k(x, buf, n, search);
    else qvl_quantize_row_q6_k(x, buf, n, search);
    qvl_to_f32(t, buf, y, n);
    errs e = {0, 0};
    for (int64_t b = 0; b < n / QK; b++) {
        double s2 = 0;
        for (int i = 0; i < QK; i++) s2 += (double)x[b * QK + i] * x[b * QK + i];
        double rms = sqrt(s2 / QK);
        for (int i = 0; i < QK; i++) {
            double d = (double)y[b * QK + i] - x[b * QK + i];
            e.plain += d * d;
            e.weighted += (rms + fabs(x[b * QK + i])) * d * d;
        }
    }
    free(buf);
    free(y);
    return e;
}

/* Error bounds (RMS error relative to the RMS of the data, normal data): 4 bits over a range of
 * about 6 sigma per sub-block give a step of ~0.4 sigma, RMS error step / sqrt(12) ~ 0.12;
 * 6 bits four times smaller. And the searched scales beat round-to-nearest on the same layout,
 * for normal data and for data with outliers. */
static void test_error_and_search(void **state) {
    (void)state;
    enum { N = 64 * QK };
    float *x = malloc(N * sizeof *x), *heavy = malloc(N * sizeof *heavy);
    double s2 = 0;
    for (int i = 0; i < N; i++) {
        x[i] = nrand();
        s2 += (double)x[i] * x[i];
        heavy[i] = urand() < 0.02f ? 8.0f * nrand() : nrand();
    }
    double rms = sqrt(s2 / N);
    const qvl_dtype types[2] = {QVL_Q4_K, QVL_Q6_K};
    const double bound[2] = {0.13, 0.035};
    for (int k = 0; k < 2; k++) {
        for (int set = 0; set < 2; set++) {
            const float *data = set ? heavy : x;
            errs rtn = row_error(types[k], data, N, false), srch = row_error(types[k], data, N, true);
            printf("%s %s data: relative RMS error %.4f searched, %.4f round-to-nearest; weighted "
                   "error %.4g vs %.4g (%.1f%% lower)\n",
                   qvl_dtype_name(types[k]), set ? "heavy-tailed" : "normal",
                   sqrt(srch.plain / N) / rms, sqrt(rtn.plain / N) / rms, srch.weighted,
                   rtn.weighted, 100 * (1 - srch.weighted / rtn.weighted));
            if (!set) assert_true(sqrt(srch.plain / N) / rms < bound[k]);
            /* the search must pay: at least 5% less weighted error, and less plain error */
            assert_true(srch.weighted < 0.95 * rtn.weighted);
            assert_true(srch.plain < rtn.plain);
        }
    }
    free(x);
    free(heavy);
}

/* Zeros, constants, one spike, non-finite values, values near the f16 limit: finite output,
 * exact where the format can be exact. */
static void test_odd_inputs(void **state) {
    (void)state;
    float x[QK], y[QK];
    qvl_block_q4_k b4;
    qvl_block_q6_k b6;
    memset(x, 0, sizeof x);
    for (int t = 0; t < 2; t++) {
        if (t == 0) qvl_quantize_row_q4_k(x, &b4, QK, true), qvl_dequantize_row_q4_k(&b4, y, QK);
        else qvl_quantize_row_q6_k(x, &b6, QK, true), qvl_dequantize_row_q6_k(&b6, y, QK);
        for (int i = 0; i < QK; i++) assert_true(y[i] == 0.0f);
    }
    for (int i = 0; i < QK; i++) x[i] = 3.0f; /* positive constant: min 0, q = 15 * k */
    qvl_quantize_row_q4_k(x, &b4, QK, true);
    qvl_dequantize_row_q4_k(&b4, y, QK);
    for (int i = 0; i < QK; i++) assert_true(fabsf(y[i] - 3.0f) < 3e-3f);
    x[17] = -40.0f; /* a spike: the rest of its sub-block keeps working */
    qvl_quantize_row_q6_k(x, &b6, QK, true);
    qvl_dequantize_row_q6_k(&b6, y, QK);
    /* within half a step of its sub-block (about 40 / 32) */
    assert_true(fabsf(y[17] + 40.0f) <= 0.5f * 40.0f / 31.0f);
    for (int i = 32; i < QK; i++) assert_true(fabsf(y[i] - 3.0f) < 0.05f);
    x[3] = NAN;
    x[4] = INFINITY;
    x[5] = -INFINITY;
    x[6] = 1e30f;
    x[7] = -6e4f;
    qvl_quantize_row_q4_k(x, &b4, QK, true);
    qvl_dequantize_row_q4_k(&b4, y, QK);
    for (int i = 0; i < QK; i++) assert_true(isfinite(y[i]));
    qvl_quantize_row_q6_k(x, &b6, QK, true);
    qvl_dequantize_row_q6_k(&b6, y, QK);
    for (int i = 0; i < QK; i++) assert_true(isfinite(y[i]));
    assert_true(y[3] == 0.0f || fabsf(y[3]) < 1e4f); /* NaN became a finite value */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_names),
        cmocka_unit_test(test_q4_k_layout),
        cmocka_unit_test(test_q6_k_layout),
        cmocka_unit_test(test_desc_and_access),
        cmocka_unit_test(test_error_and_search),
        cmocka_unit_test(test_odd_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
