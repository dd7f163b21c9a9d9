/* Weight conversion at load (--weights): the threaded, chunked conversion must give exactly
 * what converting the whole tensor through f32 in one go gives, for every dtype pair, sizes
 * that do and do not fill the last chunk, and sources at odd byte offsets (a safetensors
 * mapping may place a tensor anywhere). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/dtype.h"
#include "qvl/weight_convert.h"

static void check_pair(qvl_dtype from, qvl_dtype to, int64_t n, int threads) {
    size_t src_bytes, dst_bytes;
    assert_true(qvl_dtype_row_bytes(from, n, &src_bytes));
    assert_true(qvl_dtype_row_bytes(to, n, &dst_bytes));
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++) f[i] = (float)((i * 7919 % 2001) - 1000) / 37.0f;
    /* the source at an odd address, as it may sit in a mapping */
    unsigned char *raw = malloc(src_bytes + 1), *src = raw + 1;
    void *aligned_src = malloc(src_bytes);
    qvl_from_f32(from, f, aligned_src, n);
    memcpy(src, aligned_src, src_bytes);
    /* the expected result: the whole tensor through f32 at once */
    float *wide = malloc((size_t)n * sizeof *wide);
    unsigned char *want = malloc(dst_bytes), *got = malloc(dst_bytes);
    qvl_to_f32(from, aligned_src, wide, n);
    qvl_from_f32(to, wide, want, n);
    qvl_error err = {0};
    assert_int_equal(qvl_convert_elements(from, src, to, got, n, threads, &err), QVL_OK);
    assert_memory_equal(got, want, dst_bytes);
    free(f);
    free(raw);
    free(aligned_src);
    free(wide);
    free(want);
    free(got);
}

static void test_pairs_sizes_threads(void **state) {
    (void)state;
    const qvl_dtype types[] = {QVL_F32, QVL_F16, QVL_BF16, QVL_Q8_0};
    const int64_t sizes[] = {32, 96, (1 << 16) + 64, 3 * (1 << 16) + 32 * 5};
    const int threads[] = {1, 3};
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 4; b++)
            for (size_t s = 0; s < 4; s++)
                for (size_t t = 0; t < 2; t++) check_pair(types[a], types[b], sizes[s], threads[t]);
}

static void test_partial_block_refused(void **state) {
    (void)state;
    float src[40] = {0};
    unsigned char dst[64];
    qvl_error err = {0};
    assert_int_equal(qvl_convert_elements(QVL_F32, src, QVL_Q8_0, dst, 40, 2, &err), QVL_E_SHAPE);
    assert_non_null(strstr(err.msg, "q8_0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_sizes_threads),
        cmocka_unit_test(test_partial_block_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
