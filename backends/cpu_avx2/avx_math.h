/* Vector math for the kernels: exp, sigmoid-based activations and horizontal sums.
 *
 * avx_exp: e^x = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 (ln 2 split in two parts,
 * so r is exact to ~1 ulp), e^r from a degree-6 polynomial (Taylor-like, minimax-tuned
 * coefficients as in Cephes' expf). Measured max relative error over [-87, 88] in steps of
 * 1e-4: 1.2e-7 (about 1 ulp); test_cpu_avx2_backend checks SILU and GELU_TANH to 1e-6,
 * test_avx_math the softmax variant avx_exp_nonpos against avx_exp. Inputs below
 * -87.3 give 0 (the true value is below FLT_MIN), -inf gives 0, inputs above 88.7 are clamped
 * (e^88.7 ~ 3.3e38). NaN inputs are not propagated (they give a finite value).
 *
 * tanh is never computed on its own: GELU_TANH uses 0.5 x (1 + tanh(y)) = x * sigmoid(2y),
 * which keeps relative accuracy where 1 + tanh(y) is tiny. sigmoid(z) = 1 / (1 + e^-z) with a
 * true division. SILU and GELU_TANH then carry exp's error plus a few ulp (measured: SILU
 * 1.8e-7 relative over [-20, 20]), plus what any f32 evaluation carries: z itself is rounded
 * to f32, which moves e^z by up to 2^-24 |z| relative (GELU_TANH: 9e-6 near x = -9, where
 * 2y is about -60; the reference's tanhf of an f32 y has the same sensitivity). The test
 * allows 1e-6 + 2^-22 |z| relative. */
#ifndef QVL_AVX_MATH_H
#define QVL_AVX_MATH_H

#include <immintrin.h>

/* e^r for the clamped x (r = x - n ln 2, |r| <= ln 2 / 2) and n = round(x / ln 2): the
 * reduction and polynomial both exponentials share, so that they agree bit for bit. */
static inline __m256 avx_exp_reduced(__m256 x, __m256 *n_out) {
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    *n_out = n;
    return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
}

static inline __m256 avx_exp(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.7f), lo = _mm256_set1_ps(-87.3f);
    __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), n;
    __m256 p = avx_exp_reduced(_mm256_min_ps(_mm256_max_ps(x, lo), hi), &n);
    /* 2^n: n is in [-126, 128]; build it in two halves so 2^128 does not overflow early. */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(ni, 1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_andnot_ps(zero_mask, y);
}

/* avx_exp for x <= 0 (or NaN-free inputs that are; softmax's s - max): the same reduction and
 * polynomial, so the same value wherever e^x is a normal float (2^n scaling is exact there),
 * without the upper clamp and with 2^n built in one step (n in [-126, 0]). -inf and inputs
 * below -87.3 give 0. */
static inline __m256 avx_exp_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 zero_mask = _mm256_cmp_ps(x, lo, _CMP_LT_OQ), n;
    __m256 p = avx_exp_reduced(_mm256_max_ps(x, lo), &n);
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    e = _mm256_slli_epi32(e, 23); /* 2^n, n + 127 in [1, 127]: a normal float */
    return _mm256_andnot_ps(zero_mask, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* x * sigmoid(z) = x / (1 + e^-z) */
static inline __m256 avx_x_sigmoid(__m256 x, __m256 z) {
    __m256 e = avx_exp(_mm256_sub_ps(_mm256_setzero_ps(), z));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static inline __m256 avx_v_silu(__m256 x) {
    return avx_x_sigmoid(x, x);
}

/* 0.5 x (1 + tanh(c (x + 0.044715 x^3))) = x * sigmoid(2 c (x + 0.044715 x^3)) */
static inline __m256 avx_v_gelu_tanh(__m256 x) {
    const __m256 two_c = _mm256_set1_ps(2.0f * 0.79788456080286535588f);
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x);
    return avx_x_sigmoid(x, _mm256_mul_ps(two_c, inner));
}

static inline float avx_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float avx_hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Mask selecting the first n (0..8) lanes, for loads and stores of row tails. */
static inline __m256i avx_tail_mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
