/* Pictures: decoding (formats, EXIF orientation, errors), the image processor (smart_resize,
 * resampling, normalisation, patch order), the preprocessor config, image pad expansion and the
 * 3-D positions of get_rope_index (docs/MODEL.md, with its reference values). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "qvl/image.h"
#include "qvl/image_preprocess.h"
#include "qvl/mm_prompt.h"
#include "test_image_write.h"

#define TMP QVL_BINARY_DIR "/test_image_tmp"

/* ---- smart_resize ------------------------------------------------------------------------- */

static void expect_resize(int64_t w, int64_t h, int64_t want_w, int64_t want_h) {
    int64_t oh = 0, ow = 0;
    qvl_error err = {0};
    assert_int_equal(qvl_smart_resize(h, w, 32, 65536, 16777216, &oh, &ow, &err), QVL_OK);
    if (oh != want_h || ow != want_w)
        fail_msg("%lldx%lld -> %lldx%lld, expected %lldx%lld", (long long)w, (long long)h,
                 (long long)ow, (long long)oh, (long long)want_w, (long long)want_h);
}

static void test_smart_resize_examples(void **state) {
    (void)state;
    /* Spec 4.8 (width x height), with Python's round-half-to-even: 720/32 = 22.5 -> 22. */
    expect_resize(640, 480, 640, 480);
    expect_resize(1920, 1080, 1920, 1088);
    expect_resize(1280, 720, 1280, 704);
    expect_resize(100, 100, 256, 256);     /* below min_pixels: scaled up */
    expect_resize(4032, 3024, 4032, 3008);
    expect_resize(6000, 4000, 4992, 3328); /* above max_pixels: scaled down */
    expect_resize(1024, 768, 1024, 768);
    /* The check: 1024x768 at default settings is grid 48x64, 768 tokens. */
    uint8_t *px = calloc(1024 * 768, 3);
    qvl_image im = {1024, 768, px};
    qvl_preprocess_config pc;
    qvl_preprocess_config_default(NULL, &pc);
    float *pv = NULL;
    qvl_image_grid g;
    qvl_error e = {0};
    assert_int_equal(qvl_image_preprocess(&im, &pc, &pv, &g, &e), QVL_OK);
    assert_true(g.t == 1 && g.h == 48 && g.w == 64);
    assert_int_equal(qvl_image_grid_tokens(&g, 2), 768);
    assert_float_equal(pv[0], -1.0f, 0);
    free(pv);
    free(px);
    /* 1.5 rounds to 2 (odd below): 48 px -> 64. */
    int64_t oh, ow;
    qvl_error err = {0};
    assert_int_equal(qvl_smart_resize(48, 48 * 40, 32, 32, 1 << 30, &oh, &ow, &err), QVL_OK);
    assert_int_equal(oh, 64);
    assert_int_equal(ow, 1920);
}

static void test_smart_resize_errors(void **state) {
    (void)state;
    int64_t oh, ow;
    qvl_error err = {0};
    assert_int_equal(qvl_smart_resize(1, 201, 32, 65536, 16777216, &oh, &ow, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "aspect ratio"));
    assert_int_equal(qvl_smart_resize(1, 200, 32, 65536, 16777216, &oh, &ow, &err), QVL_OK);
    assert_int_equal(qvl_smart_resize(0, 10, 32, 65536, 16777216, &oh, &ow, &err), QVL_E_INVALID);
    assert_int_equal(qvl_smart_resize(10, 10, 32, 100, 50, &oh, &ow, &err), QVL_E_INVALID);
}

/* ---- positions and pads ------------------------------------------------------------------- */

static void test_rope_index_640x480(void **state) {
    (void)state;
    /* Spec 15: grid (1, 30, 40) -> 300 pads after 4 text tokens. */
    const int32_t pad = 151655;
    qvl_image_grid g = {1, 30, 40};
    int64_t n_tok = 0;
    qvl_error err = {0};
    int64_t count = g.t * g.h * g.w / 4;
    assert_int_equal(count, 300);
    const int32_t templ[] = {151644, 872, 198, 151652, pad, 151653, 100, 200};
    int32_t *ids = NULL;
    assert_int_equal(qvl_expand_image_pads(templ, 8, pad, &count, 1, &ids, &n_tok, &err), QVL_OK);
    assert_int_equal(n_tok, 307);
    assert_int_equal(ids[4], pad);
    assert_int_equal(ids[303], pad);
    assert_int_equal(ids[304], 151653);
    int32_t *pos = malloc((size_t)(3 * n_tok) * sizeof *pos);
    int64_t next = 0;
    assert_int_equal(qvl_mrope_positions(ids, n_tok, pad, &g, 1, 2, 0, pos, &next, &err), QVL_OK);
#define P(c, i) pos[(c) * n_tok + (i)]
    for (int i = 0; i < 4; i++) assert_true(P(0, i) == i && P(1, i) == i && P(2, i) == i);
    assert_true(P(0, 4) == 4 && P(1, 4) == 4 && P(2, 4) == 4);       /* first pad */
    assert_true(P(0, 303) == 4 && P(1, 303) == 18 && P(2, 303) == 23); /* last pad */
    assert_true(P(0, 24) == 4 && P(1, 24) == 5 && P(2, 24) == 4);    /* row 1, col 0 */
    assert_true(P(0, 304) == 24 && P(1, 304) == 24 && P(2, 304) == 24); /* <|vision_end|> */
    assert_int_equal(P(0, 306), 26);
#undef P
    int32_t max_pos = 0;
    for (int64_t i = 0; i < 3 * n_tok; i++) max_pos = pos[i] > max_pos ? pos[i] : max_pos;
    assert_int_equal(max_pos + 1 - n_tok, -280); /* rope_delta (docs/MODEL.md) */
    assert_int_equal(next, 27);
    free(pos);
    free(ids);
}

static void test_rope_index_two_images_and_errors(void **state) {
    (void)state;
    const int32_t pad = 9;
    qvl_image_grid g[2] = {{1, 4, 6}, {1, 4, 4}}; /* 2x3 and 2x2 merged */
    const int32_t ids[] = {1, 9, 9, 9, 9, 9, 9, 2, 9, 9, 9, 9, 3};
    const int64_t n = 13;
    int32_t pos[3 * 13];
    int64_t next = 0;
    qvl_error err = {0};
    /* Continuing a sequence at position 10 (n_past + rope_delta). */
    assert_int_equal(qvl_mrope_positions(ids, n, pad, g, 2, 2, 10, pos, &next, &err), QVL_OK);
    assert_int_equal(pos[0], 10);
    assert_true(pos[6] == 11 && pos[n + 6] == 12 && pos[2 * n + 6] == 13); /* last of image 1 */
    assert_int_equal(pos[7], 14);                                         /* 11 + max(2, 3) */
    assert_true(pos[8] == 15 && pos[n + 8] == 15 && pos[2 * n + 8] == 15);
    assert_true(pos[11] == 15 && pos[n + 11] == 16 && pos[2 * n + 11] == 16);
    assert_int_equal(pos[12], 17);
    assert_int_equal(next, 18);
    /* A run cut short, too many runs, too few images: errors, never a wrong guess. */
    const int32_t short_run[] = {1, 9, 9, 2};
    assert_int_equal(qvl_mrope_positions(short_run, 4, pad, g, 1, 2, 0, pos, NULL, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "expected 6"));
    assert_int_equal(qvl_mrope_positions(ids, n, pad, g, 1, 2, 0, pos, NULL, &err), QVL_E_INVALID);
    const int32_t text[] = {1, 2};
    assert_int_equal(qvl_mrope_positions(text, 2, pad, g, 1, 2, 0, pos, NULL, &err), QVL_E_INVALID);
    /* Pad expansion: one placeholder per image. */
    int64_t counts[2] = {6, 4}, n_out = 0;
    int32_t *out = NULL;
    const int32_t templ[] = {1, 9, 2, 9, 3};
    assert_int_equal(qvl_expand_image_pads(templ, 5, pad, counts, 2, &out, &n_out, &err), QVL_OK);
    assert_int_equal(n_out, 13);
    assert_memory_equal(out, ids, sizeof ids);
    free(out);
    assert_int_equal(qvl_expand_image_pads(templ, 5, pad, counts, 1, &out, &n_out, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "2 image placeholders but 1 images"));
    assert_null(out);
}

/* ---- decoding ----------------------------------------------------------------------------- */

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n);
    assert_int_equal(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_decode_ppm_png_and_errors(void **state) {
    (void)state;
    const uint8_t ppm[] = "P6\n2 1\n255\n\x01\x02\x03\xfa\xfb\xfc";
    qvl_image img;
    qvl_error err = {0};
    assert_int_equal(qvl_image_decode(ppm, sizeof ppm - 1, "a.ppm", &img, &err), QVL_OK);
    assert_int_equal(img.width, 2);
    assert_int_equal(img.height, 1);
    const uint8_t want[6] = {1, 2, 3, 250, 251, 252};
    assert_memory_equal(img.rgb, want, 6);
    qvl_image_free(&img);

    /* PNG with alpha and grey+alpha: alpha dropped, grey copied to R, G and B. */
    const uint8_t rgba[2 * 2 * 4] = {10, 20, 30, 0, 40, 50, 60, 255, 70, 80, 90, 128, 1, 2, 3, 4};
    size_t pn = 0;
    uint8_t *pb = test_png_encode(rgba, 2, 2, 4, &pn);
    assert_non_null(pb);
    write_all(TMP ".png", pb, pn);
    free(pb);
    assert_int_equal(qvl_image_load(TMP ".png", &img, &err), QVL_OK);
    assert_int_equal(img.width * img.height, 4);
    const uint8_t rgb[12] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 1, 2, 3};
    assert_memory_equal(img.rgb, rgb, 12);
    qvl_image_free(&img);
    const uint8_t ga[2 * 2] = {7, 200, 9, 100};
    pb = test_png_encode(ga, 1, 2, 2, &pn);
    assert_non_null(pb);
    write_all(TMP ".png", pb, pn);
    free(pb);
    assert_int_equal(qvl_image_load(TMP ".png", &img, &err), QVL_OK);
    const uint8_t grey[6] = {7, 7, 7, 9, 9, 9};
    assert_memory_equal(img.rgb, grey, 6);
    qvl_image_free(&img);
    /* BMP is refused by name (docs/hostile-input.md says why). */
    const uint8_t bmp[] = "BM\x46\0\0\0\0\0\0\0\x36\0\0\0\x28\0\0\0\x02\0\0\0\x02\0\0\0\x01\0\x18\0";
    assert_int_equal(qvl_image_decode(bmp, sizeof bmp - 1, "a.bmp", &img, &err), QVL_E_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "a.bmp: BMP pictures are not supported"));
    assert_null(img.rgb);

    /* Truncated PNG. */
    size_t n = 0;
    uint8_t *png = read_all(TMP ".png", &n);
    assert_int_not_equal(qvl_image_decode(png, n / 2, "cut.png", &img, &err), QVL_OK);
    assert_non_null(strstr(err.msg, "cut.png"));
    assert_null(img.rgb);
    free(png);
    /* Zero-sized, absurd aspect, empty, garbage, missing file. */
    const uint8_t zero[] = "P6\n0 5\n255\n";
    assert_int_not_equal(qvl_image_decode(zero, sizeof zero - 1, "zero.ppm", &img, &err), QVL_OK);
    char wide[64];
    int len = snprintf(wide, sizeof wide, "P6\n201 1\n255\n");
    char *buf = calloc(1, (size_t)len + 201 * 3);
    memcpy(buf, wide, (size_t)len);
    assert_int_equal(qvl_image_decode(buf, (size_t)len + 201 * 3, "wide.ppm", &img, &err),
                     QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "aspect ratio over 200:1"));
    free(buf);
    assert_int_equal(qvl_image_decode("", 0, "empty", &img, &err), QVL_E_PARSE);
    assert_non_null(strstr(err.msg, "empty"));
    assert_int_equal(qvl_image_decode("hello world", 11, "t.txt", &img, &err), QVL_E_PARSE);
    assert_non_null(strstr(err.msg, "not a PNG, JPEG"));
    assert_int_equal(qvl_image_load(TMP "-missing.png", &img, &err), QVL_E_IO);
    /* A PNM with less pixel data than its header declares (a decoder would have to make up
     * the rest), including a few bytes that claim 65 Mpixels. */
    const uint8_t short_ppm[] = "P6\n2 2\n255\n01234567890";
    assert_int_equal(qvl_image_decode(short_ppm, sizeof short_ppm - 1, "short.ppm", &img, &err),
                     QVL_E_PARSE);
    assert_non_null(strstr(err.msg, "truncated PNM"));
    assert_int_equal(qvl_image_decode(short_ppm, sizeof short_ppm, "exact.ppm", &img, &err), QVL_OK);
    qvl_image_free(&img);
    const uint8_t giant[] = "P6 65535 1000 255\n";
    assert_int_equal(qvl_image_decode(giant, sizeof giant - 1, "giant.ppm", &img, &err), QVL_E_PARSE);
    /* A decompression bomb is refused from its header, before decoding. */
    const uint8_t bomb[] = "P6\n20000 20000\n255\n";
    assert_int_equal(qvl_image_decode(bomb, sizeof bomb - 1, "bomb.ppm", &img, &err), QVL_E_LIMIT);
    assert_non_null(strstr(err.msg, "pixels"));
    remove(TMP ".png");
}

/* An APP1 Exif segment holding only the orientation tag. */
static size_t exif_segment(uint8_t *seg, int orientation, bool little_endian) {
    uint8_t tiff[26];
    const bool le = little_endian;
#define W16(p, v) ((p)[le ? 0 : 1] = (uint8_t)((v) & 0xff), (p)[le ? 1 : 0] = (uint8_t)((v) >> 8))
#define W32(p, v) (W16((p) + (le ? 0 : 2), (v) & 0xffff), W16((p) + (le ? 2 : 0), (uint32_t)(v) >> 16))
    memset(tiff, 0, sizeof tiff);
    tiff[0] = tiff[1] = le ? 'I' : 'M';
    W16(tiff + 2, 42);
    W32(tiff + 4, 8);
    W16(tiff + 8, 1);            /* one entry */
    W16(tiff + 10, 0x0112);      /* orientation */
    W16(tiff + 12, 3);           /* SHORT */
    W32(tiff + 14, 1);           /* count */
    W16(tiff + 18, orientation); /* value, left-justified */
    W32(tiff + 22, 0);           /* next IFD */
#undef W16
#undef W32
    size_t len = 2 + 6 + sizeof tiff;
    seg[0] = 0xFF;
    seg[1] = 0xE1;
    seg[2] = (uint8_t)(len >> 8);
    seg[3] = (uint8_t)len;
    memcpy(seg + 4, "Exif\0\0", 6);
    memcpy(seg + 10, tiff, sizeof tiff);
    return 2 + len;
}

/* A JPEG of a 16x8 picture: left half red, right half blue, with the given orientation. */
static uint8_t *oriented_jpeg(int orientation, bool le, size_t *n) {
    uint8_t px[16 * 8 * 3];
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 16; x++) {
            uint8_t *p = px + (y * 16 + x) * 3;
            p[0] = x < 8 ? 255 : 0;
            p[1] = 0;
            p[2] = x < 8 ? 0 : 255;
        }
    size_t jn = 0;
    uint8_t *jpg = test_jpeg_encode(px, 16, 8, 95, &jn);
    assert_non_null(jpg);
    uint8_t seg[64];
    size_t sn = exif_segment(seg, orientation, le);
    uint8_t *out = malloc(jn + sn);
    memcpy(out, jpg, 2); /* SOI */
    memcpy(out + 2, seg, sn);
    memcpy(out + 2 + sn, jpg + 2, jn - 2);
    free(jpg);
    *n = jn + sn;
    return out;
}

static bool reddish(const qvl_image *im, int x, int y) {
    const uint8_t *p = im->rgb + ((size_t)y * (size_t)im->width + (size_t)x) * 3;
    return p[0] > 180 && p[2] < 80;
}

static void test_exif_orientation(void **state) {
    (void)state;
    qvl_error err = {0};
    qvl_image im;
    size_t n;
    uint8_t *jpg = oriented_jpeg(1, true, &n);
    assert_int_equal(qvl_jpeg_exif_orientation(jpg, n), 1);
    assert_int_equal(qvl_image_decode(jpg, n, "o1.jpg", &im, &err), QVL_OK);
    assert_true(im.width == 16 && im.height == 8 && reddish(&im, 1, 4) && !reddish(&im, 14, 4));
    qvl_image_free(&im);
    free(jpg);

    /* 6 = rotate 90 degrees clockwise to view: 8x16, the red (left) half ends up on top. */
    for (int le = 0; le < 2; le++) {
        jpg = oriented_jpeg(6, le, &n);
        assert_int_equal(qvl_jpeg_exif_orientation(jpg, n), 6);
        assert_int_equal(qvl_image_decode(jpg, n, "o6.jpg", &im, &err), QVL_OK);
        assert_int_equal(im.width, 8);
        assert_int_equal(im.height, 16);
        assert_true(reddish(&im, 4, 1) && !reddish(&im, 4, 14));
        qvl_image_free(&im);
        /* Cut before the end-of-image marker: a clear error, not half a picture. */
        assert_int_equal(qvl_image_decode(jpg, n - 40, "cut.jpg", &im, &err), QVL_E_PARSE);
        assert_non_null(strstr(err.msg, "truncated"));
        free(jpg);
    }
    /* 3 = rotate 180: red on the right. */
    jpg = oriented_jpeg(3, false, &n);
    assert_int_equal(qvl_image_decode(jpg, n, "o3.jpg", &im, &err), QVL_OK);
    assert_true(im.width == 16 && !reddish(&im, 1, 4) && reddish(&im, 14, 4));
    qvl_image_free(&im);
    /* An entry count past the segment: the entries that fit are read (Pillow keeps them too),
     * nothing past the segment is. */
    jpg[2 + 10 + 8 + 1] = 0xFF; /* big-endian count low byte -> 255 entries */
    jpg[2 + 10 + 8] = 0x7F;
    assert_int_equal(qvl_jpeg_exif_orientation(jpg, n), 3);
    free(jpg);
    assert_int_equal(qvl_jpeg_exif_orientation("\xFF\xD8\xFF", 3), 1);
    assert_int_equal(qvl_jpeg_exif_orientation("PNG", 3), 1);
}

static void test_orientation_transforms(void **state) {
    (void)state;
    /* 3x2 picture, pixel value = its index 0..5 in channel 0:  0 1 2 / 3 4 5. */
    const int want[9][6] = {
        {0}, {0, 1, 2, 3, 4, 5}, {2, 1, 0, 5, 4, 3}, {5, 4, 3, 2, 1, 0}, {3, 4, 5, 0, 1, 2},
        {0, 3, 1, 4, 2, 5},  /* transpose: 2x3 */
        {3, 0, 4, 1, 5, 2},  /* rotate 90 clockwise */
        {5, 2, 4, 1, 3, 0},  /* transverse */
        {2, 5, 1, 4, 0, 3},  /* rotate 90 counter-clockwise */
    };
    for (int o = 1; o <= 8; o++) {
        qvl_image im = {3, 2, malloc(18)};
        for (int i = 0; i < 6; i++) im.rgb[i * 3] = im.rgb[i * 3 + 1] = im.rgb[i * 3 + 2] = (uint8_t)i;
        qvl_error err = {0};
        assert_int_equal(qvl_image_apply_orientation(&im, o, &err), QVL_OK);
        assert_int_equal(im.width, o >= 5 ? 2 : 3);
        for (int i = 0; i < 6; i++)
            if (im.rgb[i * 3] != want[o][i]) fail_msg("orientation %d, pixel %d: %d", o, i, im.rgb[i * 3]);
        qvl_image_free(&im);
    }
}

/* ---- the processor ------------------------------------------------------------------------ */

static void test_resize_properties(void **state) {
    (void)state;
    qvl_error err = {0};
    uint8_t *src = malloc(37 * 23 * 3);
    for (int i = 0; i < 37 * 23 * 3; i++) src[i] = (uint8_t)(i * 37 % 251);
    qvl_image im = {37, 23, src};
    uint8_t *same = malloc(37 * 23 * 3);
    assert_int_equal(qvl_image_resize_bicubic(&im, 37, 23, same, &err), QVL_OK);
    assert_memory_equal(same, src, 37 * 23 * 3); /* same size: unchanged */
    free(same);
    /* A flat picture stays flat whatever the scale (weights sum to one, no ringing). */
    memset(src, 173, 37 * 23 * 3);
    const int sizes[][2] = {{10, 5}, {100, 70}, {37, 64}, {1, 1}};
    for (size_t k = 0; k < 4; k++) {
        uint8_t *out = malloc((size_t)(sizes[k][0] * sizes[k][1] * 3));
        assert_int_equal(qvl_image_resize_bicubic(&im, sizes[k][0], sizes[k][1], out, &err), QVL_OK);
        for (int i = 0; i < sizes[k][0] * sizes[k][1] * 3; i++) assert_int_equal(out[i], 173);
        free(out);
    }
    /* Upscaling a step edge by 2 with a = -0.5 overshoots and is clamped to [0, 255]. */
    uint8_t edge[4 * 3] = {0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255};
    qvl_image e = {4, 1, edge};
    uint8_t up[8 * 3];
    assert_int_equal(qvl_image_resize_bicubic(&e, 8, 1, up, &err), QVL_OK);
    assert_int_equal(up[0], 0);
    assert_int_equal(up[7 * 3], 255);
    for (int x = 1; x < 8; x++) assert_true(up[x * 3] >= up[(x - 1) * 3]); /* monotone after clamping */
    free(src);
}

static void test_preprocess_patch_order(void **state) {
    (void)state;
    /* 64x64 picture (no resize with these bounds): 4x4 patches of 16, pixel value encodes its
     * patch (row*10 + col) in R, and its position inside the patch in G. */
    uint8_t *px = malloc(64 * 64 * 3);
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 64; x++) {
            uint8_t *p = px + (y * 64 + x) * 3;
            p[0] = (uint8_t)((y / 16) * 10 + x / 16);
            p[1] = (uint8_t)((y % 16) * 16 + x % 16);
            p[2] = 255;
        }
    qvl_image im = {64, 64, px};
    qvl_preprocess_config pc;
    qvl_preprocess_config_default(NULL, &pc);
    pc.min_pixels = 1024;
    pc.max_pixels = 1 << 20;
    float *out = NULL;
    qvl_image_grid g;
    qvl_error err = {0};
    assert_int_equal(qvl_image_preprocess(&im, &pc, &out, &g, &err), QVL_OK);
    assert_true(g.t == 1 && g.h == 4 && g.w == 4);
    assert_int_equal(qvl_image_grid_tokens(&g, 2), 4);
    /* Merge-window order: windows row-major, inside each TL, TR, BL, BR. */
    const int patch_of_row[16] = {0, 1, 10, 11, 2, 3, 12, 13, 20, 21, 30, 31, 22, 23, 32, 33};
    const int W = 3 * 2 * 16 * 16;
    for (int s = 0; s < 16; s++) {
        const float *row = out + s * W;
        for (int t = 0; t < 2; t++) {      /* both temporal copies equal */
            for (int i = 0; i < 256; i++) { /* e = ((c*2 + t)*16 + py)*16 + px */
                float r = row[(0 * 2 + t) * 256 + i], gch = row[(1 * 2 + t) * 256 + i];
                float b = row[(2 * 2 + t) * 256 + i];
                assert_float_equal(r, (patch_of_row[s] - 127.5f) / 127.5f, 1e-6);
                assert_float_equal(gch, (i - 127.5f) / 127.5f, 1e-6);
                assert_float_equal(b, 1.0f, 1e-6);
            }
        }
    }
    free(out);
    free(px);
}

static void test_preprocess_config(void **state) {
    (void)state;
    qvl_vision_config v;
    memset(&v, 0, sizeof v);
    v.patch_size = 14;
    v.temporal_patch_size = 2;
    v.spatial_merge_size = 2;
    qvl_preprocess_config pc;
    qvl_error err = {0};
    const char *json = "{\"size\": {\"shortest_edge\": 3136, \"longest_edge\": 12845056},"
                       " \"image_mean\": [0.48145466, 0.4578275, 0.40821073],"
                       " \"image_std\": [0.26862954, 0.26130258, 0.27577711], \"merge_size\": 2}";
    write_all(TMP ".json", json, strlen(json));
    assert_int_equal(qvl_preprocess_config_load(TMP ".json", &v, &pc, &err), QVL_OK);
    assert_int_equal(pc.min_pixels, 3136);
    assert_int_equal(pc.max_pixels, 12845056);
    assert_int_equal(pc.patch_size, 14); /* from the vision config when the file has none */
    assert_float_equal(pc.image_std[2], 0.27577711, 1e-12);
    const char *bad = "{\"size\": {\"shortest_edge\": -5}}";
    write_all(TMP ".json", bad, strlen(bad));
    assert_int_equal(qvl_preprocess_config_load(TMP ".json", &v, &pc, &err), QVL_E_INVALID);
    assert_non_null(strstr(err.msg, "shortest_edge"));
    const char *swapped = "{\"min_pixels\": 100, \"max_pixels\": 10}";
    write_all(TMP ".json", swapped, strlen(swapped));
    assert_int_equal(qvl_preprocess_config_load(TMP ".json", &v, &pc, &err), QVL_E_INVALID);
    write_all(TMP ".json", "{oops", 5);
    assert_int_equal(qvl_preprocess_config_load(TMP ".json", &v, &pc, &err), QVL_E_PARSE);
    remove(TMP ".json");
    assert_int_equal(qvl_preprocess_config_load(TMP ".json", &v, &pc, &err), QVL_E_NOT_FOUND);
    assert_int_equal(pc.min_pixels, 65536); /* the defaults stay */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_smart_resize_examples),
        cmocka_unit_test(test_smart_resize_errors),
        cmocka_unit_test(test_rope_index_640x480),
        cmocka_unit_test(test_rope_index_two_images_and_errors),
        cmocka_unit_test(test_decode_ppm_png_and_errors),
        cmocka_unit_test(test_exif_orientation),
        cmocka_unit_test(test_orientation_transforms),
        cmocka_unit_test(test_resize_properties),
        cmocka_unit_test(test_preprocess_patch_order),
        cmocka_unit_test(test_preprocess_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
