/* PNG through libpng, to the RGB Pillow gives for Image.open(f).convert("RGB") (its PNG modes in
 * PngImagePlugin): alpha and tRNS are dropped, gamma and background chunks ignored; grey of
 * 1/2/4 bits is scaled to 0..255; 16-bit samples keep their high byte, except 16-bit grey without
 * alpha, which Pillow holds as an integer image ("I;16") and clips to 255 when it becomes RGB;
 * palette indices past the PLTE entries are black. The header is checked before libpng sees the
 * file: the pixel limit, what the compressed data can hold at all, and the text chunks
 * (image_png_text.c, which also finds the orientation); libpng then skips every ancillary chunk. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>

#include "image_formats.h"
#include "qvl/checked.h"

/* Deflate turns one byte into at most 1032 (a 258-byte match coded in two one-bit codes), so a
 * PNG of n bytes holds at most 1032 n bytes of filtered rows, each pixel taking channels x bit
 * depth bits. Returns the least file size that could hold the declared picture. */
static int64_t png_min_bytes(int64_t w, int64_t h, int channels, int depth) {
    const int64_t row_bytes = (w * channels * depth + 7) / 8; /* w < 2^31: no overflow */
    int64_t total;
    if (!qvl_mul_i64(h, row_bytes, &total)) return INT64_MAX;
    return total / 1032 + 1;
}

typedef struct png_source {
    const uint8_t *p;
    size_t n, at;
    jmp_buf jump;
    char msg[160];
    bool stopped; /* the caller's stop callback said to give up */
} png_source;

static void on_error(png_structp png, png_const_charp msg) {
    png_source *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg ? msg : "error");
    longjmp(s->jump, 1);
}

static void on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void on_read(png_structp png, png_bytep dst, size_t len) {
    png_source *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "file ends inside the picture");
    memcpy(dst, s->p + s->at, len);
    s->at += len;
}

/* One decoded row (after libpng's packing/expansion) to RGB. */
static void row_to_rgb(const uint8_t *src, uint8_t *dst, int64_t w, int colour, int channels,
                       int depth, const png_color *pal, int npal) {
    for (int64_t x = 0; x < w; x++) {
        uint8_t *o = dst + 3 * x;
        if (colour == PNG_COLOR_TYPE_PALETTE) {
            const int i = src[x];
            if (i < npal) o[0] = pal[i].red, o[1] = pal[i].green, o[2] = pal[i].blue;
            else o[0] = o[1] = o[2] = 0;
            continue;
        }
        const int bytes = depth / 8;
        const uint8_t *s = src + (size_t)x * (size_t)channels * (size_t)bytes;
        if (channels <= 2) {
            uint8_t v = s[0];
            if (depth == 16 && colour == PNG_COLOR_TYPE_GRAY) v = s[0] ? 255 : s[1];
            o[0] = o[1] = o[2] = v;
        } else {
            for (int c = 0; c < 3; c++) o[c] = s[c * bytes]; /* high byte when 16-bit */
        }
    }
}

qvl_status qvl_decode_png(qvl_decode_job *job, qvl_image *out, qvl_error *err) {
    const uint8_t *p = job->p;
    const size_t n = job->n;
    const char *what = job->what;
    if (n < 33 || memcmp(p + 12, "IHDR", 4) != 0)
        return qvl_fail(err, QVL_E_PARSE, "%s: unreadable PNG header (no IHDR)", what);
    const int64_t w = qvl_rd32(p + 16, false), h = qvl_rd32(p + 20, false);
    const int depth0 = p[24], colour0 = p[25];
    static const int channels0[7] = {1, 0, 3, 1, 2, 0, 4};
    if (colour0 > 6 || channels0[colour0] == 0 || depth0 == 0 || depth0 > 16)
        return qvl_fail(err, QVL_E_PARSE, "%s: PNG colour type %d / bit depth %d", what, colour0,
                        depth0);
    qvl_status st = qvl_image_check_size(what, "PNG", w, h, err);
    if (st == QVL_OK)
        st = qvl_image_check_floor(what, "PNG", w, h, png_min_bytes(w, h, channels0[colour0], depth0),
                                   n, err);
    /* Text chunks are checked (and the orientation read) by qvl, before libpng, which skips them. */
    if (st == QVL_OK) st = qvl_png_scan_chunks(p, n, what, job->stop, &job->orientation, err);
    if (st != QVL_OK) return st;
    if (job->header_only) {
        out->width = (int32_t)w;
        out->height = (int32_t)h;
        return QVL_OK;
    }

    png_source src = {.p = p, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
    if (!png) return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", what);
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", what);
    }
    uint8_t *volatile buf = NULL;
    png_bytep *volatile rows = NULL;
    if (setjmp(src.jump)) {
        free(buf);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        qvl_image_free(out);
        if (src.stopped) return qvl_image_stopped(what, err);
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode PNG (%s)", what, src.msg);
    }
    png_set_read_fn(png, &src, on_read);
    /* Every ancillary chunk libpng knows (text, iCCP, sPLT, eXIf, ...) and every unknown one is
     * skipped unread: only IHDR, PLTE, tRNS and IDAT matter to the pixels, and libpng would
     * otherwise inflate and keep compressed text and profiles. */
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, NULL, -1);
    png_read_info(png, info);
    const int colour = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if ((int64_t)png_get_image_width(png, info) != w || (int64_t)png_get_image_height(png, info) != h)
        png_error(png, "size differs from IHDR");
    if (colour == PNG_COLOR_TYPE_PALETTE && depth < 8) png_set_packing(png);
    if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    const int channels = png_get_channels(png, info), odepth = png_get_bit_depth(png, info);
    const size_t rowbytes = png_get_rowbytes(png, info);
    if ((odepth != 8 && odepth != 16) || rowbytes < (size_t)w * (size_t)channels * (size_t)(odepth / 8))
        png_error(png, "unexpected row layout");
    png_colorp pal = NULL;
    int npal = 0;
    if (colour == PNG_COLOR_TYPE_PALETTE) png_get_PLTE(png, info, &pal, &npal);

    qvl_error aerr = {0};
    if (qvl_image_alloc(out, w, h, what, &aerr) != QVL_OK) png_error(png, "out of memory");
    /* Interlaced rows arrive over seven passes, so the whole picture is held; otherwise one row. */
    size_t held;
    if (!qvl_mul_size(rowbytes, passes > 1 ? (size_t)h : 1, &held) || !(buf = malloc(held)))
        png_error(png, "out of memory");
    if (passes > 1) {
        rows = malloc((size_t)h * sizeof *rows);
        if (!rows) png_error(png, "out of memory");
        for (int64_t y = 0; y < h; y++) rows[y] = buf + (size_t)y * rowbytes;
    }
    /* Row by row (each pass over the whole picture when interlaced, as png_read_image does),
     * asking the caller's stop callback between rows. */
    for (int pass = 0; pass < passes; pass++) {
        for (int64_t y = 0; y < h; y++) {
            if (qvl_image_should_stop(job->stop)) {
                src.stopped = true;
                png_error(png, "stopped");
            }
            png_read_row(png, passes > 1 ? rows[y] : buf, NULL);
            if (passes == 1)
                row_to_rgb(buf, out->rgb + (size_t)y * (size_t)w * 3, w, colour, channels, odepth,
                           pal, npal);
        }
    }
    if (passes > 1)
        for (int64_t y = 0; y < h; y++)
            row_to_rgb(buf + (size_t)y * rowbytes, out->rgb + (size_t)y * (size_t)w * 3, w, colour,
                       channels, odepth, pal, npal);
    /* libpng reads nothing after the pixels (their text was checked before): Pillow ignores a
     * damaged or missing tail too. */
    free(rows);
    free(buf);
    png_destroy_read_struct(&png, &info, NULL);
    return QVL_OK;
}
