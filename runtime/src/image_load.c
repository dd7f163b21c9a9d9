/* Picture files to 8-bit RGB: the format is told from the first bytes, and each format has its
 * own decoder (image_jpeg.c, image_png.c, image_gif.c, image_webp.c: the libraries Pillow itself
 * uses; image_pnm.c: parsed here). A decoder checks the declared size here (pixel limit, aspect
 * ratio, what the file can hold) before its library allocates anything, and finds the
 * orientation its metadata asks for (EXIF or XMP, image_orient.c), which is applied afterwards,
 * as transformers' load_image does with ImageOps.exif_transpose. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_formats.h"
#include "qvl/checked.h"
#include "qvl/file.h"

/* Whole files are read at most this large (the pixel limit bounds any sane picture far below). */
#define MAX_FILE_BYTES ((size_t)INT32_MAX)

void qvl_image_free(qvl_image *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}

/* ---- size checks shared by the decoders ------------------------------------------------------ */

qvl_status qvl_image_check_size(const char *what, const char *fmt, int64_t w, int64_t h,
                                qvl_error *err) {
    if (w <= 0 || h <= 0)
        return qvl_fail(err, QVL_E_PARSE, "%s: %s picture of size %lldx%lld", what, fmt,
                        (long long)w, (long long)h);
    const int64_t limit = qvl_image_max_pixels();
    int64_t pixels;
    if (!qvl_mul_i64(w, h, &pixels)) pixels = INT64_MAX;
    if (pixels > limit)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: %lldx%lld is %lld pixels, more than the limit of %lld "
                        "(environment variable QVL_IMAGE_MAX_PIXELS)",
                        what, (long long)w, (long long)h, (long long)pixels, (long long)limit);
    const int64_t lo = w < h ? w : h, hi = w < h ? h : w;
    if (hi / lo > QVL_IMAGE_MAX_ASPECT || (hi / lo == QVL_IMAGE_MAX_ASPECT && hi % lo != 0))
        return qvl_fail(err, QVL_E_INVALID, "%s: %lldx%lld has an aspect ratio over %d:1", what,
                        (long long)w, (long long)h, QVL_IMAGE_MAX_ASPECT);
    return QVL_OK;
}

qvl_status qvl_image_check_floor(const char *what, const char *fmt, int64_t w, int64_t h,
                                 int64_t need, size_t size, qvl_error *err) {
    if (need > (int64_t)size)
        return qvl_fail(err, QVL_E_PARSE,
                        "%s: %s header declares %lldx%lld pixels, which need at least %lld bytes, "
                        "but the file has %zu (corrupt or a decompression bomb)",
                        what, fmt, (long long)w, (long long)h, (long long)need, size);
    return QVL_OK;
}

qvl_status qvl_image_alloc(qvl_image *out, int64_t w, int64_t h, const char *what, qvl_error *err) {
    out->rgb = malloc((size_t)w * (size_t)h * 3);
    if (!out->rgb)
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for %lldx%lld pixels", what,
                        (long long)w, (long long)h);
    out->width = (int32_t)w;
    out->height = (int32_t)h;
    return QVL_OK;
}

/* ---- the pixel limit --------------------------------------------------------------------- */

int64_t qvl_image_max_pixels(void) {
    const char *env = getenv("QVL_IMAGE_MAX_PIXELS");
    if (env && *env) {
        char *end = NULL;
        errno = 0;
        long long v = strtoll(env, &end, 10);
        if (errno == 0 && end && *end == '\0' && v >= 1 && v <= QVL_IMAGE_MAX_PIXELS_CEILING)
            return v;
    }
    return QVL_IMAGE_MAX_PIXELS;
}

/* ---- orientation ------------------------------------------------------------------------- */

qvl_status qvl_image_apply_orientation(qvl_image *img, int o, qvl_error *err) {
    if (o < 2 || o > 8) return QVL_OK;
    const int64_t W = img->width, H = img->height;
    const bool swap = o >= 5; /* transpose, rotations by 90 and the transverse */
    const int64_t OW = swap ? H : W, OH = swap ? W : H;
    uint8_t *out = malloc((size_t)(W * H * 3));
    if (!out) return qvl_fail(err, QVL_E_NOMEM, "image: out of memory applying orientation");
    for (int64_t y = 0; y < OH; y++) {
        for (int64_t x = 0; x < OW; x++) {
            int64_t sx = x, sy = y; /* PIL's exif_transpose methods, as source coordinates */
            switch (o) {
            case 2: sx = W - 1 - x; break;                 /* mirror */
            case 3: sx = W - 1 - x; sy = H - 1 - y; break; /* rotate 180 */
            case 4: sy = H - 1 - y; break;                 /* flip */
            case 5: sx = y; sy = x; break;                 /* transpose */
            case 6: sx = y; sy = H - 1 - x; break;         /* rotate 90 clockwise */
            case 7: sx = W - 1 - y; sy = H - 1 - x; break; /* transverse */
            case 8: sx = W - 1 - y; sy = x; break;         /* rotate 90 counter-clockwise */
            }
            memcpy(out + (y * OW + x) * 3, img->rgb + (sy * W + sx) * 3, 3);
        }
    }
    free(img->rgb);
    img->rgb = out;
    img->width = (int32_t)OW;
    img->height = (int32_t)OH;
    return QVL_OK;
}

/* ---- decoding -------------------------------------------------------------------------------- */

typedef struct image_format {
    const char *name;
    qvl_image_decoder decode;
} image_format;

static const image_format *format_of(const uint8_t *p, size_t n) {
    static const image_format png = {"PNG", qvl_decode_png};
    static const image_format jpeg = {"JPEG", qvl_decode_jpeg};
    static const image_format gif = {"GIF", qvl_decode_gif};
    static const image_format webp = {"WebP", qvl_decode_webp};
    static const image_format pnm = {"PNM", qvl_decode_pnm};
    if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) return &png;
    if (n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF) return &jpeg;
    if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) return &gif;
    if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) return &webp;
    if (n >= 2 && p[0] == 'P' && (p[1] == '5' || p[1] == '6')) return &pnm;
    return NULL;
}

static qvl_status sniff(const void *data, size_t size, const char *what, const image_format **f,
                        qvl_error *err) {
    if (!data || size == 0) return qvl_fail(err, QVL_E_PARSE, "%s: empty file", what);
    if (size > INT32_MAX) return qvl_fail(err, QVL_E_LIMIT, "%s: file too large", what);
    const uint8_t *p = data;
    *f = format_of(p, size);
    if (*f) return QVL_OK;
    if (size >= 2 && p[0] == 'B' && p[1] == 'M')
        return qvl_fail(err, QVL_E_UNSUPPORTED,
                        "%s: BMP pictures are not supported (PNG, JPEG, GIF, WebP and binary "
                        "PGM/PPM are); convert it to PNG",
                        what);
    return qvl_fail(err, QVL_E_PARSE,
                    "%s: not a PNG, JPEG, GIF, WebP or binary PGM/PPM (P5/P6) picture", what);
}

bool qvl_image_should_stop(const qvl_image_stop *stop) {
    return stop && stop->should_stop && stop->should_stop(stop->arg);
}

qvl_status qvl_image_stopped(const char *what, qvl_error *err) {
    return qvl_fail(err, QVL_E_LIMIT, "%s: decoding stopped (deadline passed or client gone)",
                    what);
}

qvl_status qvl_image_decode_stoppable(const void *data, size_t size, const char *what,
                                      const qvl_image_stop *stop, qvl_image *out,
                                      qvl_error *err) {
    memset(out, 0, sizeof *out);
    if (!what) what = "image";
    const image_format *f;
    qvl_status st = sniff(data, size, what, &f, err);
    if (st != QVL_OK) return st;
    if (qvl_image_should_stop(stop)) return qvl_image_stopped(what, err);
    /* The decoders ask `stop` between rows, scans or pieces of input, and once more here. */
    qvl_decode_job job = {.p = data, .n = size, .what = what, .stop = stop, .orientation = 1};
    st = f->decode(&job, out, err);
    if (st == QVL_OK && qvl_image_should_stop(stop)) st = qvl_image_stopped(what, err);
    if (st == QVL_OK) {
        st = qvl_image_apply_orientation(out, job.orientation, err);
        if (st != QVL_OK) qvl_error_prefix(err, "%s", what);
    }
    if (st != QVL_OK) qvl_image_free(out);
    return st;
}

qvl_status qvl_image_decode(const void *data, size_t size, const char *what, qvl_image *out,
                            qvl_error *err) {
    return qvl_image_decode_stoppable(data, size, what, NULL, out, err);
}

qvl_status qvl_image_probe(const void *data, size_t size, const char *what, int32_t *width,
                           int32_t *height, qvl_error *err) {
    if (!what) what = "image";
    const image_format *f;
    qvl_status st = sniff(data, size, what, &f, err);
    if (st != QVL_OK) return st;
    qvl_image hdr = {0};
    qvl_decode_job job = {.p = data, .n = size, .what = what, .header_only = true, .orientation = 1};
    st = f->decode(&job, &hdr, err);
    if (st != QVL_OK) return st;
    const bool swap = job.orientation >= 5 && job.orientation <= 8;
    *width = swap ? hdr.height : hdr.width;
    *height = swap ? hdr.width : hdr.height;
    return QVL_OK;
}

qvl_status qvl_image_load(const char *path, qvl_image *out, qvl_error *err) {
    memset(out, 0, sizeof *out);
    char *buf;
    size_t got;
    qvl_status st = qvl_read_file(path, MAX_FILE_BYTES, QVL_E_IO, &buf, &got, err);
    if (st != QVL_OK) return st;
    st = qvl_image_decode(buf, got, path, out, err);
    free(buf);
    return st;
}
