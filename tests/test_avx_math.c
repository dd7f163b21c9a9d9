/* cpu_avx2's exponentials (backends/cpu_avx2/avx_math.h): avx_exp_nonpos, which the softmax
 * paths use for s - max, gives avx_exp's value bit for bit on every input <= 0 (their
 * reduction and polynomial are the same; only the 2^n scaling and the upper clamp differ), 0 for
 * -inf and below -87.3, and stays within avx_exp's documented 1.2e-7 relative error of e^x.
 * Skips (77) on a CPU without AVX2 and FMA. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "avx_math.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Lane 0 of each function on x (every lane holds x). */
static float exp1(float x) { return _mm256_cvtss_f32(avx_exp(_mm256_set1_ps(x))); }
static float exp_nonpos1(float x) { return _mm256_cvtss_f32(avx_exp_nonpos(_mm256_set1_ps(x))); }

static void test_nonpos_equals_exp(void **state) {
    (void)state;
    double worst = 0.0;
    int64_t checked = 0;
    for (int64_t i = 0; i <= 880000; i++) { /* [-88, 0] in steps of 1e-4 */
        float x = (float)(-i * 1e-4);
        float a = exp1(x), b = exp_nonpos1(x);
        if (bits(a) != bits(b)) fail_msg("x = %.9g: avx_exp %.9g, avx_exp_nonpos %.9g", x, a, b);
        if (x >= -87.3f) {
            double rel = fabs((double)b - exp((double)x)) / exp((double)x);
            worst = rel > worst ? rel : worst;
        } else if (b != 0.0f) {
            fail_msg("x = %.9g below -87.3 gives %.9g, not 0", x, b);
        }
        checked++;
    }
    /* the values a softmax meets most: s - max just below 0, at float spacing */
    for (float x = -0.0f, n = 0; n < 200000; n++, x = nextafterf(x, -1.0f)) {
        if (bits(exp1(x)) != bits(exp_nonpos1(x))) fail_msg("x = %.9g differs", x);
        checked++;
    }
    assert_true(worst <= 1.2e-7 + 1e-9);
    print_message("avx_exp_nonpos: %lld inputs equal to avx_exp, worst relative error %.3g\n",
                  (long long)checked, worst);
}

static void test_nonpos_special_values(void **state) {
    (void)state;
    assert_true(exp_nonpos1(-INFINITY) == 0.0f);
    assert_true(bits(exp_nonpos1(0.0f)) == bits(1.0f));
    assert_true(bits(exp_nonpos1(-0.0f)) == bits(1.0f));
    assert_true(exp_nonpos1(-1000.0f) == 0.0f);
    assert_true(exp_nonpos1(-87.31f) == 0.0f);
    assert_true(exp_nonpos1(-87.29f) > 0.0f && isnormal(exp_nonpos1(-87.29f)));
    /* NaN (inf - inf in a row of +inf scores) behaves as in avx_exp: finite, not propagated */
    assert_true(bits(exp_nonpos1(NAN)) == bits(exp1(NAN)));
}

int main(void) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("skip: this CPU has no AVX2/FMA\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonpos_equals_exp),
        cmocka_unit_test(test_nonpos_special_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
