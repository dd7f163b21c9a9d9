/* cuda_sm61's host-side copy of large transfers (backends/cuda_sm61/cu_host_copy.c): spread
 * over threads from a size on, it must still be memcpy: every byte, around the split size and
 * the part boundaries, at odd lengths and offsets, nothing written outside the range. In pieces
 * with hooks (a staged transfer's DMAs), every piece is copied once, between its own before and
 * after hooks, and a hook's error comes back. Plain C, so it runs without a GPU. */
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

/* What the hooks saw: per piece, the steps in order (1 before, 2 copied, 3 after). */
#define MAX_PIECES 64
typedef struct seen {
    int step[MAX_PIECES];
    size_t len[MAX_PIECES];
    const unsigned char *dst;
    size_t piece;
    int starts, fail_at; /* fail_at: the piece whose before hook fails (-1: none) */
} seen;

static void on_start(void *ctx) { __atomic_fetch_add(&((seen *)ctx)->starts, 1, __ATOMIC_RELAXED); }

static int on_before(void *ctx, size_t off, size_t len) {
    seen *s = ctx;
    size_t i = off / s->piece;
    if (s->step[i] != 0) return 1;
    s->step[i] = 1;
    s->len[i] = len;
    return (int)i == s->fail_at ? 42 : 0;
}

static int on_after(void *ctx, size_t off, size_t len) {
    seen *s = ctx;
    size_t i = off / s->piece;
    /* the piece is in dst by now, and its before hook ran first */
    if (s->step[i] != 1 || s->len[i] != len || s->dst[off + len - 1] != (unsigned char)(off + len - 1))
        return 2;
    s->step[i] = 3;
    return 0;
}

static void pieces_with_hooks(void **state) {
    (void)state;
    const size_t bytes = ((size_t)19 << 20) + 4321, piece = (size_t)1 << 20;
    const size_t n = (bytes + piece - 1) / piece;
    unsigned char *src = malloc(bytes), *dst = calloc(1, bytes);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < bytes; i++) src[i] = (unsigned char)i;
    seen s = {.dst = dst, .piece = piece, .fail_at = -1};
    cu_copy_hooks h = {&s, on_start, on_before, on_after};
    assert_int_equal(cu_host_copy_pieces(dst, src, bytes, piece, &h), 0);
    assert_memory_equal(dst, src, bytes);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(s.step[i], 3);
        assert_int_equal(s.len[i], i + 1 < n ? piece : bytes - (n - 1) * piece);
    }
    assert_true(s.starts >= 1 && s.starts <= 4);

    /* a failing hook: its result comes back, and that piece is not copied */
    seen f = {.dst = dst, .piece = piece, .fail_at = 5};
    h.ctx = &f;
    memset(dst, 0, bytes);
    assert_int_equal(cu_host_copy_pieces(dst, src, bytes, piece, &h), 42);
    for (size_t k = 5 * piece; k < 6 * piece; k++) assert_int_equal(dst[k], 0);
    free(src);
    free(dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(small_copies),
        cmocka_unit_test(split_copies),
        cmocka_unit_test(pieces_with_hooks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
