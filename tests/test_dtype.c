/* dtypes: names and sizes, f16/bf16 rounding (exhaustive where it is cheap), q8_0, and the
 * tensor descriptor helpers built on them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>

#include <cmocka.h>

#include "qvl/dtype.h"
#include "qvl/tensor.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The IEEE binary16 definition, written independently of the library with ldexp. */
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static bool f16_is_nan(uint16_t h) {
    return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

static void test_names_and_sizes(void **state) {
    (void)state;
    const char *names[] = {"f32", "f16", "bf16", "q8_0", "i32", "q4_k", "q6_k"};
    for (int t = 0; t < QVL_DTYPE_COUNT; t++) {
        qvl_dtype parsed;
        assert_string_equal(qvl_dtype_name((qvl_dtype)t), names[t]);
        assert_true(qvl_dtype_parse(names[t], &parsed));
        assert_int_equal(parsed, t);
    }
    qvl_dtype unused;
    assert_false(qvl_dtype_parse("f64", &unused));
    assert_false(qvl_dtype_parse("", &unused));
    assert_string_equal(qvl_dtype_name((qvl_dtype)99), "?");
    assert_false(qvl_dtype_valid(-1));
    assert_false(qvl_dtype_valid(QVL_DTYPE_COUNT));
    assert_true(qvl_dtype_is_float(QVL_BF16));
    assert_false(qvl_dtype_is_float(QVL_Q8_0));
    assert_false(qvl_dtype_is_float(QVL_I32));
    assert_int_equal(qvl_dtype_block_elems(QVL_Q8_0), 32);
    assert_int_equal(qvl_dtype_block_bytes(QVL_Q8_0), 34);
    assert_int_equal(sizeof(qvl_block_q8_0), 34);
    assert_int_equal(qvl_dtype_block_elems(QVL_F16), 1);
    assert_int_equal(qvl_dtype_block_bytes(QVL_BF16), 2);
    assert_int_equal(qvl_dtype_block_bytes(QVL_I32), 4);
}

static void test_row_bytes(void **state) {
    (void)state;
    size_t n = 0;
    assert_true(qvl_dtype_row_bytes(QVL_Q8_0, 32, &n));
    assert_int_equal(n, 34);
    assert_true(qvl_dtype_row_bytes(QVL_Q8_0, 2048, &n));
    assert_int_equal(n, 64 * 34);
    assert_false(qvl_dtype_row_bytes(QVL_Q8_0, 33, &n));
    assert_false(qvl_dtype_row_bytes(QVL_Q8_0, 16, &n));
    assert_true(qvl_dtype_row_bytes(QVL_F32, 10, &n));
    assert_int_equal(n, 40);
    assert_true(qvl_dtype_row_bytes(QVL_F16, 3, &n));
    assert_int_equal(n, 6);
    assert_true(qvl_dtype_row_bytes(QVL_I32, 0, &n));
    assert_int_equal(n, 0);
    assert_false(qvl_dtype_row_bytes(QVL_F32, -1, &n));
    assert_false(qvl_dtype_row_bytes(QVL_F32, INT64_MAX, &n)); /* bytes overflow size_t */
}

/* Every f16 pattern reads as its IEEE value and converts back to itself. */
static void test_f16_all_patterns(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = qvl_f16_to_f32(h);
        if (f16_is_nan(h)) {
            assert_true(isnan(f));
            assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
            uint16_t back = qvl_f32_to_f16(f);
            assert_true(f16_is_nan(back));
            assert_int_equal(back >> 15, h >> 15);
            continue;
        }
        if ((h & 0x7c00) == 0x7c00) {
            assert_true(isinf(f));
        } else {
            assert_true((double)f == f16_value(h));
        }
        assert_int_equal(signbit(f) != 0, (h >> 15) != 0);
        assert_int_equal(qvl_f32_to_f16(f), h);
    }
}

/* Between every two neighbouring positive f16 values (subnormals, normals, and the last
 * finite value against Inf) the midpoint ties to the even pattern and anything off the
 * midpoint goes to the nearer one. */
static void test_f16_rounding_all_midpoints(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = f16_value((uint16_t)h);
        double hi = h + 1 == 0x7c00 ? 65536.0 : f16_value((uint16_t)(h + 1)); /* Inf's "value" */
        float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
        assert_true((double)mid == (lo + hi) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(qvl_f32_to_f16(mid), even);
        assert_int_equal(qvl_f32_to_f16(nextafterf(mid, 0.0f)), h);
        assert_int_equal(qvl_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
        assert_int_equal(qvl_f32_to_f16(-mid), 0x8000 | even);
    }
}

static void test_f16_cases(void **state) {
    (void)state;
    /* ties to even around 1.0 (1.0 = 0x3c00, ulp 2^-10) */
    assert_int_equal(qvl_f32_to_f16(1.0f + ldexpf(1, -11)), 0x3c00);
    assert_int_equal(qvl_f32_to_f16(1.0f + 3 * ldexpf(1, -11)), 0x3c02); /* 1 + 2^-9 */
    assert_int_equal(qvl_f32_to_f16(1.0f + ldexpf(1, -10)), 0x3c01);
    /* overflow */
    assert_int_equal(qvl_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(qvl_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(qvl_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(qvl_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(qvl_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(qvl_f32_to_f16(from_bits(0x7f7fffffu)), 0x7c00);
    /* subnormals */
    assert_int_equal(qvl_f32_to_f16(ldexpf(1, -24)), 0x0001);
    assert_int_equal(qvl_f32_to_f16(ldexpf(1, -25)), 0x0000);          /* tie to even 0 */
    assert_int_equal(qvl_f32_to_f16(3 * ldexpf(1, -26)), 0x0001);      /* 0.75 ulp */
    assert_int_equal(qvl_f32_to_f16(3 * ldexpf(1, -25)), 0x0002);      /* 1.5 ulp ties to 2 */
    assert_int_equal(qvl_f32_to_f16(nextafterf(ldexpf(1, -25), 1)), 0x0001);
    assert_int_equal(qvl_f32_to_f16(ldexpf(1, -14)), 0x0400);          /* smallest normal */
    assert_int_equal(qvl_f32_to_f16(ldexpf(1023, -24)), 0x03ff);       /* largest subnormal */
    assert_int_equal(qvl_f32_to_f16(ldexpf(2047, -25)), 0x0400);       /* rounds up into normal */
    assert_int_equal(qvl_f32_to_f16(ldexpf(1, -30)), 0x0000);
    assert_int_equal(qvl_f32_to_f16(-ldexpf(1, -30)), 0x8000);
    assert_int_equal(qvl_f32_to_f16(from_bits(1)), 0x0000); /* f32 subnormal */
    assert_true(qvl_f16_to_f32(0x0001) == ldexpf(1, -24));
    assert_true(qvl_f16_to_f32(0x03ff) == ldexpf(1023, -24));
    assert_true(qvl_f16_to_f32(0x8001) == -ldexpf(1, -24));
    /* signs, zeros, infinities, NaN */
    assert_int_equal(qvl_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(qvl_f32_to_f16(-0.0f), 0x8000);
    assert_true(signbit(qvl_f16_to_f32(0x8000)) && qvl_f16_to_f32(0x8000) == 0.0f);
    assert_int_equal(qvl_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(qvl_f32_to_f16(-INFINITY), 0xfc00);
    assert_true(isinf(qvl_f16_to_f32(0xfc00)) && qvl_f16_to_f32(0xfc00) < 0);
    uint16_t n = qvl_f32_to_f16(NAN);
    assert_true(f16_is_nan(n));
    assert_true(n & 0x0200); /* quiet */
    n = qvl_f32_to_f16(-NAN);
    assert_true(f16_is_nan(n) && (n & 0x8000));
    /* a NaN whose payload sits only in bits f16 drops must not turn into Inf */
    assert_true(f16_is_nan(qvl_f32_to_f16(from_bits(0x7f800001u))));
    assert_true(f16_is_nan(qvl_f32_to_f16(from_bits(0xff800001u))));
    assert_int_equal(qvl_f32_to_f16(2.5f), 0x4100);
    assert_int_equal(qvl_f32_to_f16(-2.0f), 0xc000);
}

static bool bf16_is_nan(uint16_t b) {
    return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0;
}

static void test_bf16_all_patterns(void **state) {
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t b = (uint16_t)i;
        float f = qvl_bf16_to_f32(b);
        assert_int_equal(bits(f), (uint32_t)b << 16); /* bf16 is the top half of f32 */
        uint16_t back = qvl_f32_to_bf16(f);
        if (bf16_is_nan(b)) {
            assert_true(isnan(f));
            assert_true(bf16_is_nan(back));
            assert_int_equal(back >> 15, b >> 15);
        } else {
            assert_int_equal(back, b);
        }
    }
}

/* Midpoints between all neighbouring positive bf16 values, including f32 subnormals and the
 * step from the largest finite value to Inf. */
static void test_bf16_rounding_all_midpoints(void **state) {
    (void)state;
    for (uint32_t b = 0; b < 0x7f80; b++) {
        uint32_t mid_bits = (b << 16) | 0x8000u; /* halfway to the next pattern */
        float mid = from_bits(mid_bits);
        uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
        assert_int_equal(qvl_f32_to_bf16(mid), even);
        assert_int_equal(qvl_f32_to_bf16(from_bits(mid_bits - 1)), b);
        assert_int_equal(qvl_f32_to_bf16(from_bits(mid_bits + 1)), b + 1);
        assert_int_equal(qvl_f32_to_bf16(-mid), 0x8000 | even);
    }
}

static void test_bf16_cases(void **state) {
    (void)state;
    assert_int_equal(qvl_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(qvl_f32_to_bf16(1.0f + ldexpf(1, -8)), 0x3f80);      /* tie to even */
    assert_int_equal(qvl_f32_to_bf16(1.0f + 3 * ldexpf(1, -8)), 0x3f82);  /* tie to even up */
    assert_int_equal(qvl_f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)), 0x3f81);
    assert_int_equal(qvl_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(qvl_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(qvl_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(qvl_f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX overflows */
    uint16_t n = qvl_f32_to_bf16(from_bits(0x7f800001u));              /* low-payload NaN */
    assert_true(bf16_is_nan(n));
    n = qvl_f32_to_bf16(-NAN);
    assert_true(bf16_is_nan(n) && (n & 0x8000));
}

/* A small deterministic generator so the test does not depend on libc's rand. */
static uint32_t lcg_state = 12345;
static float lcg_uniform(void) {
    lcg_state = lcg_state * 1664525u + 1013904223u;
    return (float)(lcg_state >> 8) / 16777216.0f * 2.0f - 1.0f;
}

static void test_q8_0_error_bound(void **state) {
    (void)state;
    enum { NB = 64, N = NB * QVL_Q8_0_BLOCK };
    static float x[N], y[N];
    static qvl_block_q8_0 q[NB];
    for (int b = 0; b < NB; b++) {
        float mag = ldexpf(1.0f, (b % 24) - 12); /* blocks of very different scales */
        for (int i = 0; i < QVL_Q8_0_BLOCK; i++) x[b * 32 + i] = lcg_uniform() * mag;
    }
    x[5] = 0.0f;
    qvl_quantize_row_q8_0(x, q, N);
    qvl_dequantize_row_q8_0(q, y, N);
    for (int b = 0; b < NB; b++) {
        double amax = 0;
        for (int i = 0; i < 32; i++) amax = fmax(amax, fabs((double)x[b * 32 + i]));
        double d = amax / 127.0;
        double dq = qvl_f16_to_f32(q[b].d);
        /* d is stored as f16 rounded to nearest: half an ulp, which is 2^-25 for subnormals
         * (plus the f32 rounding of amax / 127 before that). */
        assert_true(fabs(dq - d) <= fmax(d * ldexp(1, -11), ldexp(1, -25)) + d * ldexp(1, -23));
        int qmax = 0;
        for (int i = 0; i < 32; i++) {
            double err = fabs((double)x[b * 32 + i] - (double)y[b * 32 + i]);
            assert_true(err <= dq / 2 + 127 * fabs(dq - d) + amax * ldexp(1, -22));
            assert_true(y[b * 32 + i] == (float)(dq * q[b].qs[i])); /* value = d * q */
            assert_true(q[b].qs[i] >= -127 && q[b].qs[i] <= 127);
            qmax = abs(q[b].qs[i]) > qmax ? abs(q[b].qs[i]) : qmax;
        }
        assert_true(qmax >= 126); /* the largest value uses the full range */
    }
    /* The generic conversions give the same bytes and values. */
    static qvl_block_q8_0 q2[NB];
    static float y2[N];
    qvl_from_f32(QVL_Q8_0, x, q2, N);
    assert_memory_equal(q, q2, sizeof q);
    qvl_to_f32(QVL_Q8_0, q2, y2, N);
    assert_memory_equal(y, y2, sizeof y);
}

static void test_q8_0_exact_and_zero(void **state) {
    (void)state;
    float x[64], y[64];
    qvl_block_q8_0 q[2];
    /* Block 0: multiples of 0.5 with max 63.5 = 127 * 0.5: d is exact and so is every value. */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16) * 0.5f * (i % 2 ? 1 : -1);
    x[7] = 63.5f;
    for (int i = 32; i < 64; i++) x[i] = 0.0f; /* block 1: all zero */
    x[40] = -0.0f;
    qvl_quantize_row_q8_0(x, q, 64);
    assert_true(qvl_f16_to_f32(q[0].d) == 0.5f);
    assert_int_equal(q[0].qs[7], 127);
    assert_true(qvl_f16_to_f32(q[1].d) == 0.0f);
    for (int i = 0; i < 32; i++) assert_int_equal(q[1].qs[i], 0);
    qvl_dequantize_row_q8_0(q, y, 64);
    for (int i = 0; i < 32; i++) assert_true(y[i] == x[i]);
    for (int i = 32; i < 64; i++) assert_true(y[i] == 0.0f && !isnan(y[i]));
}

static void test_bulk_conversions(void **state) {
    (void)state;
    float src[5] = {1.0f, -2.5f, 65520.0f, 1.0f + ldexpf(1, -11), ldexpf(1, -24)};
    uint16_t h[5], b[5];
    float back[5];
    qvl_from_f32(QVL_F16, src, h, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(h[i], qvl_f32_to_f16(src[i]));
    qvl_to_f32(QVL_F16, h, back, 5);
    for (int i = 0; i < 5; i++) assert_true(bits(back[i]) == bits(qvl_f16_to_f32(h[i])));
    qvl_from_f32(QVL_BF16, src, b, 5);
    for (int i = 0; i < 5; i++) assert_int_equal(b[i], qvl_f32_to_bf16(src[i]));
    qvl_to_f32(QVL_BF16, b, back, 5);
    for (int i = 0; i < 5; i++) assert_true(bits(back[i]) == bits(qvl_bf16_to_f32(b[i])));
    float copy[5];
    qvl_from_f32(QVL_F32, src, copy, 5);
    assert_memory_equal(copy, src, sizeof src);
    qvl_to_f32(QVL_F32, src, copy, 5);
    assert_memory_equal(copy, src, sizeof src);
    /* i32 is not a float dtype: nothing is written. */
    int32_t ints[2] = {7, 8};
    float untouched[2] = {3.0f, 4.0f};
    qvl_to_f32(QVL_I32, ints, untouched, 2);
    assert_true(untouched[0] == 3.0f && untouched[1] == 4.0f);
}

/* ---- tensor descriptors ------------------------------------------------------------------ */

static void test_desc_init(void **state) {
    (void)state;
    qvl_tensor_desc d;
    int64_t shape[3] = {2, 3, 4};
    assert_true(qvl_desc_init(&d, QVL_F32, 3, shape));
    assert_int_equal(d.ndim, 3);
    assert_int_equal(d.stride[0], 12);
    assert_int_equal(d.stride[1], 4);
    assert_int_equal(d.stride[2], 1);
    assert_int_equal(d.shape[3], 1);
    assert_int_equal(d.stride[3], 1);
    assert_int_equal(qvl_desc_nelem(&d), 24);
    assert_true(qvl_desc_is_contiguous(&d));
    size_t bytes;
    assert_true(qvl_desc_span_bytes(&d, &bytes));
    assert_int_equal(bytes, 24 * 4);

    int64_t bad[2] = {3, 0};
    assert_false(qvl_desc_init(&d, QVL_F32, 2, bad));
    assert_false(qvl_desc_init(&d, QVL_F32, 0, shape));
    assert_false(qvl_desc_init(&d, QVL_F32, 5, shape));
    int64_t huge[2] = {INT64_MAX / 2, 4};
    assert_false(qvl_desc_init(&d, QVL_F32, 2, huge));
}

static void test_desc_views(void **state) {
    (void)state;
    qvl_tensor_desc d;
    int64_t shape[2] = {4, 6};
    assert_true(qvl_desc_init(&d, QVL_F16, 2, shape));
    /* Transpose: [6, 4] with strides {1, 6}: spans all 24 elements but is not contiguous. */
    qvl_tensor_desc t = d;
    t.shape[0] = 6; t.shape[1] = 4;
    t.stride[0] = 1; t.stride[1] = 6;
    assert_false(qvl_desc_is_contiguous(&t));
    size_t bytes;
    assert_true(qvl_desc_span_bytes(&t, &bytes));
    assert_int_equal(bytes, 24 * 2);
    /* Column slice [4, 2] starting anywhere: last element at 3*6 + 1. */
    qvl_tensor_desc s = d;
    s.shape[1] = 2;
    assert_true(qvl_desc_span_bytes(&s, &bytes));
    assert_int_equal(bytes, (3 * 6 + 1 + 1) * 2);
    assert_false(qvl_desc_is_contiguous(&s));
    /* One row of a matrix is contiguous whatever the stride of its size-1 dim. */
    qvl_tensor_desc r = d;
    r.shape[0] = 1;
    r.stride[0] = 1000;
    assert_true(qvl_desc_is_contiguous(&r));
    assert_true(qvl_desc_span_bytes(&r, &bytes));
    assert_int_equal(bytes, 6 * 2);
    /* Negative strides are refused. */
    qvl_tensor_desc n = d;
    n.stride[1] = -1;
    assert_false(qvl_desc_span_bytes(&n, &bytes));
    /* Overflowing spans are refused. */
    qvl_tensor_desc o = d;
    o.stride[0] = INT64_MAX / 2;
    assert_false(qvl_desc_span_bytes(&o, &bytes));
    assert_true(qvl_desc_same_shape(&d, &r) == false);
    assert_true(qvl_desc_same_shape(&d, &s) == false);
    qvl_tensor_desc c = d;
    c.dtype = QVL_F32;
    c.stride[0] = 99;
    assert_true(qvl_desc_same_shape(&d, &c));
}

static void test_desc_q8_0(void **state) {
    (void)state;
    qvl_tensor_desc d;
    int64_t shape[2] = {3, 64};
    assert_true(qvl_desc_init(&d, QVL_Q8_0, 2, shape));
    size_t bytes;
    assert_true(qvl_desc_span_bytes(&d, &bytes));
    assert_int_equal(bytes, 3 * 2 * 34);
    assert_int_equal(qvl_dtype_offset_bytes(QVL_Q8_0, 64), 68);
    assert_int_equal(qvl_dtype_offset_bytes(QVL_Q8_0, 96), 102);
    assert_int_equal(qvl_dtype_offset_bytes(QVL_F16, 10), 20);
    assert_int_equal(qvl_dtype_offset_bytes(QVL_F32, 10), 40);
    /* Rows of 33 cannot be stored as whole blocks. */
    int64_t odd[2] = {2, 33};
    assert_true(qvl_desc_init(&d, QVL_Q8_0, 2, odd));
    assert_false(qvl_desc_span_bytes(&d, &bytes));
    /* A strided inner dim breaks blocks. */
    assert_true(qvl_desc_init(&d, QVL_Q8_0, 2, shape));
    d.stride[1] = 2;
    d.shape[1] = 32;
    assert_false(qvl_desc_span_bytes(&d, &bytes));
}

static void test_desc_str(void **state) {
    (void)state;
    qvl_tensor_desc d;
    int64_t shape[2] = {2048, 151936};
    assert_true(qvl_desc_init(&d, QVL_BF16, 2, shape));
    char buf[64];
    assert_string_equal(qvl_desc_str(&d, buf, sizeof buf), "[2048, 151936] bf16");
    int64_t one[1] = {7};
    assert_true(qvl_desc_init(&d, QVL_I32, 1, one));
    assert_string_equal(qvl_desc_str(&d, buf, sizeof buf), "[7] i32");
    char tiny[6];
    assert_true(qvl_desc_init(&d, QVL_F32, 2, shape));
    qvl_desc_str(&d, tiny, sizeof tiny);
    assert_int_equal(strlen(tiny), 5); /* truncated, still terminated */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_row_bytes),
        cmocka_unit_test(test_f16_all_patterns),
        cmocka_unit_test(test_f16_rounding_all_midpoints),
        cmocka_unit_test(test_f16_cases),
        cmocka_unit_test(test_bf16_all_patterns),
        cmocka_unit_test(test_bf16_rounding_all_midpoints),
        cmocka_unit_test(test_bf16_cases),
        cmocka_unit_test(test_q8_0_error_bound),
        cmocka_unit_test(test_q8_0_exact_and_zero),
        cmocka_unit_test(test_bulk_conversions),
        cmocka_unit_test(test_desc_init),
        cmocka_unit_test(test_desc_views),
        cmocka_unit_test(test_desc_q8_0),
        cmocka_unit_test(test_desc_str),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
