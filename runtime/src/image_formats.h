/* What image_load.c shares with the per-format decoders (image_jpeg.c, image_png.c, image_gif.c,
 * image_webp.c, image_pnm.c). Each decoder reads its own header first and passes the declared
 * size through qvl_image_check_size before any library allocates pixels; with header_only it
 * stops there and fills in only width and height (qvl_image_probe). Decoders give the stored
 * pixels as 8-bit RGB the way Pillow's Image.open(f).convert("RGB") does, and the orientation
 * their metadata asks for in job->orientation, which the caller applies. */
#ifndef QVL_IMAGE_FORMATS_H
#define QVL_IMAGE_FORMATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "qvl/image.h"

/* Refuses (one line naming `what`) a declared size that is zero, over the pixel limit or over
 * the aspect-ratio limit. */
qvl_status qvl_image_check_size(const char *what, const char *fmt, int64_t w, int64_t h,
                                qvl_error *err);
/* Refuses a picture whose declared size needs more than `size` bytes of file (`need`, the least
 * a file holding it can have; 0 when unknown). */
qvl_status qvl_image_check_floor(const char *what, const char *fmt, int64_t w, int64_t h,
                                 int64_t need, size_t size, qvl_error *err);
/* Allocates out->rgb for w x h pixels (sizes already checked). */
qvl_status qvl_image_alloc(qvl_image *out, int64_t w, int64_t h, const char *what, qvl_error *err);

/* Orientation rules of Pillow's getexif / exif_transpose (image_orient.c). A tag value is the
 * number stored (any int), QVL_ORIENT_ABSENT when there is no tag (then XMP is consulted), or
 * QVL_ORIENT_UNUSABLE when a tag is there but holds no whole number (no transpose). */
#define QVL_ORIENT_ABSENT (-1000000)
#define QVL_ORIENT_UNUSABLE 0
/* The Orientation tag (0x0112) of IFD0 in a TIFF block, after one or two "Exif\0\0" prefixes. */
int qvl_tiff_orientation_tag(const uint8_t *t, size_t n);
/* The same as an orientation to apply: 1..8 (1 when absent or not 1..8). */
int qvl_tiff_orientation(const uint8_t *t, size_t n);
/* The digit of the first "tiff:Orientation=\"D" or "tiff:Orientation>D" in an XMP packet. */
int qvl_xmp_orientation(const uint8_t *x, size_t n);
/* The orientation to apply (1..8): the EXIF tag when present, else the XMP one. */
int qvl_orientation_pick(int exif_tag, int xmp_tag);

/* A decoder asks qvl_image_should_stop(stop) between rows, scans or pieces of input and, when
 * it says so, gives up with qvl_image_stopped's error (QVL_E_LIMIT). stop may be NULL. */
bool qvl_image_should_stop(const qvl_image_stop *stop);
qvl_status qvl_image_stopped(const char *what, qvl_error *err);

/* Every decoder also gives the orientation its metadata asks for (1..8, Pillow's rules above):
 * set on success, with header_only too. */
typedef struct qvl_decode_job {
    const uint8_t *p;
    size_t n;
    const char *what;
    bool header_only;
    const qvl_image_stop *stop;
    int orientation;
} qvl_decode_job;
typedef qvl_status (*qvl_image_decoder)(qvl_decode_job *job, qvl_image *out, qvl_error *err);
qvl_status qvl_decode_jpeg(qvl_decode_job *job, qvl_image *out, qvl_error *err);
qvl_status qvl_decode_png(qvl_decode_job *job, qvl_image *out, qvl_error *err);
qvl_status qvl_decode_gif(qvl_decode_job *job, qvl_image *out, qvl_error *err);
qvl_status qvl_decode_webp(qvl_decode_job *job, qvl_image *out, qvl_error *err);
qvl_status qvl_decode_pnm(qvl_decode_job *job, qvl_image *out, qvl_error *err);

/* PNG text and metadata chunks, read by qvl instead of libpng (image_png_text.c): every zTXt,
 * iTXt and tEXt is checked against Pillow's limits (QVL_PNG_TEXT_CHUNK_MAX inflated bytes a
 * chunk, QVL_PNG_TEXT_TOTAL_MAX in all; over either is refused, as Pillow refuses it), and the
 * orientation comes from eXIf / "exif" / "Raw profile type exif" / XMP text. */
#define QVL_PNG_TEXT_CHUNK_MAX (1 << 20)
#define QVL_PNG_TEXT_TOTAL_MAX (64 << 20)
qvl_status qvl_png_scan_chunks(const uint8_t *p, size_t n, const char *what,
                               const qvl_image_stop *stop, int *orientation, qvl_error *err);

static inline uint32_t qvl_rd16(const uint8_t *p, bool le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}
static inline uint32_t qvl_rd32(const uint8_t *p, bool le) {
    return le ? qvl_rd16(p, true) | qvl_rd16(p + 2, true) << 16
              : qvl_rd16(p, false) << 16 | qvl_rd16(p + 2, false);
}

#endif
