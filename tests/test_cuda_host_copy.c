/* cuda_sm61's host-side copy of large transfers (backends/cuda_sm61/cu_host_copy.c): spread
 * over threads from a size on, it must still be memcpy: every byte, around the split size and
 * the part boundaries, at odd lengths and offsets, nothing written outside the range. Plain C,
 * so it runs without a GPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cu_host_copy.h"

#define GUARD 64

/* Copies bytes from src + off into dst + off and checks the range and the guards around it. */
static void check_copy(size_t bytes, size_t off) {
    size_t total = bytes + off + 2 * GUARD;
    unsigned char *src = malloc(total), *dst = malloc(total);
    assert_non_null(src);
    assert_non_null(dst);
    uint32_t x = (uint32_t)(bytes * 2654435761u + off);
    for (size_t i = 0; i < total; i++) {
        x = x * 1664525u + 1013904223u;
        src[i] = (unsigned char)(x >> 24);
    }
    memset(dst, 0xA5, total);
    cu_host_copy(dst + GUARD + off, src + GUARD + off, bytes);
    for (size_t i = 0; i < GUARD + off; i++) assert_int_equal(dst[i], 0xA5);
    assert_memory_equal(dst + GUARD + off, src + GUARD + off, bytes);
    for (size_t i = GUARD + off + bytes; i < total; i++) assert_int_equal(dst[i], 0xA5);
    free(src);
    free(dst);
}

static void small_copies(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 63, 64, 65, 4096, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) check_copy(sizes[i], i % 3);
}

/* Around the split size (2 MiB) and at sizes that cut into 2, 3 and 4 parts of odd lengths. */
static void split_copies(void **state) {
    (void)state;
    const size_t mib = (size_t)1 << 20;
    const size_t sizes[] = {2 * mib - 1, 2 * mib, 2 * mib + 1, 3 * mib + 7, 4 * mib - 3,
                            19 * mib + 12345, 6 * mib + 291};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) check_copy(sizes[i], 1 + i % 5);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_copies),
        cmocka_unit_test(split_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
