/* Decompression bombs: a picture's declared size is checked before anything is decoded, against
 * the pixel limit (qvl_image_max_pixels, QVL_IMAGE_MAX_PIXELS in the environment) and, for PNG
 * and sequential JPEG, against what a file of its size can hold at all. Legitimate pictures that
 * compress very well still decode. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qvl/image.h"
#include "test_image_write.h"

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

typedef struct membuf {
    unsigned char *p;
    size_t n, cap;
} membuf;

static void put(membuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_be32(membuf *b, uint32_t v) {
    const unsigned char x[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                                (unsigned char)(v >> 8), (unsigned char)v};
    put(b, x, 4);
}

static uint32_t crc32_of(const unsigned char *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    }
    return ~c;
}

static void put_chunk(membuf *b, const char *type, const unsigned char *data, size_t n) {
    put_be32(b, (uint32_t)n);
    const size_t at = b->n;
    put(b, type, 4);
    if (n) put(b, data, n);
    put_be32(b, crc32_of(b->p + at, n + 4));
}

/* The committed 43-byte GIF declaring a 63550 x 2049 canvas (130 megapixels). */
static const unsigned char gif_bomb[] = {
    0x47, 0x49, 0x46, 0x38, 0x37, 0x61, 0x3e, 0xf8, 0x01, 0x08, 0x81, 0x00, 0xff, 0x7f, 0x00,
    0x00, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x02, 0x00, 0x02, 0x00, 0x00, 0x02, 0x03, 0x84, 0x1d, 0x05, 0x3f, 0x00, 0x3b};

static void test_default_limit_refuses_a_giant_canvas(void **state) {
    (void)state;
    unsetenv("QVL_IMAGE_MAX_PIXELS");
    assert_int_equal(qvl_image_max_pixels(), QVL_IMAGE_MAX_PIXELS);
    /* The model never needs more than its processor's max_pixels (16,777,216 for Qwen3-VL). */
    assert_true(QVL_IMAGE_MAX_PIXELS >= 16777216);
    assert_true(QVL_IMAGE_MAX_PIXELS < 63550LL * 2049);
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(gif_bomb, sizeof gif_bomb, "bomb.gif", &img, &err),
                     QVL_E_LIMIT);
    assert_null(img.rgb);
    assert_contains(err.msg, "bomb.gif: 63550x2049");
    assert_contains(err.msg, "QVL_IMAGE_MAX_PIXELS");
}

/* A binary PGM of w x h grey pixels, all present. */
static unsigned char *pgm(int w, int h, size_t *n) {
    char head[64];
    int hl = snprintf(head, sizeof head, "P5\n%d %d\n255\n", w, h);
    *n = (size_t)hl + (size_t)w * (size_t)h;
    unsigned char *p = calloc(1, *n);
    assert_non_null(p);
    memcpy(p, head, (size_t)hl);
    return p;
}

static void test_limit_from_the_environment(void **state) {
    (void)state;
    size_t n;
    unsigned char *p = pgm(20, 20, &n);
    qvl_image img;
    qvl_error err = {0};

    setenv("QVL_IMAGE_MAX_PIXELS", "399", 1);
    assert_int_equal(qvl_image_max_pixels(), 399);
    assert_int_equal(qvl_image_decode(p, n, "a.pgm", &img, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "limit of 399");
    setenv("QVL_IMAGE_MAX_PIXELS", "400", 1);
    assert_int_equal(qvl_image_decode(p, n, "a.pgm", &img, &err), QVL_OK);
    qvl_image_free(&img);

    /* Values that are not a whole number in range leave the built-in limit. */
    const char *bad[] = {"", "abc", "0", "-5", "12x", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("QVL_IMAGE_MAX_PIXELS", bad[i], 1);
        assert_int_equal(qvl_image_max_pixels(), QVL_IMAGE_MAX_PIXELS);
    }
    char big[32];
    snprintf(big, sizeof big, "%lld", QVL_IMAGE_MAX_PIXELS_CEILING + 1);
    setenv("QVL_IMAGE_MAX_PIXELS", big, 1);
    assert_int_equal(qvl_image_max_pixels(), QVL_IMAGE_MAX_PIXELS);
    unsetenv("QVL_IMAGE_MAX_PIXELS");
    free(p);
}

/* A PNG whose IHDR declares 8000 x 8000 RGB (192 MB of rows) over a few bytes of data: deflate
 * cannot expand a byte into more than 1032, so it is refused before libpng allocates. */
static void test_png_declaring_more_than_its_data_can_hold(void **state) {
    (void)state;
    membuf b = {0};
    put(&b, "\x89PNG\r\n\x1a\n", 8);
    unsigned char ihdr[13] = {0};
    ihdr[2] = 0x1f, ihdr[3] = 0x40; /* width 8000 */
    ihdr[6] = 0x1f, ihdr[7] = 0x40; /* height 8000 */
    ihdr[8] = 8, ihdr[9] = 2;       /* 8-bit RGB */
    put_chunk(&b, "IHDR", ihdr, sizeof ihdr);
    const unsigned char idat[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
    put_chunk(&b, "IDAT", idat, sizeof idat);
    put_chunk(&b, "IEND", NULL, 0);
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(b.p, b.n, "bomb.png", &img, &err), QVL_E_PARSE);
    assert_null(img.rgb);
    assert_contains(err.msg, "bomb.png: PNG header declares 8000x8000");
    assert_contains(err.msg, "decompression bomb");
    free(b.p);
}

/* A baseline JPEG declaring 8000 x 8000 with one byte of scan data: every 8x8 block costs at
 * least two bits, so at least 250,000 bytes would be needed. */
static void test_jpeg_declaring_more_than_its_data_can_hold(void **state) {
    (void)state;
    const unsigned char jpg[] = {
        0xFF, 0xD8,                                                             /* SOI */
        0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x1F, 0x40, 0x1F, 0x40, 0x01, 0x01, 0x11, 0x00, /* SOF0 */
        0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3F, 0x00,             /* SOS */
        0x00, 0xFF, 0xD9};                                                      /* data, EOI */
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(jpg, sizeof jpg, "bomb.jpg", &img, &err), QVL_E_PARSE);
    assert_contains(err.msg, "bomb.jpg: JPEG header declares 8000x8000");
    assert_contains(err.msg, "decompression bomb");
}

/* A GIF89a of one w x h frame of colour index 0 (a two-entry global table: 0x102030, white),
 * its LZW data written as densely as the format allows: the run of zeros is coded with ever
 * longer strings, and once the table is full the longest one, 12 bits for 4,090 pixels, is
 * repeated without a clear code. `cut` keeps only that many data bytes. */
static unsigned char *flat_gif(int w, int h, size_t cut, size_t *n) {
    const size_t pixels = (size_t)w * h, cap = 64 + pixels / 1000;
    unsigned char *g = calloc(1, cap), *data = calloc(1, cap);
    assert_true(g && data);
    size_t k = 0, bits = 0;
    uint32_t acc = 0;
    int width = 3;               /* minimum code size 2: clear 4, end 5, first entry 6 */
    int next = 6;
    size_t len = 0;              /* pixels in the current string (entry len + 4 codes len) */
#define PUT(code)                                                                     \
    do {                                                                              \
        acc |= (uint32_t)(code) << bits, bits += (size_t)width;                       \
        while (bits >= 8) data[k++] = (unsigned char)acc, acc >>= 8, bits -= 8;       \
    } while (0)
    PUT(4);
    for (size_t i = 0; i < pixels; i++) {
        const int longer = len + 1 == 1 ? 0 : (int)(len + 1) + 4;
        if (len == 0 || (len + 1 >= 2 && longer < next)) {
            len++;
            continue;
        }
        PUT(len == 1 ? 0 : (int)len + 4);
        /* as giflib's encoder: wider codes once the next entry needs them, then the entry */
        if (next >= (1 << width) && width < 12) width++;
        if (next < 4095) next++;
        len = 1;
    }
    PUT(len == 1 ? 0 : (int)len + 4);
    PUT(5);
    if (bits) data[k++] = (unsigned char)acc;
#undef PUT
    if (cut < k) k = cut;
    size_t o = 0;
    const unsigned char head[] = {'G', 'I', 'F', '8', '9', 'a', (unsigned char)w, (unsigned char)(w >> 8),
                                  (unsigned char)h, (unsigned char)(h >> 8), 0x80, 0, 0,
                                  0x10, 0x20, 0x30, 0xff, 0xff, 0xff, ',', 0, 0, 0, 0,
                                  (unsigned char)w, (unsigned char)(w >> 8), (unsigned char)h,
                                  (unsigned char)(h >> 8), 0, 2};
    memcpy(g, head, sizeof head), o = sizeof head;
    for (size_t at = 0; at < k; at += 255) {
        const size_t b = k - at < 255 ? k - at : 255;
        g[o++] = (unsigned char)b;
        memcpy(g + o, data + at, b), o += b;
    }
    g[o++] = 0;   /* end of the frame's data */
    g[o++] = ';'; /* trailer */
    free(data);
    *n = o;
    return g;
}

/* A GIF frame's LZW codes give at most 2731 pixels a byte: an 8000 x 8000 frame needs 23,435
 * bytes, and a file of 200 is refused from its header, before the canvas is allocated. A frame
 * coded as densely as LZW allows passes that floor and decodes. */
static void test_gif_frame_declaring_more_than_its_data_can_hold(void **state) {
    (void)state;
    size_t n;
    unsigned char *g = flat_gif(8000, 8000, 160, &n);
    qvl_image img;
    int32_t w = 0, h = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_image_probe(g, n, "bomb.gif", &w, &h, &err), QVL_E_PARSE);
    assert_contains(err.msg, "bomb.gif: GIF header declares 8000x8000 pixels, which need at least 23");
    assert_contains(err.msg, "decompression bomb");
    assert_int_equal(qvl_image_decode(g, n, "bomb.gif", &img, &err), QVL_E_PARSE);
    assert_null(img.rgb);
    free(g);

    g = flat_gif(4000, 3000, SIZE_MAX, &n);
    /* 12 Mpixel in about 7 KB: the ramp of string lengths up to the full table costs most */
    assert_true(n * 1500 < (size_t)4000 * 3000);
    if (qvl_image_decode(g, n, "flat.gif", &img, &err) != QVL_OK) fail_msg("%s", err.msg);
    assert_int_equal(img.width, 4000);
    assert_int_equal(img.height, 3000);
    for (size_t i = 0; i < (size_t)4000 * 3000; i += 999)
        assert_memory_equal(img.rgb + 3 * i, "\x10\x20\x30", 3);
    qvl_image_free(&img);
    free(g);
}

/* Uniform pictures compress as well as real ones ever do; they stay readable. */
static void test_well_compressed_pictures_still_decode(void **state) {
    (void)state;
    const int w = 2048, h = 1536;
    unsigned char *px = malloc((size_t)w * h * 3);
    assert_non_null(px);
    memset(px, 0x80, (size_t)w * h * 3);
    qvl_image img;
    qvl_error err = {0};

    membuf png = {0};
    png.p = test_png_encode(px, w, h, 3, &png.n);
    assert_non_null(png.p);
    assert_true(png.n * 500 < (size_t)w * h * 3); /* a strong compression (libpng: about 1000:1) */
    assert_int_equal(qvl_image_decode(png.p, png.n, "flat.png", &img, &err), QVL_OK);
    assert_int_equal(img.width, w);
    assert_int_equal(img.height, h);
    assert_int_equal(img.rgb[(size_t)w * h * 3 - 1], 0x80);
    qvl_image_free(&img);

    membuf jpg = {0};
    jpg.p = test_jpeg_encode(px, w, h, 90, &jpg.n);
    assert_non_null(jpg.p);
    assert_int_equal(qvl_image_decode(jpg.p, jpg.n, "flat.jpg", &img, &err), QVL_OK);
    assert_int_equal(img.width, w);
    assert_int_equal(img.height, h);
    qvl_image_free(&img);
    free(png.p);
    free(jpg.p);
    free(px);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_limit_refuses_a_giant_canvas),
        cmocka_unit_test(test_limit_from_the_environment),
        cmocka_unit_test(test_png_declaring_more_than_its_data_can_hold),
        cmocka_unit_test(test_jpeg_declaring_more_than_its_data_can_hold),
        cmocka_unit_test(test_gif_frame_declaring_more_than_its_data_can_hold),
        cmocka_unit_test(test_well_compressed_pictures_still_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
