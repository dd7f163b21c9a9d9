/* Decoder amplification made in memory: PNG text chunks that inflate to megabytes (refused past
 * Pillow's limits, never kept: memory stays bounded) and a progressive JPEG whose empty scans
 * each make libjpeg visit every block (refused past the work budget). Assertions are on status,
 * message and memory, never on time. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <zlib.h>

#include "qvl/image.h"

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

static void assert_one_line(const qvl_error *err, const char *name) {
    if (strncmp(err->msg, name, strlen(name)) != 0 || strchr(err->msg, '\n'))
        fail_msg("not one line naming %s: \"%s\"", name, err->msg);
}

typedef struct membuf {
    uint8_t *p;
    size_t n, cap;
} membuf;

static void put(membuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_byte(membuf *b, unsigned v) {
    const uint8_t x = (uint8_t)v;
    put(b, &x, 1);
}

static void put_be16(membuf *b, unsigned v) {
    put_byte(b, v >> 8);
    put_byte(b, v);
}

static void put_be32(membuf *b, uint32_t v) {
    put_be16(b, v >> 16);
    put_be16(b, v & 0xFFFF);
}

/* ---- PNG text ------------------------------------------------------------------------------ */

static void put_chunk(membuf *b, const char *type, const void *data, size_t n) {
    put_be32(b, (uint32_t)n);
    const size_t at = b->n;
    put(b, type, 4);
    put(b, data, n);
    put_be32(b, (uint32_t)crc32(0, b->p + at, (uInt)(n + 4)));
}

/* zlib stream of `n` letters 'a' (deflate makes about a kilobyte of a megabyte of them; not
 * zeros, which libpng would have kept as empty strings). */
static uint8_t *text_deflated(size_t n, size_t *zn) {
    uint8_t *text = malloc(n ? n : 1);
    uLongf len = compressBound((uLong)n);
    uint8_t *z = malloc(len);
    assert_true(text && z);
    memset(text, 'a', n);
    assert_int_equal(compress2(z, &len, text, (uLong)n, 9), Z_OK);
    free(text);
    *zn = len;
    return z;
}

/* A text chunk whose text inflates to `text_bytes` letters: zTXt, or a compressed iTXt. */
static void put_text_bomb(membuf *b, const char *type, size_t text_bytes) {
    size_t zn;
    uint8_t *z = text_deflated(text_bytes, &zn);
    membuf c = {0};
    put(&c, "Comment", 8); /* keyword and its NUL */
    if (strcmp(type, "iTXt") == 0) put(&c, "\1\0\0\0", 4); /* compressed, method 0, no lang/key */
    else put_byte(&c, 0);                                 /* zTXt: method 0 */
    put(&c, z, zn);
    put_chunk(b, type, c.p, c.n);
    free(c.p);
    free(z);
}

/* A 1x1 grey PNG with `count` text chunks of `text_bytes` each, before or after its pixels. */
static uint8_t *png_with_text(const char *type, int count, size_t text_bytes, bool after,
                              size_t *n) {
    membuf b = {0};
    put(&b, "\x89PNG\r\n\x1a\n", 8);
    const uint8_t ihdr[13] = {0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0};
    put_chunk(&b, "IHDR", ihdr, sizeof ihdr);
    const uint8_t row[2] = {0, 77}; /* filter byte, one grey sample */
    uint8_t idat[64];
    uLongf idat_len = sizeof idat;
    assert_int_equal(compress2(idat, &idat_len, row, sizeof row, 9), Z_OK);
    for (int i = 0; !after && i < count; i++) put_text_bomb(&b, type, text_bytes);
    put_chunk(&b, "IDAT", idat, idat_len);
    for (int i = 0; after && i < count; i++) put_text_bomb(&b, type, text_bytes);
    put_chunk(&b, "IEND", NULL, 0);
    *n = b.n;
    return b.p;
}

static void test_png_text_chunk_past_a_megabyte_is_refused(void **state) {
    (void)state;
    static const char *types[] = {"zTXt", "iTXt"};
    for (int t = 0; t < 2; t++) {
        for (int after = 0; after < 2; after++) { /* Pillow reads text after the pixels too */
            size_t n;
            uint8_t *p = png_with_text(types[t], 1, (1 << 20) + 1, after, &n);
            assert_true(n < 8192); /* a few kilobytes of file */
            qvl_image img;
            qvl_error err = {0};
            assert_int_equal(qvl_image_decode(p, n, "text.png", &img, &err), QVL_E_LIMIT);
            assert_null(img.rgb);
            assert_one_line(&err, "text.png");
            assert_contains(err.msg, types[t]);
            assert_contains(err.msg, "1048576");
            int32_t w, h;
            assert_int_equal(qvl_image_probe(p, n, "text.png", &w, &h, &err), QVL_E_LIMIT);
            free(p);
        }
    }
    /* A zTXt compression method other than 0 is refused, as Pillow does. */
    membuf b = {0};
    put(&b, "\x89PNG\r\n\x1a\n", 8);
    const uint8_t ihdr[13] = {0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0};
    put_chunk(&b, "IHDR", ihdr, sizeof ihdr);
    put_chunk(&b, "zTXt", "k\0\1xx", 5);
    put_chunk(&b, "IEND", NULL, 0);
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(b.p, b.n, "method.png", &img, &err), QVL_E_PARSE);
    assert_one_line(&err, "method.png");
    assert_contains(err.msg, "compression method 1");
    free(b.p);
}

static void test_png_text_over_64_mib_in_all_is_refused(void **state) {
    (void)state;
    size_t n;
    /* 65 chunks of exactly 1 MiB each: every chunk is within the per-chunk limit. */
    uint8_t *p = png_with_text("zTXt", 65, 1 << 20, false, &n);
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(p, n, "many.png", &img, &err), QVL_E_LIMIT);
    assert_null(img.rgb);
    assert_one_line(&err, "many.png");
    assert_contains(err.msg, "67108864");
    free(p);
}

/* Peak resident memory of this process, in KiB. */
static long peak_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* 60 chunks of 1 MiB of text each: within Pillow's limits, so the picture decodes, but qvl holds
 * one chunk's text at a time (libpng kept them all: 60 MiB for a 70 KB file). Measured in a
 * child process, whose peak starts at its size when forked. */
static void test_png_text_within_limits_decodes_in_bounded_memory(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = png_with_text("zTXt", 60, 1 << 20, false, &n);
    assert_true(n < 128 * 1024);
    fflush(NULL);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        const long before = peak_rss_kib();
        qvl_image img;
        qvl_error err = {0};
        const qvl_status st = qvl_image_decode(p, n, "sixty.png", &img, &err);
        const long grew = peak_rss_kib() - before;
        if (st != QVL_OK) {
            fprintf(stderr, "decode failed: %s\n", err.msg);
            _exit(1);
        }
        const bool ok = img.width == 1 && img.height == 1 && img.rgb[0] == 77;
        qvl_image_free(&img);
        if (!ok) _exit(2);
        if (grew > 16 * 1024) {
            fprintf(stderr, "peak resident memory grew by %ld KiB\n", grew);
            _exit(3);
        }
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(p);
}

/* ---- progressive JPEG scans ---------------------------------------------------------------- */

typedef struct bits {
    membuf *b;
    uint32_t acc;
    int n;
} bits;

static void put_bits(bits *w, uint32_t v, int n) {
    for (int i = n - 1; i >= 0; i--) {
        w->acc = w->acc << 1 | ((v >> i) & 1);
        if (++w->n == 8) {
            put_byte(w->b, w->acc);
            if (w->acc == 0xFF) put_byte(w->b, 0); /* byte stuffing */
            w->acc = 0, w->n = 0;
        }
    }
}

static void flush_bits(bits *w) {
    while (w->n) put_bits(w, 1, 1); /* pad with ones */
}

/* A progressive grey JPEG of w x h (multiples of 8): a DC scan giving every block level 128, then
 * `ac_scans` AC scans (1..63) that code nothing: end-of-band runs over all blocks, a few dozen
 * bytes each, yet each one makes libjpeg visit every block. */
static uint8_t *jpeg_empty_scans(int w, int h, int ac_scans, size_t *n) {
    membuf b = {0};
    put_be16(&b, 0xFFD8);
    put_be16(&b, 0xFFDB); /* quantization table 0: all ones */
    put_be16(&b, 67);
    put_byte(&b, 0);
    for (int i = 0; i < 64; i++) put_byte(&b, 1);
    put_be16(&b, 0xFFC2); /* progressive frame, one component */
    put_be16(&b, 11);
    put_byte(&b, 8);
    put_be16(&b, (unsigned)h);
    put_be16(&b, (unsigned)w);
    put_byte(&b, 1);
    put_byte(&b, 1);
    put_byte(&b, 0x11);
    put_byte(&b, 0);
    /* DC table: category 0 is the one-bit code 0. */
    put_be16(&b, 0xFFC4);
    put_be16(&b, 2 + 1 + 16 + 1);
    put_byte(&b, 0x00);
    for (int i = 0; i < 16; i++) put_byte(&b, i == 0 ? 1 : 0);
    put_byte(&b, 0);
    /* AC table: the fifteen end-of-band run symbols EOBr (r << 4), four-bit codes r. */
    put_be16(&b, 0xFFC4);
    put_be16(&b, 2 + 1 + 16 + 15);
    put_byte(&b, 0x10);
    for (int i = 0; i < 16; i++) put_byte(&b, i == 3 ? 15 : 0);
    for (int r = 0; r < 15; r++) put_byte(&b, (unsigned)(r << 4));

    const int64_t blocks = (int64_t)(w / 8) * (h / 8);
    const uint8_t sos_dc[] = {0xFF, 0xDA, 0, 8, 1, 1, 0x00, 0, 0, 0x00};
    put(&b, sos_dc, sizeof sos_dc);
    bits wr = {.b = &b};
    for (int64_t i = 0; i < blocks; i++) put_bits(&wr, 0, 1);
    flush_bits(&wr);
    const uint8_t sos_ac[] = {0xFF, 0xDA, 0, 8, 1, 1, 0x00, 1, 63, 0x00};
    for (int s = 0; s < ac_scans; s++) {
        put(&b, sos_ac, sizeof sos_ac);
        for (int64_t left = blocks; left > 0;) {
            int r = 14;
            int64_t run = 32767; /* EOB14 with all 14 extra bits set */
            if (left < run) {
                for (r = 0; ((int64_t)2 << r) <= left; r++) {
                }
                run = left;
            }
            put_bits(&wr, (uint32_t)r, 4);
            if (r) put_bits(&wr, (uint32_t)(run - ((int64_t)1 << r)), r);
            left -= run;
        }
        flush_bits(&wr);
    }
    put_be16(&b, 0xFFD9);
    *n = b.n;
    return b.p;
}

static void test_progressive_jpeg_scan_bomb_is_refused(void **state) {
    (void)state;
    /* 4096 x 4096 grey: 262,144 blocks; 200 empty scans in 80 KB would be 52 million block
     * visits, more than 32 passes over the picture. */
    size_t n;
    uint8_t *p = jpeg_empty_scans(4096, 4096, 200, &n);
    assert_true(n < 100 * 1024);
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(p, n, "scans.jpg", &img, &err), QVL_E_LIMIT);
    assert_null(img.rgb);
    assert_one_line(&err, "scans.jpg");
    assert_contains(err.msg, "scans already decode more than 8388608 blocks");
    free(p);
}

static void test_jpeg_scans_within_the_budget_decode(void **state) {
    (void)state;
    /* The same picture with 20 scans: within 32 passes. */
    size_t n;
    uint8_t *p = jpeg_empty_scans(4096, 4096, 20, &n);
    qvl_image img;
    qvl_error err = {0};
    if (qvl_image_decode(p, n, "twenty.jpg", &img, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_true(img.width == 4096 && img.height == 4096);
    assert_int_equal(img.rgb[0], 128);
    assert_int_equal(img.rgb[(size_t)4096 * 4096 * 3 - 1], 128);
    qvl_image_free(&img);
    free(p);
    /* A small picture may have many scans: the budget is work (scans x blocks), not scans. */
    p = jpeg_empty_scans(64, 64, 600, &n);
    if (qvl_image_decode(p, n, "small.jpg", &img, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_true(img.width == 64 && img.rgb[0] == 128);
    qvl_image_free(&img);
    free(p);
    /* Past MAX_SCANS (1000) is refused whatever the size. */
    p = jpeg_empty_scans(8, 8, 1000, &n);
    assert_int_equal(qvl_image_decode(p, n, "1001.jpg", &img, &err), QVL_E_LIMIT);
    assert_one_line(&err, "1001.jpg");
    assert_contains(err.msg, "more than 1000 scans");
    free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_text_chunk_past_a_megabyte_is_refused),
        cmocka_unit_test(test_png_text_over_64_mib_in_all_is_refused),
        cmocka_unit_test(test_png_text_within_limits_decodes_in_bounded_memory),
        cmocka_unit_test(test_progressive_jpeg_scan_bomb_is_refused),
        cmocka_unit_test(test_jpeg_scans_within_the_budget_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
