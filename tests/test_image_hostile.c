/* Pictures that broke the old stb decoder and the contracts of the new ones: a 16-bit
 * grey PGM (stb_image read past its buffer converting it), a JPEG scan using Huffman tables no
 * DHT segment defined (stb_image decoded uninitialised memory), a GIF without frames, the pixel
 * limit in front of WebP, and qvl_image_probe agreeing with qvl_image_decode on every committed
 * fixture. Run under ASan/UBSan in CI. */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/image.h"
#include "test_image_write.h"

#define FIXTURES QVL_SOURCE_DIR "/tests/fixtures/images"

static void assert_contains(const char *haystack, const char *needle) {
    if (!strstr(haystack, needle)) fail_msg("expected \"%s\" in \"%s\"", needle, haystack);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n ? *n : 1);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* A P5 picture with maxval 65535: 16-bit big-endian samples. Pillow holds it as an integer
 * picture and clips to 255 on the way to RGB; every pixel must come from the file. */
static uint8_t *pgm16(int w, int h, size_t *n, uint16_t (*sample)(int x, int y)) {
    char head[64];
    const int hl = snprintf(head, sizeof head, "P5\n%d %d\n65535\n", w, h);
    *n = (size_t)hl + (size_t)w * (size_t)h * 2;
    uint8_t *p = malloc(*n);
    assert_non_null(p);
    memcpy(p, head, (size_t)hl);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            const uint16_t v = sample(x, y);
            p[hl + 2 * (y * w + x)] = (uint8_t)(v >> 8);
            p[hl + 2 * (y * w + x) + 1] = (uint8_t)v;
        }
    return p;
}

static uint16_t small_sample(int x, int y) { return (uint16_t)((y * 4 + x) * 23); }
static uint16_t big_sample(int x, int y) { return (uint16_t)((x * 7 + y * 13) % 300); }

static void test_pgm_16bit_grey(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = pgm16(4, 4, &n, small_sample);
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(p, n, "g16.pgm", &img, &err), QVL_OK);
    assert_int_equal(img.width, 4);
    assert_int_equal(img.height, 4);
    for (int i = 0; i < 16; i++) {
        const int v = i * 23 > 255 ? 255 : i * 23;
        for (int c = 0; c < 3; c++)
            if (img.rgb[3 * i + c] != v) fail_msg("pixel %d channel %d: %d, want %d", i, c, img.rgb[3 * i + c], v);
    }
    qvl_image_free(&img);
    free(p);

    /* The size that crashed (2500 x 2500): every pixel right, nothing read past the file. */
    p = pgm16(2500, 2500, &n, big_sample);
    assert_int_equal(qvl_image_decode(p, n, "big16.pgm", &img, &err), QVL_OK);
    assert_int_equal(img.width, 2500);
    for (int y = 0; y < 2500; y += 7)
        for (int x = 0; x < 2500; x += 3) {
            const int v = big_sample(x, y) > 255 ? 255 : big_sample(x, y);
            const uint8_t *px = img.rgb + 3 * ((size_t)y * 2500 + (size_t)x);
            if (px[0] != v || px[1] != v || px[2] != v) fail_msg("(%d, %d): %d, want %d", x, y, px[0], v);
        }
    qvl_image_free(&img);
    /* One byte short: refused, not padded with whatever lies past the buffer. */
    assert_int_equal(qvl_image_decode(p, n - 1, "cut16.pgm", &img, &err), QVL_E_PARSE);
    assert_contains(err.msg, "truncated PNM");
    free(p);
}

/* Offset of the first marker segment `marker` (the FF byte), or 0. */
static size_t find_segment(const uint8_t *p, size_t n, uint8_t marker) {
    size_t i = 2;
    while (i + 4 <= n && p[i] == 0xFF) {
        if (p[i + 1] == marker) return i;
        i += 2 + ((size_t)p[i + 2] << 8 | p[i + 3]);
    }
    return 0;
}

static uint8_t *test_picture_jpeg(size_t *n, uint8_t **rgb_out) {
    const int w = 24, h = 16;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)(i * 37 % 251);
    uint8_t *jpg = test_jpeg_encode(rgb, w, h, 90, n);
    assert_non_null(jpg);
    *rgb_out = rgb;
    return jpg;
}

static void test_jpeg_scan_with_undefined_huffman_tables(void **state) {
    (void)state;
    size_t n;
    uint8_t *rgb;
    uint8_t *jpg = test_picture_jpeg(&n, &rgb);
    qvl_image good, img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(jpg, n, "good.jpg", &good, &err), QVL_OK);

    /* The scan's first component selects DC and AC tables 2, which no DHT defines. */
    const size_t sos = find_segment(jpg, n, 0xDA);
    assert_true(sos > 0);
    uint8_t *bad = malloc(n);
    memcpy(bad, jpg, n);
    bad[sos + 6] = 0x22; /* FF DA, length (2), Ns (1), Cs (1), then Td/Ta */
    assert_int_equal(qvl_image_decode(bad, n, "undef.jpg", &img, &err), QVL_E_PARSE);
    assert_null(img.rgb);
    assert_contains(err.msg, "undef.jpg: cannot decode JPEG (");
    assert_contains(err.msg, "Huffman table");
    assert_null(strchr(err.msg, '\n'));
    bad[sos + 6] = 0x03; /* AC table 3 alone */
    assert_int_equal(qvl_image_decode(bad, n, "undef.jpg", &img, &err), QVL_E_PARSE);
    assert_contains(err.msg, "Huffman table");
    free(bad);

    /* No DHT at all, tables 0 and 1 selected: libjpeg-turbo supplies the standard tables (the
     * ones Motion-JPEG leaves out, and the ones the encoder used), so the pixels are exactly
     * those of the complete file, whatever the heap held. */
    uint8_t *nodht = malloc(n);
    size_t m = 0, i = 0;
    memcpy(nodht, jpg, 2);
    m = i = 2;
    while (i + 4 <= n && jpg[i] == 0xFF && jpg[i + 1] != 0xDA) {
        const size_t len = 2 + ((size_t)jpg[i + 2] << 8 | jpg[i + 3]);
        if (jpg[i + 1] != 0xC4) memcpy(nodht + m, jpg + i, len), m += len;
        i += len;
    }
    assert_true(m < i); /* something was removed */
    memcpy(nodht + m, jpg + i, n - i);
    m += n - i;
    assert_int_equal(qvl_image_decode(nodht, m, "nodht.jpg", &img, &err), QVL_OK);
    assert_int_equal(img.width, good.width);
    assert_memory_equal(img.rgb, good.rgb, (size_t)good.width * (size_t)good.height * 3);
    qvl_image_free(&img);
    free(nodht);
    qvl_image_free(&good);
    free(jpg);
    free(rgb);
}

static void test_gif_without_frames(void **state) {
    (void)state;
    /* Screen 4x4 with a 2-colour global table, then the trailer. */
    const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 4, 0, 4, 0, 0x80, 0, 0,
                           0, 0, 0, 255, 255, 255, 0x3B};
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(gif, sizeof gif, "empty.gif", &img, &err), QVL_E_PARSE);
    assert_contains(err.msg, "empty.gif: GIF holds no picture");
    /* Cut inside the screen descriptor's colour table. */
    assert_int_equal(qvl_image_decode(gif, 15, "cut.gif", &img, &err), QVL_E_PARSE);
    assert_contains(err.msg, "cut.gif: cannot decode GIF (");
}

static void test_webp_pixel_limit_before_decoding(void **state) {
    (void)state;
    size_t n;
    uint8_t *p = read_all(FIXTURES "/webp_lossy.webp", &n);
    qvl_image img;
    qvl_error err = {0};
    setenv("QVL_IMAGE_MAX_PIXELS", "1000", 1); /* the picture is 41 x 27 = 1107 */
    assert_int_equal(qvl_image_decode(p, n, "l.webp", &img, &err), QVL_E_LIMIT);
    assert_contains(err.msg, "l.webp: 41x27 is 1107 pixels, more than the limit of 1000");
    unsetenv("QVL_IMAGE_MAX_PIXELS");
    assert_int_equal(qvl_image_decode(p, n / 2, "half.webp", &img, &err), QVL_E_PARSE);
    assert_contains(err.msg, "half.webp: ");
    free(p);
}

/* qvl_image_probe reads only headers, yet gives the decoded (upright) size of every fixture. */
static void test_probe_matches_decode(void **state) {
    (void)state;
    FILE *list = fopen(FIXTURES "/expected.txt", "r");
    assert_non_null(list);
    char line[512], name[256];
    int count = 0;
    while (fgets(line, sizeof line, list)) {
        int w, h;
        if (line[0] == '#' || sscanf(line, "%255s %d %d", name, &w, &h) != 3) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
        size_t n;
        uint8_t *p = read_all(path, &n);
        int32_t pw = 0, ph = 0;
        qvl_error err = {0};
        if (qvl_image_probe(p, n, name, &pw, &ph, &err) != QVL_OK) fail_msg("%s", err.msg);
        if (pw != w || ph != h) fail_msg("%s: probe %dx%d, Pillow %dx%d", name, pw, ph, w, h);
        free(p);
        count++;
    }
    fclose(list);
    assert_true(count >= 30);
}

/* Every still fixture cut to two thirds of its bytes is refused with one line naming it, never
 * decoded with made-up pixels (Pillow refuses these too). An animation cut in a later frame
 * still holds its whole first frame, which is all that is decoded. */
static void test_cut_fixtures_are_refused(void **state) {
    (void)state;
    FILE *list = fopen(FIXTURES "/expected.txt", "r");
    assert_non_null(list);
    char line[512], name[256];
    int count = 0;
    while (fgets(line, sizeof line, list)) {
        int w, h;
        if (line[0] == '#' || sscanf(line, "%255s %d %d", name, &w, &h) != 3) continue;
        if (strstr(name, "animated")) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
        size_t n;
        uint8_t *p = read_all(path, &n);
        qvl_image img;
        qvl_error err = {0};
        const qvl_status st = qvl_image_decode(p, n * 2 / 3, name, &img, &err);
        if (st == QVL_OK) fail_msg("%s cut to %zu of %zu bytes decoded", name, n * 2 / 3, n);
        assert_null(img.rgb);
        if (strncmp(err.msg, name, strlen(name)) != 0 || strchr(err.msg, '\n'))
            fail_msg("%s: message \"%s\"", name, err.msg);
        free(p);
        count++;
    }
    fclose(list);
    assert_true(count >= 30);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pgm_16bit_grey),
        cmocka_unit_test(test_jpeg_scan_with_undefined_huffman_tables),
        cmocka_unit_test(test_gif_without_frames),
        cmocka_unit_test(test_webp_pixel_limit_before_decoding),
        cmocka_unit_test(test_probe_matches_decode),
        cmocka_unit_test(test_cut_fixtures_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
