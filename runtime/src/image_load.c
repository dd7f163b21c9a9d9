/* Picture files to 8-bit RGB through Debian's libstb (stb_image compiled into libstb.so). The
 * header is checked with stbi_info before anything is decoded, so an absurd size never reaches
 * the allocator. */
#define _POSIX_C_SOURCE 200809L

#include "qvl/image.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image.h>

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

/* ---- JPEG structure: EXIF orientation and the end-of-image check ------------------------- */

static bool is_jpeg(const uint8_t *p, size_t n) { return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF; }

static uint32_t rd16(const uint8_t *p, bool le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}

static uint32_t rd32(const uint8_t *p, bool le) {
    return le ? rd16(p, true) | rd16(p + 2, true) << 16 : rd16(p, false) << 16 | rd16(p + 2, false);
}

/* Orientation tag (0x0112) of IFD0 inside a TIFF block [t, t+n); 1 when absent or malformed. */
static int tiff_orientation(const uint8_t *t, size_t n) {
    if (n < 8) return 1;
    bool le;
    if (t[0] == 'I' && t[1] == 'I') le = true;
    else if (t[0] == 'M' && t[1] == 'M') le = false;
    else return 1;
    if (rd16(t + 2, le) != 42) return 1;
    uint32_t ifd = rd32(t + 4, le);
    if (ifd > n || n - ifd < 2) return 1;
    uint32_t count = rd16(t + ifd, le);
    if ((size_t)count * 12 > n - ifd - 2) return 1;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *e = t + ifd + 2 + (size_t)i * 12;
        if (rd16(e, le) != 0x0112) continue;
        uint32_t type = rd16(e + 2, le), cnt = rd32(e + 4, le);
        if (type != 3 || cnt < 1) return 1; /* SHORT, inline in the value field */
        uint32_t v = rd16(e + 8, le);
        return v >= 1 && v <= 8 ? (int)v : 1;
    }
    return 1;
}

/* The fewest bytes of entropy-coded data a sequential Huffman JPEG (SOF0/SOF1 segment body
 * `f` of `len` bytes) can have: every 8x8 block of every component is coded once, with at least
 * one bit for its DC difference and one for its AC codes (the shortest Huffman code is one bit).
 * The component with the most blocks gives the bound; 0 when the segment is malformed. */
static int64_t jpeg_sequential_min_bytes(const uint8_t *f, size_t len) {
    if (len < 6) return 0;
    const int64_t h = rd16(f + 1, false), w = rd16(f + 3, false);
    const size_t nc = f[5];
    if (nc == 0 || len < 6 + 3 * nc) return 0;
    int64_t hmax = 1, vmax = 1, most = 0;
    for (size_t c = 0; c < nc; c++) {
        const int64_t hs = f[6 + 3 * c + 1] >> 4, vs = f[6 + 3 * c + 1] & 15;
        if (hs < 1 || vs < 1) return 0;
        if (hs > hmax) hmax = hs;
        if (vs > vmax) vmax = vs;
    }
    for (size_t c = 0; c < nc; c++) {
        const int64_t hs = f[6 + 3 * c + 1] >> 4, vs = f[6 + 3 * c + 1] & 15;
        const int64_t cw = (w * hs + hmax - 1) / hmax, ch = (h * vs + vmax - 1) / vmax;
        const int64_t blocks = (cw + 7) / 8 * ((ch + 7) / 8);
        if (blocks > most) most = blocks;
    }
    return (2 * most + 7) / 8;
}

/* Walks the marker segments before the first scan. Calls back on APP1; records in *min_bytes
 * (when given) jpeg_sequential_min_bytes of a SOF0/SOF1 frame; returns the offset just after
 * the SOS segment header, or 0 when the structure ends first. */
static size_t jpeg_walk(const uint8_t *p, size_t n, int *orientation, int64_t *min_bytes) {
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF) return 0;
        uint8_t marker = p[i + 1];
        if (marker == 0xFF) { /* fill byte */
            i++;
            continue;
        }
        if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
            i += 2; /* markers without a length */
            continue;
        }
        if (marker == 0xD9) return 0;
        size_t len = rd16(p + i + 2, false);
        if (len < 2 || len > n - i - 2) return 0;
        const uint8_t *seg = p + i + 4;
        size_t seg_len = len - 2;
        if (marker == 0xE1 && orientation && *orientation == 1 && seg_len >= 6 &&
            memcmp(seg, "Exif\0\0", 6) == 0)
            *orientation = tiff_orientation(seg + 6, seg_len - 6);
        if ((marker == 0xC0 || marker == 0xC1) && min_bytes)
            *min_bytes = jpeg_sequential_min_bytes(seg, seg_len);
        i += 2 + len;
        if (marker == 0xDA) return i;
    }
    return 0;
}

int qvl_jpeg_exif_orientation(const void *data, size_t size) {
    const uint8_t *p = data;
    if (!p || !is_jpeg(p, size)) return 1;
    int o = 1;
    jpeg_walk(p, size, &o, NULL);
    return o;
}

/* Entropy-coded data cannot contain FF D9 (0xFF is stuffed as FF 00, restarts are FF D0-D7),
 * so a complete JPEG has an EOI after its first scan; stb_image would decode a cut file. */
static bool jpeg_complete(const uint8_t *p, size_t n, int64_t *min_bytes) {
    size_t scan = jpeg_walk(p, n, NULL, min_bytes);
    if (scan == 0) return false;
    for (size_t i = scan; i + 1 < n; i++)
        if (p[i] == 0xFF && p[i + 1] == 0xD9) return true;
    return false;
}

/* ---- PNM: the pixel data must be all there ------------------------------------------------ */

static bool pnm_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* stb_image reads a binary PNM's header as below, then copies w*h*comp samples (two bytes each
 * when the maximum value is over 255) without noticing a short file: the missing pixels would be
 * uninitialised memory, and a few header bytes could claim hundreds of megabytes. So the header
 * is walked the same way (stbi__pnm_info) and the data after it must be long enough. */
static bool pnm_complete(const uint8_t *p, size_t n, int w, int h, int comp) {
    size_t i = 2;
#define PNM_GET() (i < n ? p[i++] : 0)
    uint8_t c = PNM_GET();
    int64_t maxv = 0;
    for (int field = 0; field < 3; field++) {
        for (;;) { /* whitespace and # comments */
            while (i < n && pnm_space(c)) c = PNM_GET();
            if (i >= n || c != '#') break;
            while (i < n && c != '\n' && c != '\r') c = PNM_GET();
        }
        int64_t v = 0;
        while (i < n && c >= '0' && c <= '9') {
            if (v < 70000) v = v * 10 + (c - '0');
            c = PNM_GET();
        }
        if (field == 2) maxv = v;
    }
#undef PNM_GET
    const int64_t need = (int64_t)w * h * comp * (maxv > 255 ? 2 : 1);
    return i <= n && (int64_t)(n - i) >= need;
}

/* ---- BMP: the pixel rows must be all there ---------------------------------------------- */

/* stb_image reads an uncompressed BMP's rows with zeros past the end of the file, so a header
 * of a few dozen bytes could claim hundreds of megabytes of (black) picture. For the plain
 * layouts (BI_RGB, BI_BITFIELDS) the rows from the pixel-data offset must fit in the file; the
 * last row may lack its padding. Other layouts are left to stb_image. */
static bool bmp_complete(const uint8_t *p, size_t n, int w, int h) {
    if (n < 30) return false;
    const uint32_t offset = rd32(p + 10, true), hsz = rd32(p + 14, true);
    uint32_t bpp;
    if (hsz == 12) {
        bpp = rd16(p + 24, true);
    } else {
        if (n < 34) return false;
        bpp = rd16(p + 28, true);
        const uint32_t compression = rd32(p + 30, true);
        if (compression != 0 && compression != 3) return true;
    }
    if (bpp == 0 || bpp > 32) return true; /* stb_image refuses these itself */
    const int64_t row_bits = (int64_t)w * bpp;
    const int64_t stride = (row_bits + 31) / 32 * 4, last = (row_bits + 7) / 8;
    return (int64_t)n >= (int64_t)offset + stride * (h - 1) + last;
}

/* ---- PNG: what the compressed data can hold ---------------------------------------------- */

/* Deflate turns one byte into at most 1032 (a 258-byte match coded in two one-bit codes), so a
 * PNG of n bytes holds at most 1032 n bytes of filtered rows, each pixel taking channels x bit
 * depth bits. stb_image allocates the declared size before inflating, so this is checked first.
 * Returns the least file size that could hold the declared picture (0: header unreadable). */
static int64_t png_min_bytes(const uint8_t *p, size_t n) {
    if (n < 29 || memcmp(p + 12, "IHDR", 4) != 0) return 0;
    const int64_t w = rd32(p + 16, false), h = rd32(p + 20, false);
    const int depth = p[24], colour = p[25];
    static const int channels[7] = {1, 0, 3, 1, 2, 0, 4};
    if (colour > 6 || channels[colour] == 0) return 0;
    const int64_t row_bytes = (w * channels[colour] * depth + 7) / 8; /* w < 2^32: no overflow */
    int64_t total;
    if (!qvl_mul_i64(h, row_bytes, &total)) return INT64_MAX;
    return total / 1032 + 1;
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

/* ---- decoding ---------------------------------------------------------------------------- */

static const char *format_name(const uint8_t *p, size_t n) {
    if (n >= 8 && memcmp(p, "\x89PNG\r\n\x1a\n", 8) == 0) return "PNG";
    if (is_jpeg(p, n)) return "JPEG";
    if (n >= 2 && p[0] == 'B' && p[1] == 'M') return "BMP";
    if (n >= 6 && (memcmp(p, "GIF87a", 6) == 0 || memcmp(p, "GIF89a", 6) == 0)) return "GIF";
    if (n >= 2 && p[0] == 'P' && (p[1] == '5' || p[1] == '6')) return "PNM";
    return NULL;
}

qvl_status qvl_image_decode(const void *data, size_t size, const char *what, qvl_image *out,
                            qvl_error *err) {
    memset(out, 0, sizeof *out);
    if (!what) what = "image";
    if (!data || size == 0) return qvl_fail(err, QVL_E_PARSE, "%s: empty file", what);
    if (size > INT32_MAX) return qvl_fail(err, QVL_E_LIMIT, "%s: file too large", what);
    const uint8_t *p = data;
    const char *fmt = format_name(p, size);
    if (!fmt)
        return qvl_fail(err, QVL_E_PARSE,
                        "%s: not a PNG, JPEG, BMP, GIF or binary PNM (P5/P6) picture", what);
    int w = 0, h = 0, comp = 0;
    if (!stbi_info_from_memory(p, (int)size, &w, &h, &comp))
        return qvl_fail(err, QVL_E_PARSE, "%s: unreadable %s header (%s)", what, fmt,
                        stbi_failure_reason() ? stbi_failure_reason() : "unknown");
    if (w <= 0 || h <= 0)
        return qvl_fail(err, QVL_E_PARSE, "%s: %s picture of size %dx%d", what, fmt, w, h);
    const int64_t limit = qvl_image_max_pixels();
    if ((int64_t)w * h > limit)
        return qvl_fail(err, QVL_E_LIMIT,
                        "%s: %dx%d is %lld pixels, more than the limit of %lld "
                        "(environment variable QVL_IMAGE_MAX_PIXELS)",
                        what, w, h, (long long)w * h, (long long)limit);
    int lo = w < h ? w : h, hi = w < h ? h : w;
    if (hi / lo > QVL_IMAGE_MAX_ASPECT || (hi / lo == QVL_IMAGE_MAX_ASPECT && hi % lo != 0))
        return qvl_fail(err, QVL_E_INVALID, "%s: %dx%d has an aspect ratio over %d:1", what, w, h,
                        QVL_IMAGE_MAX_ASPECT);
    int64_t need = 0; /* the least file size the declared picture needs, when known */
    if (strcmp(fmt, "JPEG") == 0 && !jpeg_complete(p, size, &need))
        return qvl_fail(err, QVL_E_PARSE, "%s: truncated JPEG (no end-of-image marker)", what);
    if (strcmp(fmt, "PNG") == 0) need = png_min_bytes(p, size);
    if (need > (int64_t)size)
        return qvl_fail(err, QVL_E_PARSE,
                        "%s: %s header declares %dx%d pixels, which need at least %lld bytes, "
                        "but the file has %zu (corrupt or a decompression bomb)",
                        what, fmt, w, h, (long long)need, size);
    if (strcmp(fmt, "BMP") == 0 && !bmp_complete(p, size, w, h))
        return qvl_fail(err, QVL_E_PARSE, "%s: truncated BMP (less pixel data than %dx%d)", what,
                        w, h);
    if (strcmp(fmt, "PNM") == 0 && !pnm_complete(p, size, w, h, comp))
        return qvl_fail(err, QVL_E_PARSE, "%s: truncated PNM (less pixel data than %dx%d)", what,
                        w, h);

    int dw = 0, dh = 0, dc = 0;
    uint8_t *rgb = stbi_load_from_memory(p, (int)size, &dw, &dh, &dc, 3);
    if (!rgb)
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode %s (%s)", what, fmt,
                        stbi_failure_reason() ? stbi_failure_reason() : "unknown");
    if (dw != w || dh != h) {
        stbi_image_free(rgb);
        return qvl_fail(err, QVL_E_PARSE, "%s: decoded size %dx%d differs from the header %dx%d",
                        what, dw, dh, w, h);
    }
    /* Own the pixels with malloc so qvl_image_free does not depend on stb's allocator. */
    size_t bytes = (size_t)w * (size_t)h * 3;
    out->rgb = malloc(bytes);
    if (!out->rgb) {
        stbi_image_free(rgb);
        return qvl_fail(err, QVL_E_NOMEM, "%s: out of memory for %dx%d pixels", what, w, h);
    }
    memcpy(out->rgb, rgb, bytes);
    stbi_image_free(rgb);
    out->width = w;
    out->height = h;
    if (strcmp(fmt, "JPEG") == 0) {
        qvl_status st = qvl_image_apply_orientation(out, qvl_jpeg_exif_orientation(p, size), err);
        if (st != QVL_OK) {
            qvl_image_free(out);
            return qvl_error_prefix(err, "%s", what);
        }
    }
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
