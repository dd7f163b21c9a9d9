/* JPEG through libjpeg-turbo with the settings Pillow's decoder uses (src/libImaging/JpegDecode.c:
 * libjpeg's defaults, i.e. the accurate integer IDCT JDCT_ISLOW, fancy upsampling and block
 * smoothing on; the library picks the stored colour space). One component is grey, three are
 * converted to RGB by libjpeg, four are CMYK, which Pillow reads inverted ("CMYK;I", the Adobe
 * convention) and turns into RGB with its own formula below. The structure is walked here first:
 * the file must end its first scan with an EOI marker somewhere (a cut file is refused, as
 * Pillow does without LOAD_TRUNCATED_IMAGES), a sequential frame must have the bytes its size
 * needs, and the EXIF and XMP orientation tags are read. While decoding, the work of the scans
 * is counted against a budget and the caller's stop callback is asked (libjpeg's progress
 * monitor). */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "image_formats.h"

/* More scans than this is refused outright: a progressive file needs about ten. */
#define MAX_SCANS 1000
/* The decode work budget. Each scan makes libjpeg visit every 8x8 block of the components it
 * codes, however little data the scan holds (an empty refinement scan of a 100 KB file can
 * cost a whole 8192x8192 pass), so the blocks visited over all scans are counted against
 * QVL_JPEG_SCAN_PASSES visits of every block of every component: libjpeg's and mozjpeg's
 * progressive scripts visit each block 4 to 10 times, a sequential file once. Pictures small
 * enough for QVL_JPEG_SCAN_FLOOR visits (about 4 megapixels of one-component blocks, tens of
 * milliseconds of work) are never refused by it. */
#define QVL_JPEG_SCAN_PASSES 32
#define QVL_JPEG_SCAN_FLOOR (INT64_C(1) << 22)

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

/* What jpeg_walk finds in the segments before the first scan (the ones Pillow reads). */
typedef struct jpeg_meta {
    int exif_tag; /* of the first APP1 Exif segment (Pillow appends later ones after it) */
    int xmp_tag;  /* of the last APP1 XMP segment (Pillow keeps the last) */
    int64_t min_bytes;
} jpeg_meta;

#define XMP_PREFIX "http://ns.adobe.com/xap/1.0/"

/* Walks the marker segments before the first scan: records the EXIF and XMP orientation tags
 * and jpeg_sequential_min_bytes of a SOF0/SOF1 frame; returns the offset just after the SOS
 * segment header, or 0 when the structure ends first. */
static size_t jpeg_walk(const uint8_t *p, size_t n, jpeg_meta *meta) {
    size_t i = 2;
    bool seen_exif = false;
    meta->exif_tag = meta->xmp_tag = QVL_ORIENT_ABSENT;
    meta->min_bytes = 0;
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
            meta->exif_tag = qvl_tiff_orientation_tag(seg, seg_len);
        }
        const size_t xn = sizeof XMP_PREFIX; /* with its NUL */
        if (marker == 0xE1 && seg_len >= xn && memcmp(seg, XMP_PREFIX, xn) == 0)
            meta->xmp_tag = qvl_xmp_orientation(seg + xn, seg_len - xn);
        if (marker == 0xC0 || marker == 0xC1) meta->min_bytes = jpeg_sequential_min_bytes(seg, seg_len);
        i += 2 + len;
        if (marker == 0xDA) return i;
    }
    return 0;
}

int qvl_jpeg_exif_orientation(const void *data, size_t size) {
    const uint8_t *p = data;
    if (!p || !is_jpeg(p, size)) return 1;
    jpeg_meta meta;
    jpeg_walk(p, size, &meta);
    return meta.exif_tag >= 1 && meta.exif_tag <= 8 ? meta.exif_tag : 1;
}

/* Entropy-coded data cannot contain FF D9 (0xFF is stuffed as FF 00, restarts are FF D0-D7),
 * so a complete JPEG has an EOI after its first scan; libjpeg would make up the rest of a cut
 * file (grey) with only a warning. */
static bool jpeg_complete(const uint8_t *p, size_t n, jpeg_meta *meta) {
    size_t scan = jpeg_walk(p, n, meta);
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
    qvl_status status; /* QVL_E_PARSE from libjpeg, QVL_E_LIMIT from the watch below */
} jpeg_failure;

static void on_error(j_common_ptr cinfo) {
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    f->pub.format_message(cinfo, f->msg);
    f->status = QVL_E_PARSE;
    longjmp(f->jump, 1);
}

/* Warnings (corrupt data the library can step over) are not printed, as in Pillow. */
static void on_message(j_common_ptr cinfo, int level) {
    (void)cinfo;
    (void)level;
}

/* libjpeg calls the progress monitor before each row of MCUs it takes in and each row it hands
 * out: there the work budget is counted (once a scan, when its header has been read) and the
 * caller's stop callback asked. */
typedef struct jpeg_watch {
    struct jpeg_progress_mgr pub; /* first: cinfo->progress points here */
    const qvl_image_stop *stop;
    int last_scan;
    int64_t blocks_visited, budget;
    bool stopped;
} jpeg_watch;

static void give_up(j_common_ptr cinfo) {
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    f->status = QVL_E_LIMIT;
    longjmp(f->jump, 1);
}

static void on_progress(j_common_ptr cinfo) {
    j_decompress_ptr d = (j_decompress_ptr)cinfo;
    jpeg_watch *w = (jpeg_watch *)cinfo->progress;
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    if (qvl_image_should_stop(w->stop)) {
        w->stopped = true;
        give_up(cinfo);
    }
    if (d->input_scan_number == w->last_scan) return;
    w->last_scan = d->input_scan_number;
    if (d->input_scan_number > MAX_SCANS) {
        snprintf(f->msg, sizeof f->msg, "more than %d scans", MAX_SCANS);
        give_up(cinfo);
    }
    for (int c = 0; c < d->comps_in_scan; c++)
        w->blocks_visited += (int64_t)d->cur_comp_info[c]->width_in_blocks *
                             d->cur_comp_info[c]->height_in_blocks;
    if (w->blocks_visited > w->budget) {
        snprintf(f->msg, sizeof f->msg,
                 "its first %d scans already decode more than %lld blocks, the work budget for "
                 "its size (%d passes over every block)",
                 d->input_scan_number, (long long)w->budget, QVL_JPEG_SCAN_PASSES);
        give_up(cinfo);
    }
}

/* Every 8x8 block of every component, times QVL_JPEG_SCAN_PASSES (at least the floor). */
static int64_t scan_budget(j_decompress_ptr d) {
    int64_t blocks = 0;
    for (int c = 0; c < d->num_components; c++)
        blocks += (int64_t)d->comp_info[c].width_in_blocks * d->comp_info[c].height_in_blocks;
    const int64_t budget = blocks * QVL_JPEG_SCAN_PASSES; /* blocks < 2^31: no overflow */
    return budget > QVL_JPEG_SCAN_FLOOR ? budget : QVL_JPEG_SCAN_FLOOR;
}

/* Pillow's CMYK to RGB for the inverted samples libjpeg hands out ("CMYK;I" then cmyk2rgb):
 * with c, m, y, k the stored values inverted, R = 255 - k - (c (255 - k)) / 255, rounded the way
 * its MULDIV255 does. */
static uint8_t cmyk_channel(int c, int nk) {
    const int t = c * nk + 128;
    const int v = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

qvl_status qvl_decode_jpeg(qvl_decode_job *job, qvl_image *out, qvl_error *err) {
    const uint8_t *p = job->p;
    const size_t n = job->n;
    const char *what = job->what;
    jpeg_meta meta;
    if (!jpeg_complete(p, n, &meta))
        return qvl_fail(err, QVL_E_PARSE, "%s: truncated JPEG (no end-of-image marker)", what);
    job->orientation = qvl_orientation_pick(meta.exif_tag, meta.xmp_tag);

    struct jpeg_decompress_struct cinfo;
    jpeg_failure fail;
    memset(&fail, 0, sizeof fail);
    cinfo.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = on_error;
    fail.pub.emit_message = on_message;
    jpeg_watch watch = {.pub = {.progress_monitor = on_progress}, .stop = job->stop,
                        .budget = INT64_MAX};
    uint8_t *volatile row = NULL;
    qvl_status st = QVL_OK;
    if (setjmp(fail.jump)) {
        free(row);
        jpeg_destroy_decompress(&cinfo);
        qvl_image_free(out);
        if (watch.stopped) return qvl_image_stopped(what, err);
        return qvl_fail(err, fail.status, "%s: cannot decode JPEG (%s)", what, fail.msg);
    }
    jpeg_create_decompress(&cinfo);
    cinfo.progress = &watch.pub;
    jpeg_mem_src(&cinfo, p, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    const int64_t w = cinfo.image_width, h = cinfo.image_height;
    const int nc = cinfo.num_components;
    st = qvl_image_check_size(what, "JPEG", w, h, err);
    if (st == QVL_OK) st = qvl_image_check_floor(what, "JPEG", w, h, meta.min_bytes, n, err);
    if (st == QVL_OK && nc != 1 && nc != 3 && nc != 4)
        st = qvl_fail(err, QVL_E_PARSE, "%s: JPEG with %d components (1, 3 or 4 are pictures)",
                      what, nc);
    if (st != QVL_OK || job->header_only) {
        jpeg_destroy_decompress(&cinfo);
        if (st == QVL_OK) {
            out->width = (int32_t)w;
            out->height = (int32_t)h;
        }
        return st;
    }
    watch.budget = scan_budget(&cinfo);
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
