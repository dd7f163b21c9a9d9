/* JPEG through libjpeg-turbo with the settings Pillow's decoder uses (src/libImaging/JpegDecode.c:
 * libjpeg's defaults, i.e. the accurate integer IDCT JDCT_ISLOW, fancy upsampling and block
 * smoothing on; the library picks the stored colour space). One component is grey, three are
 * converted to RGB by libjpeg, four are CMYK, which Pillow reads inverted ("CMYK;I", the Adobe
 * convention) and turns into RGB with its own formula below. The structure is walked here first:
 * the file must end its first scan with an EOI marker somewhere (a cut file is refused, as
 * Pillow does without LOAD_TRUNCATED_IMAGES), and a sequential frame must have the bytes its
 * size needs. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "image_formats.h"

/* More scans than this is refused: a progressive file needs about ten, and every extra scan
 * makes libjpeg walk the whole coefficient buffer again (thousands of empty scans in a small
 * file would cost minutes). */
#define MAX_SCANS 1000

static bool is_jpeg(const uint8_t *p, size_t n) { return n >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF; }

/* The fewest bytes of entropy-coded data a sequential Huffman JPEG (SOF0/SOF1 segment body
 * `f` of `len` bytes) can have: every 8x8 block of every component is coded once, with at least
 * one bit for its DC difference and one for its AC codes (the shortest Huffman code is one bit).
 * The component with the most blocks gives the bound; 0 when the segment is malformed. */
static int64_t jpeg_sequential_min_bytes(const uint8_t *f, size_t len) {
    if (len < 6) return 0;
    const int64_t h = qvl_rd16(f + 1, false), w = qvl_rd16(f + 3, false);
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

/* Walks the marker segments before the first scan. Records the orientation of the first APP1
 * Exif segment (Pillow keeps only the first) and, when given, jpeg_sequential_min_bytes of a
 * SOF0/SOF1 frame; returns the offset just after the SOS segment header, or 0 when the
 * structure ends first. */
static size_t jpeg_walk(const uint8_t *p, size_t n, int *orientation, int64_t *min_bytes) {
    size_t i = 2;
    bool seen_exif = false;
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
        size_t len = qvl_rd16(p + i + 2, false);
        if (len < 2 || len > n - i - 2) return 0;
        const uint8_t *seg = p + i + 4;
        size_t seg_len = len - 2;
        if (marker == 0xE1 && !seen_exif && seg_len >= 6 && memcmp(seg, "Exif\0\0", 6) == 0) {
            seen_exif = true;
            if (orientation) *orientation = qvl_tiff_orientation(seg, seg_len);
        }
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
 * so a complete JPEG has an EOI after its first scan; libjpeg would make up the rest of a cut
 * file (grey) with only a warning. */
static bool jpeg_complete(const uint8_t *p, size_t n, int64_t *min_bytes) {
    size_t scan = jpeg_walk(p, n, NULL, min_bytes);
    if (scan == 0) return false;
    for (size_t i = scan; i + 1 < n; i++)
        if (p[i] == 0xFF && p[i + 1] == 0xD9) return true;
    return false;
}

/* ---- libjpeg --------------------------------------------------------------------------------- */

typedef struct jpeg_failure {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_failure;

static void on_error(j_common_ptr cinfo) {
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    f->pub.format_message(cinfo, f->msg);
    longjmp(f->jump, 1);
}

/* Warnings (corrupt data the library can step over) are not printed, as in Pillow. */
static void on_message(j_common_ptr cinfo, int level) {
    (void)cinfo;
    (void)level;
}

static void on_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    if (d->input_scan_number > MAX_SCANS) {
        jpeg_failure *f = (jpeg_failure *)cinfo->err;
        snprintf(f->msg, sizeof f->msg, "more than %d scans", MAX_SCANS);
        longjmp(f->jump, 1);
    }
}

/* Pillow's CMYK to RGB for the inverted samples libjpeg hands out ("CMYK;I" then cmyk2rgb):
 * with c, m, y, k the stored values inverted, R = 255 - k - (c (255 - k)) / 255, rounded the way
 * its MULDIV255 does. */
static uint8_t cmyk_channel(int c, int nk) {
    const int t = c * nk + 128;
    const int v = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

qvl_status qvl_decode_jpeg(const uint8_t *p, size_t n, const char *what, bool header_only,
                           qvl_image *out, qvl_error *err) {
    int64_t need = 0;
    if (!jpeg_complete(p, n, &need))
        return qvl_fail(err, QVL_E_PARSE, "%s: truncated JPEG (no end-of-image marker)", what);

    struct jpeg_decompress_struct cinfo;
    jpeg_failure fail;
    memset(&fail, 0, sizeof fail);
    cinfo.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = on_error;
    fail.pub.emit_message = on_message;
    struct jpeg_progress_mgr progress = {.progress_monitor = on_progress};
    uint8_t *volatile row = NULL;
    qvl_status st = QVL_OK;
    if (setjmp(fail.jump)) {
        free(row);
        jpeg_destroy_decompress(&cinfo);
        qvl_image_free(out);
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode JPEG (%s)", what, fail.msg);
    }
    jpeg_create_decompress(&cinfo);
    cinfo.progress = &progress;
    jpeg_mem_src(&cinfo, p, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    const int64_t w = cinfo.image_width, h = cinfo.image_height;
    const int nc = cinfo.num_components;
    st = qvl_image_check_size(what, "JPEG", w, h, err);
    if (st == QVL_OK) st = qvl_image_check_floor(what, "JPEG", w, h, need, n, err);
    if (st == QVL_OK && nc != 1 && nc != 3 && nc != 4)
        st = qvl_fail(err, QVL_E_PARSE, "%s: JPEG with %d components (1, 3 or 4 are pictures)",
                      what, nc);
    if (st != QVL_OK || header_only) {
        jpeg_destroy_decompress(&cinfo);
        if (st == QVL_OK) {
            out->width = (int32_t)w;
            out->height = (int32_t)h;
        }
        return st;
    }
    cinfo.out_color_space = nc == 1 ? JCS_GRAYSCALE : nc == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_start_decompress(&cinfo);
    if ((int64_t)cinfo.output_width != w || (int64_t)cinfo.output_height != h ||
        cinfo.output_components != nc) {
        jpeg_destroy_decompress(&cinfo);
        return qvl_fail(err, QVL_E_PARSE, "%s: JPEG decoder output differs from its header", what);
    }
    st = qvl_image_alloc(out, w, h, what, err);
    if (st == QVL_OK && nc != 3) {
        row = malloc((size_t)w * (size_t)nc);
        if (!row) st = qvl_fail(err, QVL_E_NOMEM, "%s: out of memory", what);
    }
    if (st != QVL_OK) {
        jpeg_destroy_decompress(&cinfo);
        qvl_image_free(out);
        return st;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        const size_t y = cinfo.output_scanline;
        uint8_t *dst = out->rgb + y * (size_t)w * 3;
        JSAMPROW r = nc == 3 ? dst : row;
        if (jpeg_read_scanlines(&cinfo, &r, 1) != 1) break;
        if (nc == 1) {
            for (int64_t x = 0; x < w; x++) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
        } else if (nc == 4) {
            for (int64_t x = 0; x < w; x++) {
                const uint8_t *s = row + 4 * x;
                const int nk = s[3]; /* 255 minus the inverted K */
                for (int c = 0; c < 3; c++) dst[3 * x + c] = cmyk_channel(255 - s[c], nk);
            }
        }
    }
    const bool whole = cinfo.output_scanline == cinfo.output_height;
    if (whole) jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    free(row);
    if (!whole) {
        qvl_image_free(out);
        return qvl_fail(err, QVL_E_PARSE, "%s: cannot decode JPEG (rows missing)", what);
    }
    return QVL_OK;
}
