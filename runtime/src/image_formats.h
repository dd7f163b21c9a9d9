/* What image_load.c shares with the per-format decoders (image_jpeg.c, image_png.c, image_gif.c,
 * image_webp.c, image_pnm.c). Each decoder reads its own header first and passes the declared
 * size through qvl_image_check_size before any library allocates pixels; with header_only it
 * stops there and fills in only width and height (qvl_image_probe). Decoders give the stored
 * pixels as 8-bit RGB the way Pillow's Image.open(f).convert("RGB") does; the EXIF orientation
 * is applied by the caller from qvl_image_orientation. */
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

/* Orientation tag (0x0112) of IFD0 in a TIFF block, with or without an "Exif\0\0" prefix;
 * 1 when absent or malformed. */
int qvl_tiff_orientation(const uint8_t *t, size_t n);

typedef qvl_status (*qvl_image_decoder)(const uint8_t *p, size_t n, const char *what,
                                        bool header_only, qvl_image *out, qvl_error *err);
qvl_status qvl_decode_jpeg(const uint8_t *p, size_t n, const char *what, bool header_only,
                           qvl_image *out, qvl_error *err);
qvl_status qvl_decode_png(const uint8_t *p, size_t n, const char *what, bool header_only,
                          qvl_image *out, qvl_error *err);
qvl_status qvl_decode_gif(const uint8_t *p, size_t n, const char *what, bool header_only,
                          qvl_image *out, qvl_error *err);
qvl_status qvl_decode_webp(const uint8_t *p, size_t n, const char *what, bool header_only,
                           qvl_image *out, qvl_error *err);
qvl_status qvl_decode_pnm(const uint8_t *p, size_t n, const char *what, bool header_only,
                          qvl_image *out, qvl_error *err);

/* EXIF orientation stored in a PNG eXIf chunk or a WebP EXIF chunk (1 when none). */
int qvl_png_exif_orientation(const uint8_t *p, size_t n);
int qvl_webp_exif_orientation(const uint8_t *p, size_t n);

static inline uint32_t qvl_rd16(const uint8_t *p, bool le) {
    return le ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : (uint32_t)p[0] << 8 | (uint32_t)p[1];
}
static inline uint32_t qvl_rd32(const uint8_t *p, bool le) {
    return le ? qvl_rd16(p, true) | qvl_rd16(p + 2, true) << 16
              : qvl_rd16(p, false) << 16 | qvl_rd16(p + 2, false);
}

#endif
